//! gRPC connections end to end: our client against our server (the server telling the
//! wire from the first bytes), a client framed exactly as Seata's Java client frames
//! HTTP/2, and flow control under load both ways.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::frame::{self, Head};
use super::headers;
use super::message::GrpcMessageProto;
use crate::connection::{ConnConfig, Connection, InboundHandler, InboundRequest};
use crate::error::RpcError;
use crate::payload::Payload;
use crate::transport::{Protocol, TransportOptions};

/// A codec byte no layer rewrites: the body crosses as it is.
const RAW: u8 = 0x77;

fn config(protocol: Protocol) -> ConnConfig {
    ConnConfig {
        transport: TransportOptions {
            protocol,
            ..TransportOptions::default()
        },
        write_idle: None,
        read_idle: None,
        heartbeat_codec: crate::codec::CODEC_SEATA,
        probe: None,
        on_close: None,
    }
}

fn echo() -> Arc<dyn InboundHandler> {
    Arc::new(|req: InboundRequest| async move { Some(req.payload) })
}

/// A gRPC client connection and the server side of it (started as a server starts an
/// accepted connection).
async fn pair(client_handler: Option<Arc<dyn InboundHandler>>) -> (Connection, Connection) {
    let (s, socket) = accepted("rm").await;
    let (c, _) =
        Connection::start(socket, config(Protocol::Grpc), "tc".into(), client_handler).unwrap();
    (c, s)
}

/// An accepted connection named `name` answering with [`echo`], and the socket of its
/// peer.
async fn accepted(name: &str) -> (Connection, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (s1, s2) = tokio::join!(TcpStream::connect(addr), listener.accept());
    let (s, _) = Connection::start_accepted(
        s2.unwrap().0,
        config(Protocol::Seata),
        name.into(),
        Some(echo()),
    )
    .unwrap();
    (s, s1.unwrap())
}

fn raw(body: Vec<u8>) -> Payload {
    Payload::new(body).with_codec(RAW).with_head("k", "v")
}

