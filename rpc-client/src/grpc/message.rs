//! `GrpcMessageProto`, the one message type Seata's gRPC stream carries, and the
//! translation between it and a v1 [`Frame`], so that everything above the connection
//! (the pending table, heartbeats, merging, handlers) sees the frames it always sees.
//!
//! Seata's `GrpcEncoder` fills `headMap` with the message's head map plus
//! `codec-type` and `compress-type`, and `body` with the message serialized by the
//! `GRPC` serializer (code 40: a `google.protobuf.Any` wrapping the `*Proto` message),
//! then compressed by the message's compressor; heartbeats have an empty body. Its
//! `GrpcDecoder` reads `codec-type` (blank means 40) and so also takes a body in any
//! other codec it has a serializer for. A v1 protobuf body (codec 2) is the same
//! message with its full name in front instead of inside an `Any`, so the two are
//! rewritten into each other byte for byte, without decoding the message.

use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};

use super::GrpcError;
use crate::codec::{CODEC_PROTOBUF, Frame, HeadMap, MessageType};
use crate::compress::decompress;

/// `SerializerType.GRPC`: the codec byte Seata's gRPC bodies carry in `codec-type`.
pub const CODEC_GRPC: u8 = 40;
/// The head-map key naming the body's serializer.
pub const CODEC_TYPE: &str = "codec-type";
/// The head-map key naming the body's compressor.
pub const COMPRESS_TYPE: &str = "compress-type";
/// What `Any.pack` puts in front of a message's full name.
const TYPE_URL_PREFIX: &str = "type.googleapis.com/";

/// `org.apache.seata.protocol.protobuf.GrpcMessageProto` (Seata's `grpcMessage.proto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct GrpcMessageProto {
    /// The request id; an answer carries its request's.
    #[prost(int32, tag = "1")]
    pub id: i32,
    /// v1's message type: 0 request, 1 response, 2 one-way, 3 PING, 4 PONG.
    #[prost(int32, tag = "2")]
    pub message_type: i32,
    /// The head map, with `codec-type` and `compress-type`.
    #[prost(map = "string, string", tag = "3")]
    pub head_map: HashMap<String, String>,
    /// The serialized (and maybe compressed) message.
    #[prost(bytes = "bytes", tag = "4")]
    pub body: Bytes,
}

/// The message Seata's encoder would write for `frame`. `limit` bounds what a
/// compressed body may grow to when it is rewritten.
pub fn to_message(frame: &Frame, limit: usize) -> Result<GrpcMessageProto, GrpcError> {
    let mut head_map: HashMap<String, String> = frame
        .head
        .iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_string(), v.to_string())))
        .collect();
    let heartbeat = matches!(
        frame.msg_type,
        MessageType::HeartbeatRequest | MessageType::HeartbeatResponse
    );
    let (codec, body) = if heartbeat {
        (CODEC_GRPC, Bytes::new())
    } else if frame.codec == CODEC_PROTOBUF {
        let body = recompress(frame.compressor, &frame.body, limit, |plain| {
            named_to_any(plain)
        })?;
        (CODEC_GRPC, body)
    } else {
        (frame.codec, frame.body.clone())
    };
    head_map.insert(CODEC_TYPE.into(), codec.to_string());
    head_map.insert(COMPRESS_TYPE.into(), frame.compressor.to_string());
    Ok(GrpcMessageProto {
        id: frame.request_id as i32,
        message_type: i32::from(frame.msg_type.code()),
        head_map,
        body,
    })
}

