//! Seata RPC protocol v1 framing as a `tokio_util` codec.
//!
//! Every message between a Seata client and a TC travels in one frame
//! (big-endian, see [docs/seata-compat.md §4.1](https://github.com/meshline/meshline/blob/main/docs/seata-compat.md#41-frame)):
//!
//! ```text
//! offset size field
//!  0      2   magic 0xda 0xda
//!  2      1   version 0x01
//!  3      4   full length (i32): the whole frame, header included
//!  7      2   head length (i16): 16 + head map bytes
//!  9      1   message type (0 request, 1 response, 2 one-way, 3 PING, 4 PONG)
//! 10      1   codec (serializer: 1 = Seata)
//! 11      1   compressor (0 = none)
//! 12      4   request id (i32)
//! 16      -   head map: repeated [i16 len][key][i16 len][value], len -1 = null
//!  -      -   body (full length - head length)
//! ```
//!
//! Why the decoder is strict: a frame that is not exactly this shape means the two ends
//! disagree about the stream, and every byte after it would be misread. So bad magic, an
//! unknown version, lengths that do not add up, a frame over the length limit or a head
//! map that overruns its declared size are all [`FrameError`]s that name the fault, and
//! the connection that produced them is closed. The length limit (default 8 MiB, the
//! same as Seata's `LengthFieldBasedFrameDecoder`) is checked from the 7 bytes that
//! carry it, *before* any buffer grows to hold the frame.
//!
//! Bodies stay [`Bytes`]: the decoder hands out a slice of its read buffer, no copy.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

/// The two magic bytes every v1 frame starts with.
pub const MAGIC: [u8; 2] = [0xda, 0xda];
/// The protocol version this codec speaks.
pub const VERSION: u8 = 1;
/// Size of the fixed header (magic to request id).
pub const HEADER_LEN: usize = 16;
/// Default largest accepted frame, header included: 8 MiB, as in Seata.
pub const DEFAULT_MAX_FRAME_LEN: usize = 8 * 1024 * 1024;

/// Serializer code for Seata's own binary codec (`SerializerType.SEATA`).
pub const CODEC_SEATA: u8 = 0x1;
/// Serializer code for protobuf (`SerializerType.PROTOBUF`).
pub const CODEC_PROTOBUF: u8 = 0x2;
/// Serializer code for Kryo (`SerializerType.KRYO`).
pub const CODEC_KRYO: u8 = 0x4;
/// Serializer code for Hessian (`SerializerType.HESSIAN`, the hex literal `0x16`).
pub const CODEC_HESSIAN: u8 = 0x16;
/// Serializer code for fastjson2 (`SerializerType.FASTJSON2`, `0x64`).
pub const CODEC_FASTJSON2: u8 = 0x64;
/// Compressor code for "not compressed".
pub const COMPRESSOR_NONE: u8 = 0;

/// Seata's name for a serializer code (`SerializerType`), for messages.
pub fn codec_name(code: u8) -> &'static str {
    match code {
        0x01 => "seata",
        0x02 => "protobuf",
        0x04 => "kryo",
        0x08 => "fst",
        0x16 => "hessian",
        0x28 => "grpc",
        0x32 => "jackson",
        0x56 => "fury",
        0x64 => "fastjson2",
        _ => "unknown",
    }
}

/// The frame's message type (byte 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    /// `0`: a request that expects a response with the same id.
    Request,
    /// `1`: the response to a request.
    Response,
    /// `2`: a request that expects no response.
    Oneway,
    /// `3`: heartbeat PING (no body).
    HeartbeatRequest,
    /// `4`: heartbeat PONG (no body), echoing the PING's id.
    HeartbeatResponse,
}

impl MessageType {
    /// The wire code.
    pub fn code(self) -> u8 {
        match self {
            MessageType::Request => 0,
            MessageType::Response => 1,
            MessageType::Oneway => 2,
            MessageType::HeartbeatRequest => 3,
            MessageType::HeartbeatResponse => 4,
        }
    }

    /// The type for a wire code, if it is one of the five v1 knows.
    pub fn from_code(code: u8) -> Option<MessageType> {
        Some(match code {
            0 => MessageType::Request,
            1 => MessageType::Response,
            2 => MessageType::Oneway,
            3 => MessageType::HeartbeatRequest,
            4 => MessageType::HeartbeatResponse,
            _ => return None,
        })
    }
}

