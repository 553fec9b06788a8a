use bytes::Bytes;

use super::headers;
use super::message::{
    CODEC_GRPC, GrpcMessageProto, any_to_named, from_message, named_to_any, to_message,
};
use crate::codec::{CODEC_PROTOBUF, CODEC_SEATA, Frame, HeadMap, MessageType};
use crate::message::protobuf;
use crate::message::{GlobalBeginRequest, SeataMessage};

fn begin() -> SeataMessage {
    SeataMessage::GlobalBegin(GlobalBeginRequest {
        timeout_ms: 60_000,
        transaction_name: Some("buy".into()),
    })
}

#[test]
fn a_protobuf_frame_goes_out_as_seatas_encoder_writes_it_and_reads_back_as_itself() {
    let named = protobuf::encode(&begin()).unwrap();
    let mut head = HeadMap::new();
    head.insert("tx-trace", "abc");
    let frame = Frame {
        msg_type: MessageType::Request,
        codec: CODEC_PROTOBUF,
        compressor: 0,
        request_id: 7,
        head,
        body: Bytes::from(named.clone()),
    };
    let msg = to_message(&frame, 1 << 20).unwrap();
    assert_eq!(msg.id, 7);
    assert_eq!(msg.message_type, 0);
    assert_eq!(
        msg.head_map.get("codec-type").map(String::as_str),
        Some("40")
    );
    assert_eq!(
        msg.head_map.get("compress-type").map(String::as_str),
        Some("0")
    );
    assert_eq!(
        msg.head_map.get("tx-trace").map(String::as_str),
        Some("abc")
    );
    // The body is what Seata's GrpcSerializer writes: Any.pack(message).
    assert_eq!(&msg.body[..], &protobuf::encode_any(&begin()).unwrap()[..]);
    let back = from_message(msg, 1 << 20).unwrap();
    assert_eq!(back, frame);
}

#[test]
fn a_compressed_body_is_rewritten_inside_its_compression() {
    let named = protobuf::encode(&begin()).unwrap();
    let gz = crate::Compressor::Gzip;
    let frame = Frame {
        msg_type: MessageType::Request,
        codec: CODEC_PROTOBUF,
        compressor: gz.code(),
        request_id: 9,
        head: HeadMap::new(),
        body: gz.compress(&named).unwrap(),
    };
    let msg = to_message(&frame, 1 << 20).unwrap();
    assert_eq!(
        msg.head_map.get("compress-type").map(String::as_str),
        Some("1")
    );
    let plain = gz.decompress(&msg.body, 1 << 20).unwrap();
    assert_eq!(protobuf::decode_any(&plain).unwrap(), begin());
    let back = from_message(msg, 1 << 20).unwrap();
    let plain = gz.decompress(&back.body, 1 << 20).unwrap();
    assert_eq!(protobuf::decode(&plain).unwrap(), begin());
}

#[test]
fn other_codecs_pass_through_named_by_codec_type_and_heartbeats_have_no_body() {
    let frame = Frame {
        msg_type: MessageType::Request,
        codec: CODEC_SEATA,
        compressor: 0,
        request_id: 3,
        head: HeadMap::new(),
        body: Bytes::from_static(&[0, 1, 2, 3]),
    };
    let msg = to_message(&frame, 1024).unwrap();
    assert_eq!(
        msg.head_map.get("codec-type").map(String::as_str),
        Some("1")
    );
    assert_eq!(&msg.body[..], &[0, 1, 2, 3]);
    assert_eq!(from_message(msg, 1024).unwrap(), frame);

    let ping = to_message(&Frame::ping(5), 1024).unwrap();
    assert_eq!((ping.message_type, ping.id, ping.body.len()), (3, 5, 0));
    let f = from_message(ping, 1024).unwrap();
    assert_eq!(f.msg_type, MessageType::HeartbeatRequest);
}