/// The frame a message from Seata's encoder stands for: a body of codec 40 becomes the
/// v1 protobuf body (codec 2) the rest of the crate reads.
pub fn from_message(msg: GrpcMessageProto, limit: usize) -> Result<Frame, GrpcError> {
    let msg_type = u8::try_from(msg.message_type)
        .ok()
        .and_then(MessageType::from_code)
        .ok_or_else(|| GrpcError::Message(format!("unknown messageType {}", msg.message_type)))?;
    let mut head_map = msg.head_map;
    let number = |key: &str, v: Option<String>, blank: u8| -> Result<u8, GrpcError> {
        match v.as_deref().map(str::trim) {
            None | Some("") => Ok(blank),
            Some(s) => s
                .parse::<u8>()
                .map_err(|_| GrpcError::Message(format!("headMap {key} is {s:?}, not a code"))),
        }
    };
    let compressor = number(COMPRESS_TYPE, head_map.remove(COMPRESS_TYPE), 0)?;
    let codec = number(CODEC_TYPE, head_map.remove(CODEC_TYPE), CODEC_GRPC)?;
    let heartbeat = matches!(
        msg_type,
        MessageType::HeartbeatRequest | MessageType::HeartbeatResponse
    );
    let (codec, body) = if heartbeat {
        (CODEC_PROTOBUF, Bytes::new())
    } else if codec == CODEC_GRPC {
        let body = recompress(compressor, &msg.body, limit, any_to_named)?;
        (CODEC_PROTOBUF, body)
    } else {
        (codec, msg.body)
    };
    let mut head = HeadMap::with_capacity(head_map.len());
    for (k, v) in head_map {
        head.insert(k, v);
    }
    Ok(Frame {
        msg_type,
        codec,
        compressor,
        request_id: msg.id as u32,
        head,
        body,
    })
}

/// Rewrites a body that may be compressed: decompressed, rewritten, compressed again
/// with the same compressor. Uncompressed bodies (the common case) are rewritten once.
fn recompress(
    compressor: u8,
    body: &[u8],
    limit: usize,
    rewrite: impl FnOnce(&[u8]) -> Result<Bytes, GrpcError>,
) -> Result<Bytes, GrpcError> {
    if compressor == 0 {
        return rewrite(body);
    }
    let c = crate::Compressor::from_code(compressor)
        .map_err(|e| GrpcError::Message(format!("compress-type {compressor}: {e}")))?;
    let plain = decompress(compressor, body, limit)
        .map_err(|e| GrpcError::Message(format!("compress-type {compressor}: {e}")))?;
    let out = rewrite(&plain)?;
    c.compress(&out)
        .map_err(|e| GrpcError::Message(format!("compress-type {compressor}: {e}")))
}

/// `[name length: i32 BE][name][message]` (a v1 protobuf body) as a serialized `Any`.
pub fn named_to_any(body: &[u8]) -> Result<Bytes, GrpcError> {
    let bad = |why: &str| GrpcError::Message(format!("not a Seata protobuf body: {why}"));
    let (len, rest) = body
        .split_first_chunk::<4>()
        .ok_or_else(|| bad("shorter than its name's length"))?;
    let len = usize::try_from(i32::from_be_bytes(*len))
        .ok()
        .filter(|l| (1..=256).contains(l) && *l <= rest.len())
        .ok_or_else(|| bad("the name's length is impossible"))?;
    let (name, value) = rest.split_at(len);
    let any = prost_types::Any {
        type_url: format!(
            "{TYPE_URL_PREFIX}{}",
            std::str::from_utf8(name).map_err(|_| bad("the name is not UTF-8"))?
        ),
        value: value.to_vec(),
    };
    Ok(prost::Message::encode_to_vec(&any).into())
}

/// A serialized `Any` as a v1 protobuf body (the message's full name is the type URL's
/// last segment, as Seata's `GrpcSerializer` reads it).
pub fn any_to_named(body: &[u8]) -> Result<Bytes, GrpcError> {
    let any: prost_types::Any = prost::Message::decode(body)
        .map_err(|e| GrpcError::Message(format!("the body is not a google.protobuf.Any: {e}")))?;
    let name = any.type_url.rsplit('/').next().unwrap_or("");
    if name.is_empty() || name.len() > 256 {
        return Err(GrpcError::Message(format!(
            "the Any's type URL {:?} names no message",
            any.type_url
        )));
    }
    let mut out = BytesMut::with_capacity(4 + name.len() + any.value.len());
    out.put_i32(name.len() as i32);
    out.put_slice(name.as_bytes());
    out.put_slice(&any.value);
    Ok(out.freeze())
}
