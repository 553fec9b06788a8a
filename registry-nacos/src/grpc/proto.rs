//! The two protobuf messages of Nacos 2's gRPC API (`nacos_grpc_service.proto`), by
//! hand: every request and answer is a [`Payload`] whose body is a JSON document, so
//! these two are the whole schema, and no `protoc` is needed to build.
//!
//! The services are `Request/request` (one payload in, one out: every call the client
//! makes) and `BiRequestStream/requestBiStream` (a stream each way, opened once per
//! connection: the server's pushes and checks come down it).

use std::collections::HashMap;

/// `/Request/request`: the unary call.
pub(crate) const UNARY_PATH: &str = "/Request/request";
/// `/BiRequestStream/requestBiStream`: the connection's stream.
pub(crate) const STREAM_PATH: &str = "/BiRequestStream/requestBiStream";

/// A payload's header: what the body is (`type`, e.g. `InstanceRequest`), the
/// client's address, and headers (the login token or signature).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Metadata {
    #[prost(string, tag = "3")]
    pub(crate) r#type: String,
    #[prost(string, tag = "8")]
    pub(crate) client_ip: String,
    #[prost(map = "string, string", tag = "7")]
    pub(crate) headers: HashMap<String, String>,
}

/// One message either way.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Payload {
    #[prost(message, optional, tag = "2")]
    pub(crate) metadata: Option<Metadata>,
    /// `Any { type_url: "", value: <JSON> }`.
    #[prost(message, optional, tag = "3")]
    pub(crate) body: Option<prost_types::Any>,
}

impl Payload {
    /// A payload of type `kind` with `body` as its JSON.
    pub(crate) fn new(
        kind: &str,
        client_ip: &str,
        headers: HashMap<String, String>,
        body: Vec<u8>,
    ) -> Payload {
        Payload {
            metadata: Some(Metadata {
                r#type: kind.to_string(),
                client_ip: client_ip.to_string(),
                headers,
            }),
            body: Some(prost_types::Any {
                type_url: String::new(),
                value: body,
            }),
        }
    }

    /// The body's `type` (empty when the payload has no metadata).
    pub(crate) fn kind(&self) -> &str {
        self.metadata
            .as_ref()
            .map(|m| m.r#type.as_str())
            .unwrap_or("")
    }

    /// The body's JSON bytes (empty when there is no body).
    pub(crate) fn json(&self) -> &[u8] {
        self.body
            .as_ref()
            .map(|b| b.value.as_slice())
            .unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// The bytes nacos-sdk's generated code (and Java Nacos) put on the wire for a
    /// payload: metadata at field 2 with type at 3, headers at 7, clientIp at 8; the
    /// body at field 3 as an `Any` (value at field 2).
    #[test]
    fn the_layout_is_nacos_own() {
        let mut headers = HashMap::new();
        headers.insert("k".to_string(), "v".to_string());
        let p = Payload::new("T", "1.2.3.4", headers, b"{}".to_vec());
        let bytes = p.encode_to_vec();
        let expected: Vec<u8> = [
            &[0x12, 20][..],                          // field 2, metadata, 20 bytes
            &[0x1a, 1, b'T'],                         // type
            &[0x3a, 6, 0x0a, 1, b'k', 0x12, 1, b'v'], // headers entry
            &[0x42, 7],                               // clientIp
            b"1.2.3.4",
            &[0x1a, 4, 0x12, 2, b'{', b'}'], // body: Any { value: "{}" }
        ]
        .concat();
        assert_eq!(bytes, expected);
        let back = Payload::decode(bytes.as_slice()).unwrap();
        assert_eq!(back.kind(), "T");
        assert_eq!(back.json(), b"{}");
    }
}