#[tokio::test]
async fn requests_answers_pushes_and_pings_cross_one_grpc_stream_both_ways() {
    let (client, server) = pair(Some(echo())).await;
    let answer = client
        .call(raw(b"hello".to_vec()), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!((&answer.body[..], answer.codec), (&b"hello"[..], RAW));
    assert_eq!(answer.head.get("k"), Some("v"));
    // The server's request to the client (a TC's branch commit to an RM).
    let back = server
        .call(raw(b"commit".to_vec()), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(&back.body[..], b"commit");
    // PING / PONG are messageType 3 / 4 on the stream, both ways.
    client.ping(Duration::from_secs(5)).await.unwrap();
    server.ping(Duration::from_secs(5)).await.unwrap();
    // Many at once, of sizes around a DATA frame's.
    let calls = (0..200usize).map(|i| {
        let c = client.clone();
        async move {
            let body = vec![(i % 251) as u8; (i * 97) % 16_000];
            let a = c
                .call(raw(body.clone()), Duration::from_secs(10))
                .await
                .unwrap();
            assert_eq!(a.body.len(), body.len(), "call {i}");
            assert_eq!(&a.body[..], &body[..], "call {i}");
        }
    });
    futures_util::future::join_all(calls).await;
    assert!(!client.is_closed() && !server.is_closed());
}

#[tokio::test]
async fn megabytes_both_ways_at_once_move_through_the_flow_control_windows() {
    let (client, server) = pair(Some(echo())).await;
    // 4 000 messages of 15 000 bytes each way: 60 MB, far past every window (ours
    // 4 MiB, the HTTP/2 default 64 KiB), so both ends must give window back while
    // both push.
    let push = |conn: Connection, tag: u8| async move {
        let calls = (0..4_000usize).map(|i| {
            let c = conn.clone();
            async move {
                let body = vec![tag ^ (i as u8); 15_000];
                let a = c.call(raw(body), Duration::from_secs(30)).await.unwrap();
                assert_eq!(a.body[0], tag ^ (i as u8));
            }
        });
        futures_util::future::join_all(calls).await;
    };
    tokio::join!(push(client.clone(), 1), push(server.clone(), 2));
    assert!(!client.is_closed() && !server.is_closed());
}

#[tokio::test]
async fn a_message_too_big_for_one_data_frame_is_refused_as_not_written() {
    let (client, _server) = pair(None).await;
    // 16 379 bytes of message fit a default 16 384-byte frame; this does not.
    let e = client
        .call(raw(vec![0; 20_000]), Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(e, RpcError::NotWritten { .. }), "{e:?}");
    // The connection carries on.
    let a = client
        .call(raw(vec![1; 100]), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(a.body.len(), 100);
}

/// Reads whole HTTP/2 frames from `s` until `want` says stop; returns them.
async fn read_frames(
    s: &mut TcpStream,
    buf: &mut BytesMut,
    mut want: impl FnMut(&Head, &[u8]) -> bool,
) -> Vec<(Head, Bytes)> {
    let mut out = Vec::new();
    loop {
        while buf.len() >= frame::HEADER_LEN {
            let head = Head::parse(buf);
            if buf.len() < frame::HEADER_LEN + head.len {
                break;
            }
            let f = buf.split_to(frame::HEADER_LEN + head.len).freeze();
            let payload = f.slice(frame::HEADER_LEN..);
            let done = !want(&head, &payload);
            out.push((head, payload));
            if done {
                return out;
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(5), s.read_buf(buf))
            .await
            .expect("the server answered within 5 s")
            .unwrap();
        assert!(n > 0, "the server closed the connection");
    }
}

/// What a client sends first: the preface and an empty SETTINGS.
fn opening() -> BytesMut {
    let mut out = BytesMut::new();
    out.extend_from_slice(frame::PREFACE);
    frame::settings(&mut out, &[]);
    out
}

fn data(stream: u32, msg: &GrpcMessageProto) -> BytesMut {
    let body = prost::Message::encode_to_vec(msg);
    let mut out = BytesMut::new();
    Head {
        len: body.len() + 5,
        kind: frame::DATA,
        flags: 0,
        stream,
    }
    .put(&mut out);
    out.extend_from_slice(&[0]);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

#[tokio::test]
async fn a_client_framed_as_javas_is_served_and_answered_as_javas_server_answers() {
    let (_server, mut java) = accepted("java").await;
    // Netty's client: preface, SETTINGS, then GrpcEncoder's HEADERS: no :method, no
    // :path, the response-style fields Java's encoder writes on both ends.
    let mut out = opening();
    frame::headers(&mut out, 3, &headers::java_open(), frame::DEFAULT_MAX_FRAME);
    let mut msg = GrpcMessageProto {
        id: 41,
        message_type: 0,
        head_map: Default::default(),
        body: Bytes::from_static(b"begin"),
    };
    msg.head_map.insert("codec-type".into(), RAW.to_string());
    msg.head_map.insert("compress-type".into(), "0".into());
    out.extend_from_slice(&data(3, &msg));
    // A second stream on the same connection is refused; the first carries on.
    frame::headers(&mut out, 5, &headers::java_open(), frame::DEFAULT_MAX_FRAME);
    java.write_all(&out).await.unwrap();

    let mut buf = BytesMut::new();
    let mut hpack = headers::Reader::new();
    let frames = read_frames(&mut java, &mut buf, |h, _| h.kind != frame::DATA).await;
    let kinds: Vec<u8> = frames.iter().map(|(h, _)| h.kind).collect();
    assert_eq!(
        kinds[0],
        frame::SETTINGS,
        "the server's preface first: {kinds:?}"
    );
    assert!(
        frames
            .iter()
            .any(|(h, _)| h.kind == frame::SETTINGS && h.flags & frame::ACK != 0)
    );
    let refused = frames
        .iter()
        .find(|(h, _)| h.kind == frame::RST_STREAM)
        .expect("the second stream refused");
    assert_eq!(
        (refused.0.stream, &refused.1[..]),
        (5, &7u32.to_be_bytes()[..])
    );
    let (hh, block) = frames
        .iter()
        .find(|(h, _)| h.kind == frame::HEADERS)
        .expect("HEADERS before the first DATA");
    assert_eq!((hh.stream, hh.flags & frame::END_STREAM), (3, 0));
    let fields = hpack.read(block).unwrap();
    assert_eq!(
        fields,
        vec![
            (":status".to_string(), "200".to_string()),
            ("grpc-status".into(), "0".into()),
            ("content-type".into(), "application/grpc".into()),
        ]
    );
    let (dh, payload) = frames.last().unwrap();
    assert_eq!((dh.kind, dh.stream, dh.flags), (frame::DATA, 3, 0));
    // One whole message in the frame, as Java's decoder reads it.
    let len = u32::from_be_bytes([payload[1], payload[2], payload[3], payload[4]]) as usize;
    assert_eq!((payload[0], payload.len()), (0, len + 5));
    let answer: GrpcMessageProto = prost::Message::decode(&payload[5..]).unwrap();
    assert_eq!((answer.id, answer.message_type), (41, 1));
    assert_eq!(&answer.body[..], b"begin");
    assert_eq!(
        answer.head_map.get("codec-type").map(String::as_str),
        Some("119")
    );

    // Java's heartbeat: messageType 3, empty body; the PONG comes back on the stream.
    let ping = GrpcMessageProto {
        id: 42,
        message_type: 3,
        ..Default::default()
    };
    java.write_all(&data(3, &ping)).await.unwrap();
    let frames = read_frames(&mut java, &mut buf, |h, _| h.kind != frame::DATA).await;
    let (_, payload) = frames.last().unwrap();
    let pong: GrpcMessageProto = prost::Message::decode(&payload[5..]).unwrap();
    assert_eq!((pong.id, pong.message_type, pong.body.len()), (42, 4, 0));
    // No trailers and no END_STREAM ever: nothing else was written.
    assert!(frames.iter().all(|(h, _)| h.flags & frame::END_STREAM == 0));
}

#[tokio::test]
async fn a_peer_that_breaks_http2_is_closed_with_the_reason() {
    let (server, mut peer) = accepted("bad").await;
    let mut out = BytesMut::new();
    out.extend_from_slice(frame::PREFACE);
    // A WINDOW_UPDATE of zero on the connection is a protocol error (RFC 9113 §6.9).
    frame::window_update(&mut out, 0, 0);
    peer.write_all(&out).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), server.closed())
        .await
        .expect("closed");
    let reason = server.close_reason().unwrap().to_string();
    assert!(reason.contains("a WINDOW_UPDATE of 0"), "{reason}");

    // And a v1 peer on the same kind of accepted connection is read as v1.
    let (_server, socket) = accepted("v1").await;
    let (v1, _) = Connection::start(socket, config(Protocol::Seata), "tc".into(), None).unwrap();
    let a = v1
        .call(raw(b"v1".to_vec()), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(&a.body[..], b"v1");
}

/// A peer that reads every byte but never grants HTTP/2 window (a stuck or hostile
/// server): the writer waits for window no longer than `transport.writeTimeout`, then
/// closes the connection saying why, and the calls in it fail as maybe delivered.
#[tokio::test]
async fn a_peer_that_grants_no_window_is_closed_after_the_write_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (s1, s2) = tokio::join!(TcpStream::connect(addr), listener.accept());
    let mut peer = s2.unwrap().0;
    let drain = tokio::spawn(async move {
        let mut got = Vec::new();
        peer.read_to_end(&mut got)
            .await
            .expect("the peer reads until the client closes");
        got
    });
    let mut c = config(Protocol::Grpc);
    c.transport.write_timeout = Some(Duration::from_millis(300));
    let (client, _) = Connection::start(s1.unwrap(), c, "stuck".into(), None).unwrap();
    // Five messages of 15 000 bytes: past the 65 535-byte window every peer starts with.
    let calls = (0..5).map(|_| client.call(raw(vec![7; 15_000]), Duration::from_secs(5)));
    let results = futures_util::future::join_all(calls).await;
    let reason = client.close_reason().expect("closed").to_string();
    assert!(
        reason.contains("granted no HTTP/2 flow-control window for 300ms"),
        "{reason}"
    );
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Err(RpcError::MaybeDelivered { .. }))),
        "{results:?}"
    );
    // What reached the peer: the preface, then frames whose DATA stays within the
    // 65 535-byte window it never raised, and fills most of it.
    let got = drain.await.unwrap();
    assert_eq!(&got[..frame::PREFACE.len()], &frame::PREFACE[..]);
    let (mut off, mut data) = (frame::PREFACE.len(), 0);
    while off + frame::HEADER_LEN <= got.len() {
        let head = Head::parse(&got[off..]);
        if head.kind == frame::DATA {
            data += head.len;
        }
        off += frame::HEADER_LEN + head.len;
    }
    assert_eq!(off, got.len(), "whole frames only");
    assert!((60_000..=65_535).contains(&data), "{data} bytes of DATA");
}

/// A peer that floods PINGs and reads nothing (the HTTP/2 "ping flood"): the
/// acknowledgements it does not read are not queued without bound; the connection is
/// closed saying why.
#[tokio::test]
async fn a_ping_flood_from_a_peer_that_does_not_read_closes_the_connection() {
    let (server, mut peer) = accepted("flood").await;
    let out = opening();
    let mut ping = BytesMut::new();
    Head {
        len: 8,
        kind: frame::PING,
        flags: 0,
        stream: 0,
    }
    .put(&mut ping);
    ping.extend_from_slice(&[1; 8]);
    // 400 000 PINGs: 6.8 MB of acknowledgements, past any socket buffer.
    let flood = tokio::spawn(async move {
        peer.write_all(&out).await.unwrap();
        for _ in 0..400 {
            let batch: Vec<u8> = ping.iter().copied().cycle().take(17 * 1000).collect();
            if peer.write_all(&batch).await.is_err() {
                break;
            }
        }
        peer
    });
    tokio::time::timeout(Duration::from_secs(10), server.closed())
        .await
        .expect("closed within 10 s");
    let reason = server.close_reason().unwrap().to_string();
    assert!(
        reason.contains("faster than it reads their answers"),
        "{reason}"
    );
    drop(flood.await);
}
