//! Seata's client batching and compression at the connection: merged requests still
//! get one answer each (positional MergeResultMessage, BatchResultMessages in any order
//! and in parts), a bad answer fails each merged caller with the reason, a silent TC
//! times each out, and compressed bodies reach the peer labelled and decodable.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::codec::CODEC_SEATA;
use crate::compress::Compressor;
use crate::message::{
    BatchResultMessage, BranchRegisterRequest, BranchRegisterResponse, GlobalEndRequest,
    GlobalEndResponse, GlobalStatus, MergeResultMessage, RegisterTmRequest, SeataMessage,
    TransactionResult,
};
use crate::transport::BatchOptions;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Answer {
    /// One MergeResultMessage, results by position.
    Positional,
    /// Two BatchResultMessages, the second half first, each reversed.
    BatchInParts,
    /// A MergeResultMessage with one result whatever the batch.
    OneResult,
    /// A GlobalStatusResponse where a merge answer belongs.
    WrongType,
    /// Nothing.
    Never,
}

#[derive(Default)]
struct Seen {
    merged_frames: AtomicUsize,
    merged_requests: AtomicUsize,
    single_requests: AtomicUsize,
    compressed_frames: AtomicUsize,
}

/// BranchRegister(xid "n") is answered with branch id n * 7.
fn answer_one(msg: &SeataMessage) -> SeataMessage {
    match msg {
        SeataMessage::BranchRegister(r) => {
            SeataMessage::BranchRegisterResponse(BranchRegisterResponse {
                result: TransactionResult::success(),
                branch_id: r.xid.parse::<i64>().unwrap() * 7,
            })
        }
        SeataMessage::GlobalStatus(_) => {
            SeataMessage::GlobalStatusResponse(GlobalEndResponse::success(GlobalStatus::Begin))
        }
        SeataMessage::RegisterTm(_) => crate::message::register_reply(msg, true, "test").unwrap(),
        other => panic!("unexpected {other:?}"),
    }
}

fn tc(answer: Answer, seen: Arc<Seen>) -> Arc<dyn InboundHandler> {
    Arc::new(move |req: InboundRequest| {
        let seen = seen.clone();
        async move {
            if req.payload.compressor != 0 {
                seen.compressed_frames.fetch_add(1, Ordering::SeqCst);
            }
            let msg = req.payload.decode_seata().expect("a Seata body");
            let SeataMessage::Merged(m) = msg else {
                seen.single_requests.fetch_add(1, Ordering::SeqCst);
                return Some(Payload::seata(&answer_one(&msg)).unwrap());
            };
            assert!(req.oneway, "Seata sends merged requests one-way");
            seen.merged_frames.fetch_add(1, Ordering::SeqCst);
            seen.merged_requests
                .fetch_add(m.msgs.len(), Ordering::SeqCst);
            let results: Vec<SeataMessage> = m.msgs.iter().map(answer_one).collect();
            let send = |body: SeataMessage| {
                let c = req.connection.clone();
                let id = req.request_id;
                async move { c.respond(id, Payload::seata(&body).unwrap()).await.unwrap() }
            };
            match answer {
                Answer::Positional => {
                    send(SeataMessage::MergeResult(MergeResultMessage {
                        msgs: results,
                    }))
                    .await
                }
                Answer::BatchInParts => {
                    let mut pairs: Vec<(SeataMessage, i32)> =
                        results.into_iter().zip(m.msg_ids.iter().copied()).collect();
                    pairs.reverse();
                    let second = pairs.split_off(pairs.len() / 2);
                    for part in [pairs, second] {
                        let (results, msg_ids) = part.into_iter().unzip();
                        send(SeataMessage::BatchResult(BatchResultMessage {
                            results,
                            msg_ids,
                        }))
                        .await;
                    }
                }
                Answer::OneResult => {
                    send(SeataMessage::MergeResult(MergeResultMessage {
                        msgs: results.into_iter().take(1).collect(),
                    }))
                    .await
                }
                Answer::WrongType => {
                    send(SeataMessage::GlobalStatusResponse(
                        GlobalEndResponse::success(GlobalStatus::Begin),
                    ))
                    .await
                }
                Answer::Never => {}
            }
            None
        }
    })
}

fn conf(compressor: Compressor, batch: Option<BatchOptions>) -> ConnConfig {
    ConnConfig {
        transport: TransportOptions {
            compressor,
            batch,
            ..TransportOptions::default()
        },
        write_idle: None,
        read_idle: None,
        heartbeat_codec: CODEC_SEATA,
        probe: None,
        on_close: None,
    }
}

async fn pair(client: ConnConfig, answer: Answer) -> (Connection, Connection, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (s1, s2) = tokio::join!(TcpStream::connect(addr), listener.accept());
    let (c, _) = Connection::start(s1.unwrap(), client, "tc".into(), None).unwrap();
    let (s, _) = Connection::start(
        s2.unwrap().0,
        conf(Compressor::None, None),
        "client".into(),
        Some(tc(answer, seen.clone())),
    )
    .unwrap();
    (c, s, seen)
}

