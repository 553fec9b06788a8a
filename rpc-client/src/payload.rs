//! What a call carries: a body and a head map, as bytes end to end.

use bytes::Bytes;

use crate::codec::{
    CODEC_PROTOBUF, CODEC_SEATA, COMPRESSOR_NONE, DEFAULT_MAX_FRAME_LEN, Frame, FrameError,
    HeadMap, MessageType, framed_len,
};
use crate::compress::Compressor;
use crate::message::{MessageError, SeataMessage};

/// How a Seata message's body is written: the serializer (the seata or the protobuf
/// codec) and the compressor. Seata's TC and RM answer in their request's format
/// ([`BodyFormat::of`], [`Payload::seata_as`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyFormat {
    /// [`CODEC_SEATA`] or [`CODEC_PROTOBUF`].
    pub codec: u8,
    /// The compressor.
    pub compressor: Compressor,
}

impl Default for BodyFormat {
    /// The seata codec, not compressed.
    fn default() -> Self {
        BodyFormat {
            codec: CODEC_SEATA,
            compressor: Compressor::None,
        }
    }
}

impl BodyFormat {
    /// The format of `p`'s body, for its answer: protobuf when it is, else the seata
    /// codec; its compressor, or none for a code Seata does not define (such a body
    /// fails to decode, and is not answered).
    pub fn of(p: &Payload) -> BodyFormat {
        BodyFormat {
            codec: if p.codec == CODEC_PROTOBUF {
                CODEC_PROTOBUF
            } else {
                CODEC_SEATA
            },
            compressor: p.compressor().unwrap_or_default(),
        }
    }
}

/// The user-visible part of a frame: head map, body, and the codec / compressor bytes
/// that describe the body.
///
/// The body is never decoded or copied by meshline (a gateway forwards a client's bytes
/// as they are); the head map is where routing identity goes (player id, session id,
/// trace id). Build Seata messages with [`Payload::seata`], anything else with
/// [`Payload::new`] and your own codec byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    /// The frame's head map.
    pub head: HeadMap,
    /// The body, as bytes.
    pub body: Bytes,
    /// Serializer code of the body (default [`CODEC_SEATA`]).
    pub codec: u8,
    /// Compressor code of the body (default [`COMPRESSOR_NONE`]).
    pub compressor: u8,
}

impl Payload {
    /// A payload with `body`, an empty head map, the Seata codec byte and no compression.
    pub fn new(body: impl Into<Bytes>) -> Self {
        Payload {
            head: HeadMap::new(),
            body: body.into(),
            codec: CODEC_SEATA,
            compressor: COMPRESSOR_NONE,
        }
    }

    /// A Seata-codec payload carrying `msg`, not compressed.
    pub fn seata(msg: &SeataMessage) -> Result<Self, MessageError> {
        Ok(Payload::new(msg.encode()?))
    }

    /// A Seata-codec payload carrying `msg`, compressed with `compressor` (what a
    /// response does to echo its request's compressor, as Seata's TC and RM do).
    pub fn seata_compressed(
        msg: &SeataMessage,
        compressor: Compressor,
    ) -> Result<Self, MessageError> {
        Payload::seata_as(
            msg,
            BodyFormat {
                codec: CODEC_SEATA,
                compressor,
            },
        )
    }

    /// A payload carrying `msg` written as `format` says: an answer in its request's
    /// [`BodyFormat`], as Seata's TC and RM answer.
    pub fn seata_as(msg: &SeataMessage, format: BodyFormat) -> Result<Self, MessageError> {
        let body: Bytes = if format.codec == CODEC_PROTOBUF {
            crate::message::protobuf::encode(msg)?.into()
        } else {
            msg.encode()?
        };
        let p = if format.compressor == Compressor::None {
            Payload::new(body)
        } else {
            Payload::new(format.compressor.compress(&body)?)
                .with_compressor(format.compressor.code())
        };
        Ok(p.with_codec(format.codec))
    }

    /// Adds a head-map entry.
    pub fn with_head(
        mut self,
        key: impl Into<std::borrow::Cow<'static, str>>,
        value: impl Into<String>,
    ) -> Self {
        self.head.insert(key, value);
        self
    }

    /// Sets the serializer code.
    pub fn with_codec(mut self, codec: u8) -> Self {
        self.codec = codec;
        self
    }

    /// Sets the compressor code. This only labels the body: compress it first
    /// ([`Payload::seata_compressed`], [`Compressor::compress`]), or let the connection
    /// compress Seata requests ([`TransportOptions::compressor`](crate::TransportOptions::compressor)).
    pub fn with_compressor(mut self, compressor: u8) -> Self {
        self.compressor = compressor;
        self
    }

    /// Decodes the body as a Seata message, decompressing it first when the frame says
    /// it is compressed (at most [`DEFAULT_MAX_FRAME_LEN`], 8 MiB, decompressed).
    ///
    /// A body in Seata's protobuf codec is read too ([`crate::message::protobuf`]); one of
    /// another serializer (kryo, hessian, fastjson2) is refused with the serializer's
    /// name, never misread.
    pub fn decode_seata(&self) -> Result<SeataMessage, MessageError> {
        self.decode_seata_limited(DEFAULT_MAX_FRAME_LEN)
    }

    /// [`decode_seata`](Self::decode_seata) with a cap on the decompressed size (a
    /// connection uses its frame limit): a compressed body that would expand past it is
    /// an error, not an allocation.
    pub fn decode_seata_limited(&self, limit: usize) -> Result<SeataMessage, MessageError> {
        if self.codec != CODEC_SEATA && self.codec != CODEC_PROTOBUF {
            return Err(MessageError::NotSeataCodec(self.codec));
        }
        let decompressed;
        let body = if self.compressor != COMPRESSOR_NONE {
            decompressed = crate::compress::decompress(self.compressor, &self.body, limit)?;
            &decompressed
        } else {
            &self.body
        };
        if self.codec == CODEC_PROTOBUF {
            return Ok(crate::message::protobuf::decode(body)?);
        }
        SeataMessage::decode(body)
    }

    /// The compressor the body is labelled with (`Err` for a code Seata does not define).
    pub fn compressor(&self) -> Result<Compressor, crate::compress::CompressError> {
        Compressor::from_code(self.compressor)
    }

    /// The Seata type code at the start of an uncompressed Seata-codec body.
    pub fn seata_type_code(&self) -> Option<i16> {
        (self.codec == CODEC_SEATA && self.compressor == COMPRESSOR_NONE && self.body.len() >= 2)
            .then(|| i16::from_be_bytes([self.body[0], self.body[1]]))
    }

    pub(crate) fn into_frame(self, msg_type: MessageType, request_id: u32) -> Frame {
        Frame {
            msg_type,
            codec: self.codec,
            compressor: self.compressor,
            request_id,
            head: self.head,
            body: self.body,
        }
    }

    pub(crate) fn from_frame(f: Frame) -> Self {
        Payload {
            head: f.head,
            body: f.body,
            codec: f.codec,
            compressor: f.compressor,
        }
    }
}

impl From<Bytes> for Payload {
    fn from(body: Bytes) -> Self {
        Payload::new(body)
    }
}

/// Checks that `payload` can be framed under `max_frame_len`, so the writer never
/// meets an unframeable request and the caller gets the reason.
pub(crate) fn check(payload: &Payload, max_frame_len: usize) -> Result<(), FrameError> {
    framed_len(&payload.head, payload.body.len(), max_frame_len).map(drop)
}
