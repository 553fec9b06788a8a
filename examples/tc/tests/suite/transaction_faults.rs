//! Global transactions when something breaks: an RM gone before phase two and back, a
//! TC killed before or during a commit, bad input to a real `tc-server`, compressed
//! traffic both ways.

use crate::common;
use crate::tx_world;

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use meshline::rpc::codec::{CODEC_KRYO, CODEC_SEATA, Frame, FrameCodec, HeadMap, MessageType};
use meshline::rpc::compress::Compressor;
use meshline::rpc::message::{
    BranchType, GlobalBeginRequest, GlobalStatus, RegisterTmRequest, SeataMessage,
    TransactionExceptionCode,
};
use meshline::rpc::tm::TransactionManager;
use meshline::rpc::{RpcError, ServerConfig, TransactionError};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;
use tx_world::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rm_gone_before_phase_two_gets_its_commit_when_it_is_back() {
    let first = Recorder::default();
    let (hub, tcs, tm, rm1) = stock_world(1, first.clone()).await;
    let tx = tm.begin("order", Duration::from_secs(30)).await.unwrap();
    let b = rm1
        .branch_register(tx.xid(), BranchType::AT, "db-a", Some("t:1"), None)
        .await
        .unwrap();
    // The RM goes away (its connections close) before phase two.
    rm_gone(&tcs[0], &rm1, "db-a").await;
    // The TC cannot reach it: the TM hears the commit is being retried.
    assert_eq!(tx.commit().await.unwrap(), GlobalStatus::CommitRetrying);
    assert_eq!(tcs[0].tc.status(tx.xid()), GlobalStatus::CommitRetrying);
    // The RM comes back (another process of the same application: another port).
    let again = Recorder::default();
    let _rm2 = rm(&hub, "stock", "db-a", again.clone(), true, 1).await;
    let calls = again.wait_calls(1, Duration::from_secs(3)).await;
    assert_eq!(calls, vec![Call::Commit(tx.xid().into(), b)]);
    assert!(first.calls().is_empty());
    assert!(until(Duration::from_secs(2), || tcs[0].tc.open_sessions() == 0).await);
    assert_eq!(tx.status().await.unwrap(), GlobalStatus::Finished);
}