/// The frame's head map: string keys and nullable string values, in wire order.
///
/// Java clients normally send none; meshline uses it to carry routing identity (a
/// player id, a session id) next to an opaque body, so a gateway never has to decode
/// the body to route it. Small on purpose: a `Vec`, no hashing; an empty map does not
/// allocate. Keys are `Cow<'static, str>`, so the constant keys a program writes on
/// every message cost no allocation. The entries are shared copy-on-write: cloning a
/// map (as the client does for every send attempt, so a retry can resend the payload)
/// is one reference count, and only a clone that is then changed copies them.
///
/// A decoded map copies nothing: its keys and values stay where they arrived, in the
/// frame's buffer (shared with the body, which is a slice of it too), validated as UTF-8
/// once when decoded; one allocation (the entries) per decoded map instead of one per
/// string. Values set later are owned strings beside them.
#[derive(Clone, Default)]
pub struct HeadMap {
    entries: Option<Arc<Vec<HeadEntry>>>,
    /// The decoded head map's bytes: [`Text::Span`]s point into it (empty for a map
    /// built in code).
    text: Bytes,
}

/// A key or value: owned (or static), or a span of the decoded map's bytes.
#[derive(Clone, Debug)]
enum Text {
    Cow(Cow<'static, str>),
    /// `start..start + len` of [`HeadMap::text`], valid UTF-8 (checked when decoded).
    Span {
        start: u32,
        len: u32,
    },
}

/// One head-map entry: key and nullable value.
type HeadEntry = (Text, Option<Text>);

impl PartialEq for HeadMap {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for HeadMap {}

impl std::fmt::Debug for HeadMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl HeadMap {
    /// An empty map.
    pub fn new() -> Self {
        HeadMap::default()
    }

    /// An empty map with room for `n` entries (one allocation for a map built key by
    /// key).
    pub fn with_capacity(n: usize) -> Self {
        HeadMap {
            entries: (n > 0).then(|| Arc::new(Vec::with_capacity(n))),
            text: Bytes::new(),
        }
    }

    fn slice(&self) -> &[HeadEntry] {
        self.entries.as_deref().map_or(&[], Vec::as_slice)
    }

    /// The bytes of `t`.
    fn bytes_of<'a>(&'a self, t: &'a Text) -> &'a [u8] {
        match t {
            Text::Cow(c) => c.as_bytes(),
            Text::Span { start, len } => self
                .text
                .get(*start as usize..(*start as usize + *len as usize))
                .unwrap_or_default(),
        }
    }

    /// The text of `t` (a span was checked to be UTF-8 when it was decoded).
    fn str_of<'a>(&'a self, t: &'a Text) -> &'a str {
        match t {
            Text::Cow(c) => c,
            Text::Span { .. } => std::str::from_utf8(self.bytes_of(t)).unwrap_or_default(),
        }
    }

    /// The entries to change: copied first if a clone shares them.
    fn entries_mut(&mut self) -> &mut Vec<HeadEntry> {
        Arc::make_mut(self.entries.get_or_insert_with(Default::default))
    }

    fn position(&self, key: &str) -> Option<usize> {
        self.slice()
            .iter()
            .position(|(k, _)| self.bytes_of(k) == key.as_bytes())
    }

    /// Sets `key` to `value`, replacing an earlier value of the same key. A `&'static
    /// str` key is stored without a copy.
    pub fn insert(&mut self, key: impl Into<Cow<'static, str>>, value: impl Into<String>) {
        self.insert_opt(key, Some(value.into()));
    }

    /// Sets `key` to a nullable value (Java `null` is written as length -1).
    pub fn insert_opt(&mut self, key: impl Into<Cow<'static, str>>, value: Option<String>) {
        let key = key.into();
        let value = value.map(|v| Text::Cow(Cow::Owned(v)));
        match self.position(&key) {
            Some(i) => self.entries_mut()[i].1 = value,
            None => self.entries_mut().push((Text::Cow(key), value)),
        }
    }

