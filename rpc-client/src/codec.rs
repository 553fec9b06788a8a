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
/// Compressor code for "not compressed".
pub const COMPRESSOR_NONE: u8 = 0;

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
/// allocate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeadMap {
    entries: Vec<(String, Option<String>)>,
}

impl HeadMap {
    /// An empty map.
    pub fn new() -> Self {
        HeadMap::default()
    }

    /// Sets `key` to `value`, replacing an earlier value of the same key.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.insert_opt(key, Some(value.into()));
    }

    /// Sets `key` to a nullable value (Java `null` is written as length -1).
    pub fn insert_opt(&mut self, key: impl Into<String>, value: Option<String>) {
        let key = key.into();
        if let Some(slot) = self.entries.iter_mut().find(|(k, _)| *k == key) {
            slot.1 = value;
        } else {
            self.entries.push((key, value));
        }
    }

    /// The value of `key`; `None` when absent or null.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_deref())
    }

    /// Removes `key` and returns its value.
    pub fn remove(&mut self, key: &str) -> Option<Option<String>> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(i).1)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries in wire order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_deref()))
    }

    /// Bytes this map takes on the wire, or an error naming the entry that cannot be
    /// written (a key or value longer than `i16::MAX` bytes).
    pub fn encoded_len(&self) -> Result<usize, FrameError> {
        let mut n = 0usize;
        for (k, v) in &self.entries {
            if k.len() > i16::MAX as usize {
                return Err(FrameError::HeadEntryTooLong { len: k.len() });
            }
            n += 2 + k.len() + 2;
            if let Some(v) = v {
                if v.len() > i16::MAX as usize {
                    return Err(FrameError::HeadEntryTooLong { len: v.len() });
                }
                n += v.len();
            }
        }
        Ok(n)
    }

    fn encode_into(&self, dst: &mut BytesMut) {
        for (k, v) in &self.entries {
            dst.put_i16(k.len() as i16);
            dst.put_slice(k.as_bytes());
            match v {
                Some(v) => {
                    dst.put_i16(v.len() as i16);
                    dst.put_slice(v.as_bytes());
                }
                None => dst.put_i16(-1),
            }
        }
    }

    /// Parses a head map that must fill `buf` exactly.
    ///
    /// A key that appears twice keeps its **last** value, as Java's `HashMap` does when
    /// Seata decodes the same bytes: otherwise a gateway could check one value while a
    /// Java backend acts on another.
    fn decode(mut buf: &[u8]) -> Result<HeadMap, FrameError> {
        let mut map = HeadMap::new();
        // Small maps (the norm) dedupe by scanning; large ones through an index, so a
        // 32 KiB head of tiny entries stays linear.
        let mut index: Option<std::collections::HashMap<String, usize>> = None;
        while !buf.is_empty() {
            let key = read_head_string(&mut buf, "key")?
                .ok_or(FrameError::BadHeadMap { reason: "null key" })?;
            let value = read_head_string(&mut buf, "value")?;
            if map.entries.len() >= 16 && index.is_none() {
                index = Some(
                    map.entries
                        .iter()
                        .enumerate()
                        .map(|(i, (k, _))| (k.clone(), i))
                        .collect(),
                );
            }
            let existing = match &index {
                Some(ix) => ix.get(&key).copied(),
                None => map.entries.iter().position(|(k, _)| *k == key),
            };
            match existing {
                Some(i) => map.entries[i].1 = value,
                None => {
                    if let Some(ix) = &mut index {
                        ix.insert(key.clone(), map.entries.len());
                    }
                    map.entries.push((key, value));
                }
            }
        }
        Ok(map)
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for HeadMap {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut m = HeadMap::new();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

fn read_head_string(buf: &mut &[u8], what: &'static str) -> Result<Option<String>, FrameError> {
    if buf.len() < 2 {
        return Err(FrameError::BadHeadMap {
            reason: if what == "key" {
                "truncated key length"
            } else {
                "truncated value length"
            },
        });
    }
    let len = buf.get_i16();
    if len == -1 {
        return Ok(None);
    }
    if len < 0 {
        return Err(FrameError::BadHeadMap {
            reason: "negative string length other than -1",
        });
    }
    let len = len as usize;
    if buf.len() < len {
        return Err(FrameError::BadHeadMap {
            reason: "entry runs past the declared head length",
        });
    }
    let (s, rest) = buf.split_at(len);
    *buf = rest;
    match std::str::from_utf8(s) {
        Ok(s) => Ok(Some(s.to_owned())),
        Err(_) => Err(FrameError::BadHeadMap {
            reason: "entry is not UTF-8",
        }),
    }
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
        let mut frame = src.split_to(full);
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
            HeadMap::decode(&frame[..head_map_len])?
        };
        frame.advance(head_map_len);
        Ok(Some(Frame {
            msg_type,
            codec,
            compressor,
            request_id,
            head,
            body: frame.freeze(),
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
mod tests {
    use super::*;

    pub(crate) fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn encode(f: &Frame) -> Vec<u8> {
        let mut b = BytesMut::new();
        FrameCodec::default().encode(f, &mut b).unwrap();
        b.to_vec()
    }

    fn decode_all(bytes: &[u8]) -> Result<Vec<Frame>, FrameError> {
        let mut c = FrameCodec::default();
        let mut b = BytesMut::from(bytes);
        let mut out = Vec::new();
        while let Some(f) = c.decode(&mut b)? {
            out.push(f);
        }
        assert!(b.is_empty(), "left over bytes: {b:?}");
        Ok(out)
    }

    #[test]
    fn ping_pong_vectors() {
        // docs/seata-compat.md §4.3
        let ping = hex("dada0100000010001003010000000001");
        assert_eq!(encode(&Frame::ping(1)), ping);
        let f = decode_all(&ping).unwrap().remove(0);
        assert_eq!(f, Frame::ping(1));
        let pong = hex("dada0100000010001004010000000001");
        assert_eq!(encode(&Frame::pong_for(&f)), pong);
    }

    #[test]
    fn ping_with_head_vector() {
        let v = hex("dada010000001600160301000000000700016b000176");
        let mut f = Frame::ping(7);
        f.head.insert("k", "v");
        assert_eq!(encode(&f), v);
        let d = decode_all(&v).unwrap().remove(0);
        assert_eq!(d.head.get("k"), Some("v"));
        assert_eq!(d, f);
    }

    #[test]
    fn null_and_empty_head_values() {
        let mut f = Frame::ping(9);
        f.head.insert_opt("n", None);
        f.head.insert("e", "");
        let bytes = encode(&f);
        let d = decode_all(&bytes).unwrap().remove(0);
        assert_eq!(
            d.head.iter().collect::<Vec<_>>(),
            vec![("n", None), ("e", Some(""))]
        );
    }

    #[test]
    fn decodes_byte_by_byte_and_back_to_back() {
        let mut f = Frame::ping(3);
        f.msg_type = MessageType::Request;
        f.head.insert("player", "42");
        f.body = Bytes::from_static(b"hello");
        let one = encode(&f);
        let mut stream = one.clone();
        stream.extend_from_slice(&encode(&Frame::ping(4)));
        let mut c = FrameCodec::default();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for b in &stream {
            buf.put_u8(*b);
            if let Some(x) = c.decode(&mut buf).unwrap() {
                got.push(x);
            }
        }
        assert_eq!(got, vec![f, Frame::ping(4)]);
    }

    #[test]
    fn faults_are_named() {
        let cases: &[(&str, &str)] = &[
            ("dbda01", "bad magic 0xdbda"),
            ("dada02", "unsupported protocol version 2"),
            ("dada010000000f", "full length 15"),
            ("dada0180000000", "full length -2147483648"),
            (
                "dada010080000100",
                "8388609 bytes exceeds the 8388608-byte limit",
            ),
            ("dada0100000010000f", "head length 15"),
            ("dada0100000010001100", "head length 17"),
            ("dada010000001000100901", "unknown message type 9"),
            // head map: key length says 5 but only 1 byte left before the body.
            ("dada010000001300130001000000000100050a", "entry runs past"),
            // head map: odd single byte.
            ("dada0100000011001100010000000001ff", "truncated key length"),
            // head map: key length -2.
            (
                "dada01000000120012000100000000fffffe",
                "negative string length",
            ),
            // head map: null key.
            ("dada0100000014001400010000000001ffff0000", "null key"),
            // head map: invalid UTF-8 key.
            ("dada0100000015001500010000000001000180ffff", "not UTF-8"),
        ];
        for (input, want) in cases {
            let err = decode_all(&hex(input)).expect_err(input).to_string();
            assert!(err.contains(want), "{input}: `{err}` lacks `{want}`");
        }
    }

    #[test]
    fn limit_is_checked_before_allocating() {
        let mut c = FrameCodec::new(1024);
        let mut b = BytesMut::from(&hex("dada0100000401")[..]);
        let err = c.decode(&mut b).unwrap_err().to_string();
        assert!(
            err.contains("1025 bytes exceeds the 1024-byte limit"),
            "{err}"
        );
        assert!(b.capacity() < 1024);
        // A frame at the limit is accepted.
        let f = Frame {
            body: Bytes::from(vec![7u8; 1024 - HEADER_LEN]),
            ..Frame::ping(1)
        };
        let mut out = BytesMut::new();
        c.encode(&f, &mut out).unwrap();
        assert_eq!(c.decode(&mut out).unwrap().unwrap(), f);
        // One more byte is refused on encode, too.
        let f2 = Frame {
            body: Bytes::from(vec![7u8; 1025 - HEADER_LEN]),
            ..Frame::ping(1)
        };
        assert!(matches!(
            c.encode(&f2, &mut BytesMut::new()),
            Err(FrameError::TooLong { len: 1025, .. })
        ));
    }

    #[test]
    fn an_announced_length_is_not_reserved_before_the_bytes_arrive() {
        // A header announcing an 8 MiB request, then nothing more: the buffer must not
        // grow to the announced size (1,000 such peers would pin 8 GiB).
        let mut c = FrameCodec::default();
        let mut b = BytesMut::with_capacity(64);
        b.extend_from_slice(&hex("dada0100800000001000010000000007"));
        assert!(c.decode(&mut b).unwrap().is_none());
        assert!(b.capacity() < 4096, "capacity {}", b.capacity());
    }

    #[test]
    fn a_repeated_head_key_keeps_its_last_value_as_java_does() {
        let mut wire = BytesMut::new();
        let mut f = Frame::ping(5);
        f.msg_type = MessageType::Request;
        f.head.insert("account", "attacker");
        f.head.insert("other", "x");
        f.encode_into(&mut wire, DEFAULT_MAX_FRAME_LEN).unwrap();
        // Append a second `account` entry to the head map by hand and fix the lengths.
        let extra = [&[0u8, 7][..], b"account", &[0, 6], b"victim"].concat();
        let head_end = HEADER_LEN + f.head.encoded_len().unwrap();
        let mut bytes = wire.to_vec();
        bytes.splice(head_end..head_end, extra.iter().copied());
        let full = bytes.len() as i32;
        bytes[3..7].copy_from_slice(&full.to_be_bytes());
        let head = (head_end + extra.len()) as i16;
        bytes[7..9].copy_from_slice(&head.to_be_bytes());
        let d = decode_all(&bytes).unwrap().remove(0);
        assert_eq!(d.head.get("account"), Some("victim"));
        assert_eq!(d.head.len(), 2, "{:?}", d.head);
        // The same with more than 16 entries (the indexed path).
        let mut many = HeadMap::new();
        for i in 0..40 {
            many.insert(format!("k{i}"), "first");
        }
        let mut raw = BytesMut::new();
        many.encode_into(&mut raw);
        for i in (0..40).step_by(3) {
            HeadMap::from_iter([(format!("k{i}"), "last")]).encode_into(&mut raw);
        }
        let m = HeadMap::decode(&raw).unwrap();
        assert_eq!(m.len(), 40);
        for i in 0..40 {
            let want = if i % 3 == 0 { "last" } else { "first" };
            assert_eq!(m.get(&format!("k{i}")), Some(want), "k{i}");
        }
    }

    #[test]
    fn head_entry_too_long_is_refused_on_encode() {
        let mut f = Frame::ping(1);
        f.head.insert("k", "x".repeat(40_000));
        assert!(matches!(
            FrameCodec::default().encode(&f, &mut BytesMut::new()),
            Err(FrameError::HeadEntryTooLong { len: 40_000 })
        ));
    }

    fn arb_frame() -> impl proptest::strategy::Strategy<Value = Frame> {
        use proptest::prelude::*;
        (
            0u8..5,
            any::<u8>(),
            any::<u8>(),
            any::<u32>(),
            proptest::collection::vec(("\\PC{0,8}", proptest::option::of("\\PC{0,8}")), 0..4),
            proptest::collection::vec(any::<u8>(), 0..64),
        )
            .prop_map(|(t, codec, compressor, id, head, body)| {
                let mut h = HeadMap::new();
                for (k, v) in head {
                    h.insert_opt(k, v);
                }
                Frame {
                    msg_type: MessageType::from_code(t).unwrap(),
                    codec,
                    compressor,
                    request_id: id,
                    head: h,
                    body: Bytes::from(body),
                }
            })
    }

    proptest::proptest! {
        #[test]
        fn round_trip(frames in proptest::collection::vec(arb_frame(), 1..4), split in 0usize..200) {
            let mut wire = BytesMut::new();
            let mut c = FrameCodec::default();
            for f in &frames {
                c.encode(f, &mut wire).unwrap();
            }
            // Feed in two pieces at an arbitrary point.
            let split = split.min(wire.len());
            let tail = wire.split_off(split);
            let mut buf = wire;
            let mut got = Vec::new();
            while let Some(f) = c.decode(&mut buf).unwrap() { got.push(f); }
            buf.extend_from_slice(&tail);
            while let Some(f) = c.decode(&mut buf).unwrap() { got.push(f); }
            proptest::prop_assert!(buf.is_empty());
            proptest::prop_assert_eq!(got, frames);
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let mut c = FrameCodec::new(4096);
            let mut buf = BytesMut::from(&bytes[..]);
            // Decode until an error, a need for more input, or the buffer is empty.
            while let Ok(Some(_)) = c.decode(&mut buf) {}
        }

        #[test]
        fn random_bytes_after_valid_header_never_panic(
            full in 16i32..200, head in 16i16..200, t in 0u8..5,
            rest in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..220),
        ) {
            let mut bytes = vec![0xda, 0xda, 1];
            bytes.extend_from_slice(&full.to_be_bytes());
            bytes.extend_from_slice(&head.to_be_bytes());
            bytes.push(t);
            bytes.extend_from_slice(&rest);
            let mut c = FrameCodec::new(4096);
            let mut buf = BytesMut::from(&bytes[..]);
            while let Ok(Some(_)) = c.decode(&mut buf) {}
        }
    }
}