#[test]
fn a_blank_codec_type_means_grpc_and_bad_messages_are_named() {
    let msg = GrpcMessageProto {
        id: 1,
        message_type: 1,
        head_map: Default::default(),
        body: protobuf::encode_any(&begin()).unwrap().into(),
    };
    let f = from_message(msg, 1024).unwrap();
    assert_eq!(f.codec, CODEC_PROTOBUF);
    assert_eq!(protobuf::decode(&f.body).unwrap(), begin());

    let bad_type = GrpcMessageProto {
        message_type: 9,
        ..Default::default()
    };
    let e = from_message(bad_type, 1024).unwrap_err().to_string();
    assert!(e.contains("unknown messageType 9"), "{e}");
    let mut bad_codec = GrpcMessageProto {
        message_type: 0,
        ..Default::default()
    };
    bad_codec
        .head_map
        .insert("codec-type".into(), "forty".into());
    let e = from_message(bad_codec, 1024).unwrap_err().to_string();
    assert!(e.contains("codec-type is \"forty\""), "{e}");
    let not_any = GrpcMessageProto {
        message_type: 0,
        body: Bytes::from_static(&[0xff, 0xff, 0xff]),
        ..Default::default()
    };
    let e = from_message(not_any, 1024).unwrap_err().to_string();
    assert!(e.contains("not a google.protobuf.Any"), "{e}");
    assert!(named_to_any(&[0, 0, 0]).is_err_and(|e| e.to_string().contains("shorter")));
    assert!(any_to_named(&[]).is_err_and(|e| e.to_string().contains("names no message")));
    assert_eq!(CODEC_GRPC, 40);
}

#[test]
fn our_header_blocks_read_back_with_a_real_hpack_decoder() {
    let long = "x".repeat(300);
    let block = headers::block(&[(":authority", long.as_str()), ("a", "b")]);
    let mut r = headers::Reader::new();
    let fields = r.read(&block).unwrap();
    assert_eq!(
        fields,
        vec![(":authority".to_string(), long), ("a".into(), "b".into())]
    );
    let fields = r.read(&headers::java_open()).unwrap();
    assert_eq!(fields[0], (":status".into(), "200".into()));
    assert_eq!(fields[1], ("grpc-status".into(), "0".into()));
}

/// `GrpcMessageProto`'s bytes as `protoc` makes them from Seata's `grpcMessage.proto`
/// (scripts/seata-proto-vectors.sh, GRPC_MESSAGE).
#[test]
fn the_grpc_message_has_the_layout_of_seatas_proto() {
    let vector = "08071a100a0a636f6465632d747970651202343022030a0141";
    let bytes: Vec<u8> = (0..vector.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&vector[i..i + 2], 16).unwrap())
        .collect();
    let mut msg = GrpcMessageProto {
        id: 7,
        message_type: 0,
        head_map: Default::default(),
        body: Bytes::from_static(&[0x0a, 0x01, 0x41]),
    };
    msg.head_map.insert("codec-type".into(), "40".into());
    assert_eq!(prost::Message::encode_to_vec(&msg), bytes);
    let back: GrpcMessageProto = prost::Message::decode(&bytes[..]).unwrap();
    assert_eq!(back, msg);
}

mod fuzz {
    use std::sync::Arc;

    use bytes::BytesMut;
    use proptest::prelude::*;

    use crate::grpc::Link;
    use crate::grpc::frame::{Head, PREFACE};
    use crate::grpc::reader::Reader;

    /// Frames of any type, flags, stream and payload (HEADERS with junk HPACK, DATA
    /// with junk messages, short SETTINGS...): the reader answers each with a frame,
    /// "more bytes" or an error, and never panics.
    fn frames() -> impl Strategy<Value = Vec<(u8, u8, u32, Vec<u8>)>> {
        prop::collection::vec(
            (
                0u8..11,
                any::<u8>(),
                0u32..6,
                prop::collection::vec(any::<u8>(), 0..64),
            ),
            0..24,
        )
    }

    proptest! {
        #[test]
        fn the_reader_never_panics_on_any_frames(frames in frames(), server in any::<bool>()) {
            let link = Arc::new(if server { Link::server() } else { Link::client("x") });
            let mut reader = Reader::new(link, 4096);
            let mut buf = BytesMut::new();
            if server {
                buf.extend_from_slice(PREFACE);
            }
            for (kind, flags, stream, payload) in frames {
                Head { len: payload.len(), kind, flags, stream }.put(&mut buf);
                buf.extend_from_slice(&payload);
            }
            for _ in 0..64 {
                match reader.decode(&mut buf) {
                    Ok(Some(_)) => continue,
                    Ok(None) | Err(_) => break,
                }
            }
        }
    }
}