    /// The value of `key`; `None` when absent or null.
    pub fn get(&self, key: &str) -> Option<&str> {
        let i = self.position(key)?;
        self.slice()[i].1.as_ref().map(|v| self.str_of(v))
    }

    /// Removes `key` and returns its value.
    pub fn remove(&mut self, key: &str) -> Option<Option<String>> {
        let i = self.position(key)?;
        let value = self.slice()[i]
            .1
            .as_ref()
            .map(|v| self.str_of(v).to_string());
        self.entries_mut().remove(i);
        Some(value)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.slice().len()
    }

    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.slice().is_empty()
    }

    /// The entries in wire order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        self.slice()
            .iter()
            .map(|(k, v)| (self.str_of(k), v.as_ref().map(|v| self.str_of(v))))
    }

    /// Bytes this map takes on the wire, or an error naming the entry that cannot be
    /// written (a key or value longer than `i16::MAX` bytes).
    pub fn encoded_len(&self) -> Result<usize, FrameError> {
        let mut n = 0usize;
        for (k, v) in self.slice() {
            let k = self.bytes_of(k);
            if k.len() > i16::MAX as usize {
                return Err(FrameError::HeadEntryTooLong { len: k.len() });
            }
            n += 2 + k.len() + 2;
            if let Some(v) = v {
                let v = self.bytes_of(v);
                if v.len() > i16::MAX as usize {
                    return Err(FrameError::HeadEntryTooLong { len: v.len() });
                }
                n += v.len();
            }
        }
        Ok(n)
    }

    fn encode_into(&self, dst: &mut BytesMut) {
        for (k, v) in self.slice() {
            let k = self.bytes_of(k);
            dst.put_i16(k.len() as i16);
            dst.put_slice(k);
            match v {
                Some(v) => {
                    let v = self.bytes_of(v);
                    dst.put_i16(v.len() as i16);
                    dst.put_slice(v);
                }
                None => dst.put_i16(-1),
            }
        }
    }

    /// Parses a head map that must fill `buf` exactly (a copy of it: see
    /// [`HeadMap::decode_shared`]).
    #[cfg(test)]
    fn decode(buf: &[u8]) -> Result<HeadMap, FrameError> {
        HeadMap::decode_shared(Bytes::copy_from_slice(buf))
    }

    /// Parses a head map that must fill `head` exactly, keeping its strings in `head`.
    ///
    /// A key that appears twice keeps its **last** value, as Java's `HashMap` does when
    /// Seata decodes the same bytes: otherwise a gateway could check one value while a
    /// Java backend acts on another.
    fn decode_shared(head: Bytes) -> Result<HeadMap, FrameError> {
        // Sized once: growing entry by entry reallocated three times for a typical map.
        let mut entries: Vec<HeadEntry> = Vec::with_capacity(count_entries(&head));
        let mut at = 0usize;
        // Small maps (the norm) dedupe by scanning; large ones through an index, so a
        // 32 KiB head of tiny entries stays linear.
        let mut index: Option<std::collections::HashMap<&[u8], usize>> = None;
        while at < head.len() {
            let key = read_head_span(&head, &mut at, "key")?
                .ok_or(FrameError::BadHeadMap { reason: "null key" })?;
            let value = read_head_span(&head, &mut at, "value")?;
            let key_bytes = span_bytes(&head, &key);
            if entries.len() >= 16 && index.is_none() {
                index = Some(
                    entries
                        .iter()
                        .enumerate()
                        .map(|(i, (k, _))| (span_bytes(&head, k), i))
                        .collect(),
                );
            }
            let existing = match &index {
                Some(ix) => ix.get(key_bytes).copied(),
                None => entries
                    .iter()
                    .position(|(k, _)| span_bytes(&head, k) == key_bytes),
            };
            match existing {
                Some(i) => entries[i].1 = value,
                None => {
                    if let Some(ix) = &mut index {
                        ix.insert(key_bytes, entries.len());
                    }
                    entries.push((key, value));
                }
            }
        }
        drop(index);
        Ok(HeadMap {
            entries: (!entries.is_empty()).then(|| Arc::new(entries)),
            text: head,
        })
    }
}