/// Begins until the XID names `tc` (begins are balanced over all TCs).
async fn begin_on(tm: &TransactionManager, tc: &Tc) -> meshline::rpc::tm::GlobalTransaction {
    for i in 0..200 {
        let tx = tm
            .begin(&format!("tx-{i}"), Duration::from_secs(30))
            .await
            .unwrap();
        if tx.xid().starts_with(tc.tc.xid_address()) {
            return tx;
        }
        tx.rollback().await.unwrap();
    }
    panic!("no begin landed on {}", tc.tc.xid_address());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tc_killed_before_commit_gives_a_clear_error_at_once() {
    let h = Recorder::default();
    let (_hub, tcs, tm, rm) = stock_world(2, h.clone()).await;
    let tx = begin_on(&tm, &tcs[0]).await;
    rm.branch_register(tx.xid(), BranchType::AT, "db-a", Some("t:1"), None)
        .await
        .unwrap();
    tcs[0].crash();
    assert!(until(Duration::from_secs(2), || tm.client().alive().len() == 1).await);
    let started = Instant::now();
    let err = tx.commit().await.unwrap_err();
    // The XID's TC is gone; the other TC never knew the transaction.
    assert_eq!(
        err.exception_code(),
        TransactionExceptionCode::CommitHeuristic,
        "{err}"
    );
    assert_eq!(err.global_status(), Some(GlobalStatus::Finished));
    assert!(err.to_string().contains("no longer knows"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(h.calls().is_empty(), "nobody told the RM anything");

    // With no TC left at all: the retries end in "no endpoint", not a hang.
    tcs[1].crash();
    assert!(until(Duration::from_secs(2), || tm.client().alive().is_empty()).await);
    let started = Instant::now();
    match tm.commit(tx.xid()).await.unwrap_err() {
        TransactionError::Rpc {
            source, operation, ..
        } => {
            assert!(matches!(*source, RpcError::NoEndpoint { .. }), "{source}");
            assert_eq!(operation, "global commit")
        }
        other => panic!("{other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tc_killed_during_commit_tells_the_tm_it_may_have_happened() {
    // Phase two takes 3 s at the RM: the commit is in flight at the TC meanwhile.
    let h = Recorder {
        delay: Some(Duration::from_secs(3)),
        ..Recorder::default()
    };
    let (_hub, tcs, tm, rm) = stock_world(2, h.clone()).await;
    let tx = begin_on(&tm, &tcs[0]).await;
    rm.branch_register(tx.xid(), BranchType::AT, "db-a", None, None)
        .await
        .unwrap();
    let committing = {
        let tx = tx.clone();
        tokio::spawn(async move { tx.commit().await })
    };
    // The commit reached the TC, which asked the RM: it is in flight.
    assert!(
        until(Duration::from_secs(2), || tcs[0].tc.status(tx.xid())
            == GlobalStatus::Committing)
        .await
    );
    let killed = Instant::now();
    tcs[0].crash();
    let err = committing.await.unwrap().unwrap_err();
    // The first attempt was written, then the TC died; the retry reached the other TC,
    // which does not know it. Both facts are in the error.
    assert_eq!(
        err.exception_code(),
        TransactionExceptionCode::CommitHeuristic,
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("earlier attempt whose answer was lost"),
        "{err}"
    );
    assert!(
        killed.elapsed() < Duration::from_secs(2),
        "waited {:?}",
        killed.elapsed()
    );
}

async fn raw(addr: std::net::SocketAddr) -> Framed<TcpStream, FrameCodec> {
    Framed::new(
        TcpStream::connect(addr).await.unwrap(),
        FrameCodec::default(),
    )
}

fn frame(id: u32, codec: u8, body: &[u8]) -> Frame {
    Frame {
        msg_type: MessageType::Request,
        codec,
        compressor: 0,
        request_id: id,
        head: HeadMap::new(),
        body: bytes::Bytes::copy_from_slice(body),
    }
}

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

async fn answer(c: &mut Framed<TcpStream, FrameCodec>) -> Option<(u32, SeataMessage)> {
    match tokio::time::timeout(Duration::from_secs(5), c.next())
        .await
        .expect("an answer or a close")
    {
        Some(Ok(f)) => {
            assert_eq!(f.msg_type, MessageType::Response);
            Some((f.request_id, SeataMessage::decode(&f.body).unwrap()))
        }
        None | Some(Err(_)) => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_to_tc_server_is_refused_never_echoed() {
    let tc = common::TcProcess::start("bad-input", 0, None);
    let hub = std::sync::Arc::new(meshline::WatchHub::new(
        "test",
        meshline::EmptyProtection::Apply,
    ));
    hub.publish("c", vec![tc.instance()]);
    let tm = tm(&hub, 1).await;
    let good = tm.begin("before", Duration::from_secs(10)).await.unwrap();

    // A registered client sends a truncated GlobalBegin: answered Failed, naming the field.
    let mut c = raw(tc.addr).await;
    let reg = SeataMessage::RegisterTm(RegisterTmRequest::default())
        .encode()
        .unwrap();
    c.send(frame(1, CODEC_SEATA, &reg)).await.unwrap();
    assert!(
        matches!(answer(&mut c).await, Some((1, SeataMessage::RegisterTmResponse(r))) if r.identified)
    );
    c.send(frame(2, CODEC_SEATA, &hex("0001 0000")))
        .await
        .unwrap();
    match answer(&mut c).await {
        Some((2, SeataMessage::GlobalBeginResponse(r))) => {
            assert!(!r.result.is_success());
            assert_eq!(r.result.exception, TransactionExceptionCode::BeginFailed);
            let m = r.result.message.unwrap();
            assert!(
                m.contains("GlobalBeginRequest (1): truncated at field `timeout`"),
                "{m}"
            );
        }
        other => panic!("{other:?}"),
    }
    // An unknown type code: the connection is closed, nothing answered.
    c.send(frame(3, CODEC_SEATA, &hex("0013 0000")))
        .await
        .unwrap();
    assert!(answer(&mut c).await.is_none(), "unknown type code answered");

    // A RegisterTM it cannot decode: identified = 0.
    let mut c = raw(tc.addr).await;
    c.send(frame(7, CODEC_SEATA, &hex("0065 0005 32")))
        .await
        .unwrap();
    assert!(
        matches!(answer(&mut c).await, Some((7, SeataMessage::RegisterTmResponse(r))) if !r.identified)
    );

    // Another serializer's body, and a request before registration: closed.
    let mut c = raw(tc.addr).await;
    c.send(frame(8, CODEC_KRYO, &reg)).await.unwrap();
    assert!(answer(&mut c).await.is_none());
    let mut c = raw(tc.addr).await;
    let begin = SeataMessage::GlobalBegin(GlobalBeginRequest::default())
        .encode()
        .unwrap();
    c.send(frame(9, CODEC_SEATA, &begin)).await.unwrap();
    assert!(
        answer(&mut c).await.is_none(),
        "a request before registration was served"
    );

    // The well-behaved TM was served all along.
    assert_eq!(good.rollback().await.unwrap(), GlobalStatus::Rollbacked);
    let tx = tm.begin("after", Duration::from_secs(10)).await.unwrap();
    assert_eq!(tx.commit().await.unwrap(), GlobalStatus::Committed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_both_ways_with_different_compressors() {
    let hub = std::sync::Arc::new(meshline::WatchHub::new(
        "test",
        meshline::EmptyProtection::Apply,
    ));
    let mut config = ServerConfig::default();
    config.transport.compressor = Compressor::Zstd;
    let tcs = vec![start_tc(quick_options(), config).await];
    publish(&hub, &tcs);
    let tm = meshline::rpc::tm::TransactionManager::builder()
        .watch(hub.subscribe("c"), "c")
        .load_balance_name("XID")
        .configure(|o| o.transport.compressor = Compressor::Gzip)
        .connected(1)
        .await;
    let h = Recorder::default();
    let rm = meshline::rpc::rm::ResourceManager::builder()
        .watch(hub.subscribe("c"), "c")
        .resource("db-a")
        .handler(h.clone())
        .load_balance_name("XID")
        .configure(|o| o.transport.compressor = Compressor::Lz4)
        .connected(1)
        .await;
    for commit in [true, false] {
        let tx = tm.begin("zipped", Duration::from_secs(10)).await.unwrap();
        let b = rm
            .branch_register(tx.xid(), BranchType::AT, "db-a", Some("t:1"), None)
            .await
            .unwrap();
        if commit {
            assert_eq!(tx.commit().await.unwrap(), GlobalStatus::Committed);
            assert!(h.calls().contains(&Call::Commit(tx.xid().into(), b)));
        } else {
            assert_eq!(tx.rollback().await.unwrap(), GlobalStatus::Rollbacked);
            assert!(h.calls().contains(&Call::Rollback(tx.xid().into(), b)));
        }
    }
    assert_eq!(
        tcs[0]
            .tc
            .stats()
            .bad_requests
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}
