//! Requests in Seata's protobuf codec (`transport.serialization = protobuf`, codec byte
//! 0x2), as a Seata client so configured sends them: the example TC reads them and
//! answers in the request's codec and compressor, through a whole transaction.

mod tx_world;

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