impl HeadMap {
    /// A writer for a map of up to `entries` entries whose values take about
    /// `text_bytes` bytes in all: see [`HeadMapWriter`].
    pub fn writer(entries: usize, text_bytes: usize) -> HeadMapWriter {
        HeadMapWriter {
            entries: Vec::with_capacity(entries),
            text: BytesMut::with_capacity(text_bytes),
        }
    }
}

/// Builds a [`HeadMap`] whose values are written into one buffer: two allocations for
/// the whole map (the entries and the values' bytes) instead of one per value. For a
/// caller that stamps the same keys on every message (a gateway writing a player's
/// identity on each forwarded request), where a `String` per value was most of the
/// cost of building the map. Keys are `&'static str`, stored without a copy.
///
/// The map it makes is like any other: it reads, changes, clones and encodes the same.
///
/// ```
/// use meshline_rpc_client::HeadMap;
/// let mut w = HeadMap::writer(2, 16);
/// w.entry("player", "alice").entry("seq", "7");
/// let head = w.finish();
/// assert_eq!(head.get("player"), Some("alice"));
/// assert_eq!(head.get("seq"), Some("7"));
/// ```
#[derive(Debug)]
pub struct HeadMapWriter {
    entries: Vec<HeadEntry>,
    text: BytesMut,
}

impl HeadMapWriter {
    /// Sets `key` to `value` (replacing an earlier value of the same key, as
    /// [`HeadMap::insert`] does).
    pub fn entry(&mut self, key: &'static str, value: &str) -> &mut Self {
        let start = self.text.len();
        self.text.extend_from_slice(value.as_bytes());
        let span = Text::Span {
            start: start as u32,
            len: value.len() as u32,
        };
        let at = self.entries.iter().position(|(k, _)| match k {
            Text::Cow(k) => k == key,
            Text::Span { .. } => false,
        });
        match at {
            Some(i) => self.entries[i].1 = Some(span),
            None => self
                .entries
                .push((Text::Cow(Cow::Borrowed(key)), Some(span))),
        }
        self
    }

    /// The map.
    pub fn finish(self) -> HeadMap {
        HeadMap {
            entries: (!self.entries.is_empty()).then(|| Arc::new(self.entries)),
            text: self.text.freeze(),
        }
    }
}

/// How many entries `head` seems to hold, from its length fields alone (the entries are
/// checked as they are read; this only sizes the list, at most 64 ahead).
fn count_entries(head: &[u8]) -> usize {
    let mut at = 0usize;
    let mut n = 0usize;
    let skip = |at: &mut usize| -> bool {
        let Some(&[hi, lo]) = head.get(*at..*at + 2) else {
            return false;
        };
        *at += 2 + usize::try_from(i16::from_be_bytes([hi, lo])).unwrap_or(0);
        true
    };
    while n < 64 && skip(&mut at) && skip(&mut at) {
        n += 1;
    }
    n
}

/// The bytes of a decoded span of `head` (spans of [`HeadMap::decode_shared`] only).
fn span_bytes<'a>(head: &'a [u8], t: &Text) -> &'a [u8] {
    match t {
        Text::Span { start, len } => head
            .get(*start as usize..(*start as usize + *len as usize))
            .unwrap_or_default(),
        Text::Cow(_) => &[],
    }
}

impl<K: Into<Cow<'static, str>>, V: Into<String>> FromIterator<(K, V)> for HeadMap {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut m = HeadMap::new();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

/// Reads `[i16 len][bytes]` of `head` at `*at`: the bytes' span (checked to be UTF-8),
/// `None` for length -1 (Java's null).
fn read_head_span(
    head: &[u8],
    at: &mut usize,
    what: &'static str,
) -> Result<Option<Text>, FrameError> {
    let Some(&[hi, lo]) = head.get(*at..*at + 2) else {
        return Err(FrameError::BadHeadMap {
            reason: if what == "key" {
                "truncated key length"
            } else {
                "truncated value length"
            },
        });
    };
    *at += 2;
    let len = i16::from_be_bytes([hi, lo]);
    if len == -1 {
        return Ok(None);
    }
    if len < 0 {
        return Err(FrameError::BadHeadMap {
            reason: "negative string length other than -1",
        });
    }
    let len = len as usize;
    let Some(s) = head.get(*at..*at + len) else {
        return Err(FrameError::BadHeadMap {
            reason: "entry runs past the declared head length",
        });
    };
    if std::str::from_utf8(s).is_err() {
        return Err(FrameError::BadHeadMap {
            reason: "entry is not UTF-8",
        });
    }
    let span = Text::Span {
        start: *at as u32,
        len: len as u32,
    };
    *at += len;
    Ok(Some(span))
}