fn register(n: i64) -> Payload {
    Payload::seata(&SeataMessage::BranchRegister(BranchRegisterRequest {
        xid: n.to_string(),
        resource_id: "db".into(),
        ..Default::default()
    }))
    .unwrap()
}

/// `n` concurrent BranchRegisters; on a current-thread runtime they are all queued
/// before the writer runs, so one write batch holds them all.
async fn calls(c: &Connection, n: i64, timeout: Duration) -> Vec<Result<Payload, RpcError>> {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move { c.call(register(i), timeout).await })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

fn branch_id(p: &Payload) -> i64 {
    match p.decode_seata().unwrap() {
        SeataMessage::BranchRegisterResponse(r) => r.branch_id,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn merged_requests_each_get_their_own_answer() {
    for answer in [Answer::Positional, Answer::BatchInParts] {
        let (c, _s, seen) = pair(
            conf(Compressor::None, Some(BatchOptions::default())),
            answer,
        )
        .await;
        let out = calls(&c, 50, Duration::from_secs(5)).await;
        for (i, r) in out.iter().enumerate() {
            let p = r
                .as_ref()
                .unwrap_or_else(|e| panic!("{answer:?} call {i}: {e}"));
            assert_eq!(
                branch_id(p),
                i as i64 * 7,
                "{answer:?}: call {i} got another's answer"
            );
        }
        assert_eq!(seen.merged_frames.load(Ordering::SeqCst), 1, "{answer:?}");
        assert_eq!(
            seen.merged_requests.load(Ordering::SeqCst),
            50,
            "{answer:?}"
        );
        assert_eq!(seen.single_requests.load(Ordering::SeqCst), 0, "{answer:?}");
        assert_eq!(c.pending_requests(), 0);
        assert!(
            c.shared.merges().is_empty(),
            "{answer:?}: merge record left behind"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn without_batching_or_alone_requests_are_not_merged() {
    let (c, _s, seen) = pair(conf(Compressor::None, None), Answer::Positional).await;
    let out = calls(&c, 20, Duration::from_secs(5)).await;
    assert!(out.iter().all(|r| r.is_ok()));
    assert_eq!(seen.merged_frames.load(Ordering::SeqCst), 0);
    assert_eq!(seen.single_requests.load(Ordering::SeqCst), 20);

    // Batching on: a lone request, and a registration beside mergeable requests.
    let (c, _s, seen) = pair(
        conf(Compressor::None, Some(BatchOptions::default())),
        Answer::Positional,
    )
    .await;
    assert_eq!(
        branch_id(&c.call(register(3), Duration::from_secs(5)).await.unwrap()),
        21
    );
    assert_eq!(seen.single_requests.load(Ordering::SeqCst), 1);
    let reg = Payload::seata(&SeataMessage::RegisterTm(RegisterTmRequest::default())).unwrap();
    let c2 = c.clone();
    let registration = tokio::spawn(async move { c2.call(reg, Duration::from_secs(5)).await });
    let out = calls(&c, 4, Duration::from_secs(5)).await;
    assert!(out.iter().all(|r| r.is_ok()));
    assert!(registration.await.unwrap().is_ok());
    assert_eq!(
        seen.single_requests.load(Ordering::SeqCst),
        2,
        "the registration went alone"
    );
    assert_eq!(seen.merged_requests.load(Ordering::SeqCst), 4);
}

#[tokio::test(flavor = "current_thread")]
async fn an_unreadable_merge_answer_fails_each_caller_with_the_reason() {
    let cases = [
        (
            Answer::OneResult,
            "the TC answered 10 merged requests with 1 results",
        ),
        (
            Answer::WrongType,
            "unreadable answer to merged requests: expected MergeResultMessage (60) or BatchResultMessage (121), got GlobalStatusResponse (16)",
        ),
    ];
    for (answer, want) in cases {
        let (c, _s, _) = pair(
            conf(Compressor::None, Some(BatchOptions::default())),
            answer,
        )
        .await;
        for r in calls(&c, 10, Duration::from_secs(5)).await {
            match r {
                Err(RpcError::MaybeDelivered { reason, .. }) => {
                    assert_eq!(reason.message(), want)
                }
                other => panic!("{answer:?}: {other:?}"),
            }
        }
        assert_eq!(c.pending_requests(), 0);
        assert!(
            !c.is_closed(),
            "{answer:?}: one bad answer must not close the connection"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn merged_requests_time_out_one_by_one_and_leave_nothing() {
    let (c, _s, seen) = pair(
        conf(Compressor::None, Some(BatchOptions::default())),
        Answer::Never,
    )
    .await;
    for r in calls(&c, 8, Duration::from_millis(300)).await {
        assert!(matches!(r, Err(RpcError::Timeout { .. })), "{r:?}");
    }
    assert_eq!(seen.merged_frames.load(Ordering::SeqCst), 1);
    assert_eq!(c.pending_requests(), 0);
}

#[tokio::test(flavor = "current_thread")]
async fn compressed_requests_reach_the_peer_labelled_and_merged_frames_too() {
    for batch in [None, Some(BatchOptions::default())] {
        let (c, _s, seen) = pair(conf(Compressor::Gzip, batch), Answer::Positional).await;
        let out = calls(&c, 6, Duration::from_secs(5)).await;
        for (i, r) in out.iter().enumerate() {
            assert_eq!(branch_id(r.as_ref().unwrap()), i as i64 * 7);
        }
        let frames = if batch.is_some() { 1 } else { 6 };
        assert_eq!(
            seen.compressed_frames.load(Ordering::SeqCst),
            frames,
            "{batch:?}"
        );
    }
    // A body that is not Seata's (a gateway's payload) is never compressed.
    let (c, _s, seen) = pair(conf(Compressor::Zstd, None), Answer::Positional).await;
    let status = Payload::seata(&SeataMessage::GlobalStatus(GlobalEndRequest::new("x"))).unwrap();
    let p = c.call(status, Duration::from_secs(5)).await.unwrap();
    assert!(matches!(
        p.decode_seata(),
        Ok(SeataMessage::GlobalStatusResponse(_))
    ));
    assert_eq!(seen.compressed_frames.load(Ordering::SeqCst), 1);
    let opaque = Payload::new(&b"raw"[..]).with_codec(0x7f);
    let mut f = opaque.into_frame(MessageType::Request, 1);
    super::merge::compress_request(Compressor::Zstd, &mut f);
    assert_eq!((f.compressor, &f.body[..]), (0, &b"raw"[..]));
}

/// `msg` as the request frame numbered `id`, in the seata codec.
fn request_frame(msg: &SeataMessage, id: u32) -> Frame {
    Payload::seata(msg)
        .unwrap()
        .into_frame(MessageType::Request, id)
}

/// With the protobuf codec, a Seata request is rewritten in it; one the protobuf
/// messages cannot carry (an XA branch) and a body that is not Seata's go as they are.
#[test]
fn requests_are_transcoded_to_protobuf_where_they_can_be() {
    use crate::codec::{CODEC_PROTOBUF, CODEC_SEATA};
    use crate::message::{BranchRegisterRequest, BranchType};
    let status = SeataMessage::GlobalStatus(GlobalEndRequest::new("x:1:2"));
    let mut f = request_frame(&status, 1);
    super::merge::transcode_request(CODEC_PROTOBUF, &mut f);
    assert_eq!(f.codec, CODEC_PROTOBUF);
    assert_eq!(crate::message::protobuf::decode(&f.body).unwrap(), status);
    let xa = SeataMessage::BranchRegister(BranchRegisterRequest {
        branch_type: BranchType::XA,
        ..Default::default()
    });
    let body = xa.encode().unwrap();
    let mut f = request_frame(&xa, 2);
    super::merge::transcode_request(CODEC_PROTOBUF, &mut f);
    assert_eq!((f.codec, &f.body), (CODEC_SEATA, &body));
    let mut f = Payload::new(&b"raw"[..])
        .with_codec(0x7f)
        .into_frame(MessageType::Request, 3);
    super::merge::transcode_request(CODEC_PROTOBUF, &mut f);
    assert_eq!((f.codec, &f.body[..]), (0x7f, &b"raw"[..]));
    // The seata codec leaves everything as it is.
    let mut f = request_frame(&status, 4);
    super::merge::transcode_request(CODEC_SEATA, &mut f);
    assert_eq!(f.codec, CODEC_SEATA);
}

/// `transport.serialization = protobuf` with a compressor: the request rewritten in
/// protobuf is compressed too, as Seata's Java client compresses whatever its
/// serializer wrote (it went uncompressed, labelled 0, when only seata-codec bodies
/// were compressed).
#[test]
fn a_request_rewritten_in_protobuf_is_compressed_too() {
    use crate::codec::CODEC_PROTOBUF;
    let status = SeataMessage::GlobalStatus(GlobalEndRequest::new("x:1:2"));
    let mut f = request_frame(&status, 1);
    super::merge::transcode_request(CODEC_PROTOBUF, &mut f);
    super::merge::compress_request(Compressor::Gzip, &mut f);
    assert_eq!(
        (f.codec, f.compressor),
        (CODEC_PROTOBUF, Compressor::Gzip.code())
    );
    let plain = Compressor::Gzip.decompress(&f.body, 1 << 20).unwrap();
    assert_eq!(crate::message::protobuf::decode(&plain).unwrap(), status);
}
