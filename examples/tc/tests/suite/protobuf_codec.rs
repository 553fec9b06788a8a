//! Requests in Seata's protobuf codec (`transport.serialization = protobuf`, codec byte
//! 0x2), as a Seata client so configured sends them: the example TC reads them and
//! answers in the request's codec and compressor, through a whole transaction.

use crate::tx_world;

use std::time::Duration;

use meshline::rpc::codec::{CODEC_PROTOBUF, CODEC_SEATA};
use meshline::rpc::compress::Compressor;
use meshline::rpc::message::{
    BranchRegisterRequest, BranchType, GlobalBeginRequest, GlobalEndRequest, GlobalStatus,
    SeataMessage,
};
use meshline::rpc::rm::ResourceManager;
use meshline::rpc::{BodyFormat, CallOptions, Payload, RpcClient};
use tx_world::{Recorder, quick_options, rm, start_tc, until};

/// Sends `msg` in `format` routed by `xid`; the answer's format and message.
async fn call(
    client: &RpcClient,
    xid: &str,
    format: BodyFormat,
    msg: SeataMessage,
) -> (BodyFormat, SeataMessage) {
    let answer = client
        .call(
            Payload::seata_as(&msg, format).unwrap(),
            CallOptions::xid(xid),
        )
        .await
        .unwrap()
        .payload;
    (BodyFormat::of(&answer), answer.decode_seata().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_in_the_protobuf_codec_is_answered_in_it() {
    let tc = start_tc(quick_options(), meshline::rpc::ServerConfig::default()).await;
    let hub = meshline::WatchHub::new("test", meshline::EmptyProtection::Apply);
    hub.publish("c", vec![tc.instance()]);
    let tm = tx_world::tm(&hub, 1).await;
    let recorder = Recorder::default();
    let stock: ResourceManager = rm(&hub, "stock", "jdbc:stock", recorder.clone(), false, 1).await;
    let protobuf = BodyFormat {
        codec: CODEC_PROTOBUF,
        compressor: Compressor::None,
    };

    let (format, begun) = call(
        tm.client(),
        "",
        protobuf,
        SeataMessage::GlobalBegin(GlobalBeginRequest {
            timeout_ms: 30_000,
            transaction_name: Some("protobuf".into()),
        }),
    )
    .await;
    assert_eq!(format, protobuf);
    let SeataMessage::GlobalBeginResponse(begun) = begun else {
        panic!("answered {begun:?}");
    };
    assert!(begun.result.is_success(), "{begun:?}");
    let xid = begun.xid.unwrap();

    // Compressed too: answered gzip and protobuf.
    let gzipped = BodyFormat {
        codec: CODEC_PROTOBUF,
        compressor: Compressor::Gzip,
    };
    let (format, registered) = call(
        stock.client(),
        &xid,
        gzipped,
        SeataMessage::BranchRegister(BranchRegisterRequest {
            xid: xid.clone(),
            branch_type: BranchType::AT,
            resource_id: "jdbc:stock".into(),
            lock_key: Some("stock:1".into()),
            application_data: None,
        }),
    )
    .await;
    assert_eq!(format, gzipped);
    let SeataMessage::BranchRegisterResponse(registered) = registered else {
        panic!("answered {registered:?}");
    };
    assert!(registered.result.is_success(), "{registered:?}");

    let (format, committed) = call(
        tm.client(),
        &xid,
        protobuf,
        SeataMessage::GlobalCommit(GlobalEndRequest::new(xid.as_str())),
    )
    .await;
    assert_eq!(format.codec, CODEC_PROTOBUF);
    let SeataMessage::GlobalCommitResponse(committed) = committed else {
        panic!("answered {committed:?}");
    };
    assert_eq!(committed.global_status, GlobalStatus::Committed);
    // Phase two reached the RM, and the transaction ended.
    recorder.wait_calls(1, Duration::from_secs(5)).await;
    assert!(until(Duration::from_secs(5), || tc.tc.open_sessions() == 0).await);

    // The seata codec on the same connection still answers in the seata codec.
    let (format, status) = call(
        tm.client(),
        &xid,
        BodyFormat::default(),
        SeataMessage::GlobalStatus(GlobalEndRequest::new(xid.as_str())),
    )
    .await;
    assert_eq!(format.codec, CODEC_SEATA);
    assert!(
        matches!(status, SeataMessage::GlobalStatusResponse(_)),
        "{status:?}"
    );
}

/// A TM and an RM whose connections send the protobuf codec
/// (`transport.serialization = protobuf`), batching on: every request reaches the TC
/// in protobuf (merged ones as a whole), the merged answers are split, and the
/// transactions commit with phase two at the RM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_sending_protobuf_batched_run_whole_transactions() {
    use std::sync::atomic::Ordering;
    let tc = start_tc(quick_options(), meshline::rpc::ServerConfig::default()).await;
    let hub = meshline::WatchHub::new("test", meshline::EmptyProtection::Apply);
    hub.publish("c", vec![tc.instance()]);
    let config = meshline_testkit::config_of(&[("transport.serialization", "protobuf")], &[]);
    let protobuf = |o: &mut meshline::rpc::ClientOptions| {
        o.transport.batch = Some(meshline::rpc::BatchOptions::default());
    };
    let tm = tx_world::tm_with(&hub, &config, protobuf).await;
    assert_eq!(tm.client().options().transport.codec, CODEC_PROTOBUF);
    let recorder = Recorder::default();
    let stock = tx_world::rm_with(
        &hub,
        ("stock", "jdbc:stock"),
        recorder.clone(),
        &config,
        protobuf,
    )
    .await;
    let stats = tc.tc.stats();
    let before = (
        stats.requests.load(Ordering::Relaxed),
        stats.protobuf_requests.load(Ordering::Relaxed),
    );

    // Rounds of 16 transactions at once until the TM's requests were merged at least
    // once (requests queued behind a write go together).
    let mut committed = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tc.tc.stats().merged_frames.load(Ordering::Relaxed) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "never merged");
        let rounds = (0..16).map(|i| {
            let (tm, stock) = (&tm, &stock);
            async move {
                let tx = tm.begin("pb", Duration::from_secs(30)).await.unwrap();
                stock
                    .branch_register(
                        tx.xid(),
                        BranchType::AT,
                        "jdbc:stock",
                        Some(&format!("stock:{i}")),
                        None,
                    )
                    .await
                    .unwrap();
                tx.commit().await.unwrap()
            }
        });
        for status in futures_util::future::join_all(rounds).await {
            assert_eq!(status, GlobalStatus::Committed);
            committed += 1;
        }
    }
    recorder
        .wait_calls(committed, Duration::from_secs(10))
        .await;
    // Every request since (begins, branch registrations, commits, merged or not) came
    // in protobuf.
    let read = stats.requests.load(Ordering::Relaxed) - before.0;
    let protobuf = stats.protobuf_requests.load(Ordering::Relaxed) - before.1;
    // (Frames, not requests: a merged frame carries many.)
    assert!(read >= 3, "{read} frames for {committed} transactions");
    assert_eq!(protobuf, read, "requests not in protobuf");
    assert_eq!(stats.bad_requests.load(Ordering::Relaxed), 0);
}