/// One v1 frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Request, response, one-way or heartbeat.
    pub msg_type: MessageType,
    /// Serializer code of the body ([`CODEC_SEATA`] for Seata's own messages).
    pub codec: u8,
    /// Compressor code of the body ([`COMPRESSOR_NONE`] unless compressed).
    pub compressor: u8,
    /// Request id; a response carries its request's id.
    pub request_id: u32,
    /// The head map.
    pub head: HeadMap,
    /// The body, undecoded.
    pub body: Bytes,
}

impl Frame {
    /// A heartbeat PING with the Seata codec and no compression.
    pub fn ping(request_id: u32) -> Frame {
        Frame {
            msg_type: MessageType::HeartbeatRequest,
            codec: CODEC_SEATA,
            compressor: COMPRESSOR_NONE,
            request_id,
            head: HeadMap::new(),
            body: Bytes::new(),
        }
    }

    /// The PONG answering `ping`: same id, codec and compressor (as Seata's
    /// `ServerHeartbeatProcessor` does).
    pub fn pong_for(ping: &Frame) -> Frame {
        Frame {
            msg_type: MessageType::HeartbeatResponse,
            codec: ping.codec,
            compressor: ping.compressor,
            request_id: ping.request_id,
            head: HeadMap::new(),
            body: Bytes::new(),
        }
    }

    /// Total bytes on the wire, or why the frame cannot be written under `max_len`.
    pub fn encoded_len(&self, max_len: usize) -> Result<usize, FrameError> {
        let head = self.head.encoded_len()?;
        let head_len = HEADER_LEN + head;
        if head_len > i16::MAX as usize {
            return Err(FrameError::HeadTooLong { len: head_len });
        }
        let full = head_len + self.body.len();
        if full > max_len {
            return Err(FrameError::TooLong {
                len: full,
                max: max_len,
            });
        }
        Ok(full)
    }

    /// Appends the frame to `dst` (after [`encoded_len`](Self::encoded_len) checks).
    pub fn encode_into(&self, dst: &mut BytesMut, max_len: usize) -> Result<(), FrameError> {
        let full = self.encoded_len(max_len)?;
        let head_len = full - self.body.len();
        dst.reserve(full);
        dst.put_slice(&MAGIC);
        dst.put_u8(VERSION);
        dst.put_i32(full as i32);
        dst.put_i16(head_len as i16);
        dst.put_u8(self.msg_type.code());
        dst.put_u8(self.codec);
        dst.put_u8(self.compressor);
        dst.put_u32(self.request_id);
        self.head.encode_into(dst);
        dst.put_slice(&self.body);
        Ok(())
    }
}

/// Why a byte stream is not a valid v1 frame (the connection is closed), or why a frame
/// cannot be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The first two bytes are not `0xda 0xda`: the peer does not speak Seata v1 (or
    /// the stream is out of step).
    #[error("bad magic 0x{0:02x}{1:02x} (expected 0xdada): the peer does not speak Seata RPC v1")]
    BadMagic(u8, u8),
    /// The version byte is not 1.
    #[error("unsupported protocol version {0} (this codec speaks version 1)")]
    BadVersion(u8),
    /// Full length over the configured limit.
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    TooLong {
        /// Declared or computed length.
        len: usize,
        /// The limit in force.
        max: usize,
    },
    /// Full length below the 16-byte header, or below the head length.
    #[error("bad frame lengths: full length {full}, head length {head} (need 16 <= head <= full)")]
    BadLength {
        /// Declared full length (may be negative on the wire).
        full: i64,
        /// Declared head length.
        head: i64,
    },
    /// Unknown message type byte.
    #[error("unknown message type {0} (v1 knows 0..=4)")]
    BadMessageType(u8),
    /// The head map is malformed.
    #[error("bad head map: {reason}")]
    BadHeadMap {
        /// What is wrong.
        reason: &'static str,
    },
    /// A head-map key or value longer than an `i16` length can say.
    #[error("head map entry of {len} bytes is longer than 32767")]
    HeadEntryTooLong {
        /// Its length.
        len: usize,
    },
    /// The head map does not fit the `i16` head length.
    #[error("head of {len} bytes is longer than 32767")]
    HeadTooLong {
        /// Header plus head map length.
        len: usize,
    },
    /// Reading or writing the socket failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// The v1 frame codec: [`Decoder`] and [`Encoder`] for [`Frame`].
