//! Seata's protobuf bodies: every [`SeataMessage`] as Seata's
//! `seata-serializer-protobuf` writes it, for the two places Seata puts them:
//!
//! - [`encode`] / [`decode`]: the body of a v1 frame whose codec is protobuf
//!   (`transport.serialization = protobuf`, codec byte 0x2), as Seata's
//!   `ProtobufSerializer` frames it: the message's full proto name with a 4-byte
//!   big-endian length before it, then the message's bytes;
//! - [`encode_any`] / [`decode_any`]: the body of a gRPC `GrpcMessageProto` (Seata
//!   2.x's gRPC transport), a `google.protobuf.Any` as `GrpcSerializer` packs it
//!   (`type.googleapis.com/org.apache.seata.protocol.protobuf.XxxProto`).
//!
//! The messages are written with prost's derive (`pb`), so nothing runs
//! `protoc` at build time; their bytes are checked against vectors that `protoc` made
//! from Seata's own `.proto` files. The protos number their enums on their own, and
//! some v1 constants have no proto value (`enums`): encoding one is a [`ProtoError`]
//! naming it, where Seata's Java convertor throws.

mod decode;
mod encode;
mod enums;
mod pb;

use super::SeataMessage;

/// The most a proto name may be (Seata's longest is 32 bytes): a frame that says more
/// is not a protobuf body.
const MAX_NAME: usize = 256;

/// Why a protobuf body could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtoError {
    /// A v1 constant Seata's protos have no value for (Java's convertor throws on it).
    #[error("{what} {name} has no value in Seata's protobuf messages")]
    NoProtoValue {
        /// The enum.
        what: &'static str,
        /// The constant, as Java names it.
        name: &'static str,
    },
    /// An enum field with a number the proto does not define.
    #[error("{what}: unknown number {number}")]
    UnknownNumber {
        /// The enum (or field).
        what: &'static str,
        /// The number read.
        number: i32,
    },
    /// A body naming a message Seata does not define.
    #[error("no Seata protobuf message is named `{0}`")]
    UnknownMessage(String),
    /// The message's bytes do not parse as the message named.
    #[error("{name}: {reason}")]
    Decode {
        /// The message's name.
        name: String,
        /// What prost said.
        reason: String,
    },
    /// An envelope (merged, batch result) inside an envelope.
    #[error("an envelope cannot carry {0}")]
    NotNestable(&'static str),
    /// The body's name prefix is cut short or impossible.
    #[error("not a Seata protobuf body: {0}")]
    Framing(String),
}

/// `msg` as the body of a v1 frame with the protobuf codec: `[name length: i32 BE]
/// [full proto name][message bytes]`.
pub fn encode(msg: &SeataMessage) -> Result<Vec<u8>, ProtoError> {
    let (name, bytes) = encode::to_proto(msg)?;
    let full = format!("{}.{name}", pb::PACKAGE);
    let mut out = Vec::with_capacity(4 + full.len() + bytes.len());
    out.extend_from_slice(&(full.len() as i32).to_be_bytes());
    out.extend_from_slice(full.as_bytes());
    out.extend_from_slice(&bytes);
    Ok(out)
}

/// The message a v1 protobuf body holds.
pub fn decode(body: &[u8]) -> Result<SeataMessage, ProtoError> {
    let Some((len, rest)) = body.split_first_chunk::<4>() else {
        return Err(ProtoError::Framing(format!(
            "{} bytes, shorter than the name's length",
            body.len()
        )));
    };
    let len = i32::from_be_bytes(*len);
    let len = usize::try_from(len)
        .ok()
        .filter(|l| (1..=MAX_NAME).contains(l) && *l <= rest.len())
        .ok_or_else(|| {
            ProtoError::Framing(format!(
                "a name of {len} bytes in a body of {} bytes",
                body.len()
            ))
        })?;
    let (name, bytes) = rest.split_at(len);
    let name = std::str::from_utf8(name)
        .map_err(|_| ProtoError::Framing("the name is not UTF-8".into()))?;
    decode::from_proto(name, bytes)
}

/// `msg` as the body of a gRPC message: a serialized `google.protobuf.Any`.
pub fn encode_any(msg: &SeataMessage) -> Result<Vec<u8>, ProtoError> {
    use prost::Message;
    Ok(encode::to_any(msg)?.encode_to_vec())
}

/// The message a gRPC body (a serialized `Any`) holds.
pub fn decode_any(body: &[u8]) -> Result<SeataMessage, ProtoError> {
    use prost::Message;
    let any = prost_types::Any::decode(body).map_err(|e| ProtoError::Decode {
        name: "google.protobuf.Any".into(),
        reason: e.to_string(),
    })?;
    decode::from_any(&any)
}

/// The full proto name of `msg`'s message (`org.apache.seata.protocol.protobuf.
/// GlobalBeginRequestProto`).
pub fn proto_name(msg: &SeataMessage) -> String {
    format!("{}.{}", pb::PACKAGE, encode::proto_name(msg))
}

#[cfg(test)]
mod tests;
