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

mod head_map;
#[cfg(test)]
use head_map::Text;
pub use head_map::{HeadMap, HeadMapWriter};

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

/// The bytes a frame of `head` and a body of `body_len` bytes takes on the wire, or
/// why it cannot be written under `max_len` (its head's length field is an i16).
pub(crate) fn framed_len(
    head: &HeadMap,
    body_len: usize,
    max_len: usize,
) -> Result<usize, FrameError> {
    let head_len = HEADER_LEN + head.encoded_len()?;
    if head_len > i16::MAX as usize {
        return Err(FrameError::HeadTooLong { len: head_len });
    }
    let full = head_len + body_len;
    if full > max_len {
        return Err(FrameError::TooLong {
            len: full,
            max: max_len,
        });
    }
    Ok(full)
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
        framed_len(&self.head, self.body.len(), max_len)
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