#[derive(Debug, Clone, Copy)]
pub struct FrameCodec {
    max_frame_len: usize,
}

impl Default for FrameCodec {
    fn default() -> Self {
        FrameCodec::new(DEFAULT_MAX_FRAME_LEN)
    }
}

impl FrameCodec {
    /// A codec that refuses frames longer than `max_frame_len` bytes (header included;
    /// raised to the 16-byte header if smaller).
    pub fn new(max_frame_len: usize) -> Self {
        FrameCodec {
            max_frame_len: max_frame_len.clamp(HEADER_LEN, i32::MAX as usize),
        }
    }

    /// The length limit in force.
    pub fn max_frame_len(&self) -> usize {
        self.max_frame_len
    }
}

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        // Check what we can as soon as the bytes are there, so garbage is refused
        // without waiting for (or allocating) a frame's worth of data.
        if src.len() >= 2 && src[..2] != MAGIC {
            return Err(FrameError::BadMagic(src[0], src[1]));
        }
        if src.len() >= 3 && src[2] != VERSION {
            return Err(FrameError::BadVersion(src[2]));
        }
        if src.len() < 7 {
            return Ok(None);
        }
        let full = i32::from_be_bytes([src[3], src[4], src[5], src[6]]);
        if full < HEADER_LEN as i32 {
            return Err(FrameError::BadLength {
                full: full.into(),
                head: if src.len() >= 9 {
                    i16::from_be_bytes([src[7], src[8]]).into()
                } else {
                    -1
                },
            });
        }
        let full = full as usize;
        if full > self.max_frame_len {
            return Err(FrameError::TooLong {
                len: full,
                max: self.max_frame_len,
            });
        }
        if src.len() >= 9 {
            let head = i16::from_be_bytes([src[7], src[8]]);
            if head < HEADER_LEN as i16 || head as usize > full {
                return Err(FrameError::BadLength {
                    full: full as i64,
                    head: head.into(),
                });
            }
        }
        if src.len() >= 10 && MessageType::from_code(src[9]).is_none() {
            return Err(FrameError::BadMessageType(src[9]));
        }
        if src.len() < full {
            // Not reserving `full` here on purpose: the buffer grows with the bytes that
            // arrive, so a peer that announces 8 MiB and sends 16 bytes costs 16 bytes
            // (plus the reader's small read buffer), not 8 MiB.
            return Ok(None);
        }
        let msg_type = MessageType::from_code(src[9]).ok_or(FrameError::BadMessageType(src[9]))?;
        let mut frame = src.split_to(full).freeze();
        frame.advance(7);
        let head_len = frame.get_i16() as usize;
        frame.advance(1);
        let codec = frame.get_u8();
        let compressor = frame.get_u8();
        let request_id = frame.get_u32();
        let head_map_len = head_len - HEADER_LEN;
        let head = if head_map_len == 0 {
            HeadMap::new()
        } else {
            // The head's strings stay in the frame's buffer (as the body does).
            HeadMap::decode_shared(frame.split_to(head_map_len))?
        };
        Ok(Some(Frame {
            msg_type,
            codec,
            compressor,
            request_id,
            head,
            body: frame,
        }))
    }
}

impl Encoder<Frame> for FrameCodec {
    type Error = FrameError;

    fn encode(&mut self, item: Frame, dst: &mut BytesMut) -> Result<(), FrameError> {
        item.encode_into(dst, self.max_frame_len)
    }
}

impl Encoder<&Frame> for FrameCodec {
    type Error = FrameError;

    fn encode(&mut self, item: &Frame, dst: &mut BytesMut) -> Result<(), FrameError> {
        item.encode_into(dst, self.max_frame_len)
    }
}

#[cfg(test)]
mod tests;
