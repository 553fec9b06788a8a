//! Clients on Seata's gRPC transport (`transport.protocol = grpc`) against the example
//! TC, which serves gRPC and v1 on one port as Seata's TC does: whole transactions
//! (phase two at both RMs), rollback, a lock conflict, batching, and v1 clients beside
//! them.

use crate::tx_world;

use std::time::Duration;

use meshline::rpc::message::{BranchType, GlobalStatus, TransactionExceptionCode};
use meshline::rpc::rm::ResourceManager;
use meshline::rpc::tm::{GlobalTransaction, TransactionManager};
use meshline::rpc::{BatchOptions, ClientOptions, Protocol, Server};
use meshline::{Config, WatchHub};
use tx_world::{Call, Recorder, Tc, quick_options, rm_with, start_tc, tm_with};

fn grpc() -> Config {
    meshline_testkit::config_of(
        &[
            ("transport.protocol", "grpc"),
            ("client.rm.lock.retryTimes", "0"),
        ],
        &[],
    )
}

/// A TC and the hub listing it.
async fn world() -> (Tc, WatchHub) {
    let tc = start_tc(quick_options(), meshline::rpc::ServerConfig::default()).await;
    let hub = WatchHub::new("test", meshline::EmptyProtection::Apply);
    hub.publish("c", vec![tc.instance()]);
    (tc, hub)
}

async fn rm(hub: &WatchHub, app: &str, resource: &str, recorder: Recorder) -> ResourceManager {
    rm_with(hub, (app, resource), recorder, &grpc(), |_| {}).await
}

/// How many of the server's connections speak each wire: (v1, gRPC).
fn wires(server: &Server) -> (usize, usize) {
    let conns = server.connections();
    let grpc = conns
        .iter()
        .filter(|c| c.protocol() == Protocol::Grpc)
        .count();
    (conns.len() - grpc, grpc)
}

/// Begins a transaction and registers a branch at each RM (`stock:<n>`, `order:<n>`);
/// the transaction, its XID and the two branch ids.
async fn two_branches(
    tm: &TransactionManager,
    (stock, order): (&ResourceManager, &ResourceManager),
    n: u32,
) -> (GlobalTransaction, String, i64, i64) {
    let tx = tm.begin("buy", Duration::from_secs(30)).await.unwrap();
    let s = stock
        .branch_register(
            tx.xid(),
            BranchType::AT,
            "jdbc:stock",
            Some(&format!("stock:{n}")),
            None,
        )
        .await
        .unwrap();
    let o = order
        .branch_register(
            tx.xid(),
            BranchType::AT,
            "jdbc:order",
            Some(&format!("order:{n}")),
            None,
        )
        .await
        .unwrap();
    let xid = tx.xid().to_string();
    (tx, xid, s, o)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_over_grpc_commit_with_phase_two_at_both_rms_and_roll_back() {
    let (tc, hub) = world().await;
    let tm = tm_with(&hub, &grpc(), |_| {}).await;
    let (stock_calls, order_calls) = (Recorder::default(), Recorder::default());
    let stock = rm(&hub, "stock", "jdbc:stock", stock_calls.clone()).await;
    let order = rm(&hub, "order", "jdbc:order", order_calls.clone()).await;
    // Every client connection reached the TC over gRPC.
    assert_eq!(wires(&tc.server), (0, 3));

    let (tx, xid, s, o) = two_branches(&tm, (&stock, &order), 1).await;
    assert_eq!(tx.commit().await.unwrap(), GlobalStatus::Committed);
    // Phase two came back down both RMs' gRPC streams (the TC's requests to them).
    let within = Duration::from_secs(5);
    assert_eq!(
        stock_calls.wait_calls(1, within).await,
        vec![Call::Commit(xid.clone(), s)]
    );
    assert_eq!(
        order_calls.wait_calls(1, within).await,
        vec![Call::Commit(xid, o)]
    );

    let (tx, xid, s, o) = two_branches(&tm, (&stock, &order), 2).await;
    assert_eq!(tx.rollback().await.unwrap(), GlobalStatus::Rollbacked);
    assert_eq!(
        stock_calls.wait_calls(2, within).await[1],
        Call::Rollback(xid.clone(), s)
    );
    assert_eq!(
        order_calls.wait_calls(2, within).await[1],
        Call::Rollback(xid, o)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_conflict_over_grpc_is_the_tcs_answer() {
    let (_tc, hub) = world().await;
    let tm = tm_with(&hub, &grpc(), |_| {}).await;
    let stock = rm(&hub, "stock", "jdbc:stock", Recorder::default()).await;
    let a = tm.begin("a", Duration::from_secs(30)).await.unwrap();
    let b = tm.begin("b", Duration::from_secs(30)).await.unwrap();
    let register = |xid: String| {
        let stock = stock.clone();
        async move {
            stock
                .branch_register(&xid, BranchType::AT, "jdbc:stock", Some("t:1"), None)
                .await
        }
    };
    register(a.xid().to_string()).await.unwrap();
    match register(b.xid().to_string()).await {
        Err(e) => assert_eq!(
            e.exception_code(),
            TransactionExceptionCode::LockKeyConflict
        ),
        Ok(id) => panic!("t:1 is held by a, yet registered as {id}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_and_grpc_clients_share_the_tc_port_at_once() {
    let (tc, hub) = world().await;
    let over_grpc = tm_with(&hub, &grpc(), |_| {}).await;
    let over_v1 = tm_with(&hub, &Config::default(), |_| {}).await;
    assert_eq!(wires(&tc.server), (1, 1));
    let run = |tm: &TransactionManager| {
        let tm = tm.clone();
        async move {
            for _ in 0..50 {
                let tx = tm.begin("mixed", Duration::from_secs(30)).await.unwrap();
                assert_eq!(tx.commit().await.unwrap(), GlobalStatus::Committed);
            }
        }
    };
    let rounds: Vec<_> = (0..4)
        .flat_map(|_| [run(&over_grpc), run(&over_v1)])
        .collect();
    futures_util::future::join_all(rounds).await;
    assert_eq!(tc.tc.open_sessions(), 0);
}

/// Batching over gRPC: merged requests must each fit one DATA frame of the TC's size
/// (16 KiB by default) however many are queued: 128 transactions at once with 2 KB lock
/// keys queue far more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_requests_over_grpc_are_merged_within_one_data_frame() {
    use std::sync::atomic::Ordering;
    let (tc, hub) = world().await;
    let batched = |o: &mut ClientOptions| o.transport.batch = Some(BatchOptions::default());
    let tm = tm_with(&hub, &grpc(), batched).await;
    let stock = rm_with(
        &hub,
        ("stock", "jdbc:stock"),
        Recorder::default(),
        &grpc(),
        batched,
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut round = 0;
    while tc.tc.stats().merged_frames.load(Ordering::Relaxed) < 10 {
        assert!(tokio::time::Instant::now() < deadline, "never merged");
        round += 1;
        let txs = (0..128).map(|i| {
            let (tm, stock) = (&tm, &stock);
            async move {
                let tx = tm.begin("merged", Duration::from_secs(30)).await.unwrap();
                let key = format!("stock:{round}:{i}:{}", "x".repeat(2_000));
                stock
                    .branch_register(tx.xid(), BranchType::AT, "jdbc:stock", Some(&key), None)
                    .await
                    .unwrap();
                tx.commit().await.unwrap()
            }
        });
        for status in futures_util::future::join_all(txs).await {
            assert_eq!(status, GlobalStatus::Committed);
        }
    }
    assert_eq!(wires(&tc.server), (0, 2));
}

/// `transport.compressor` over gRPC: the bodies are the `Any`s compressed, as Seata's
/// encoder writes them, and the TC answers in the request's compressor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressing_grpc_client_runs_transactions() {
    let (tc, hub) = world().await;
    let config = meshline_testkit::config_of(
        &[
            ("transport.protocol", "grpc"),
            ("transport.compressor", "gzip"),
        ],
        &[],
    );
    let tm = tm_with(&hub, &config, |_| {}).await;
    let recorder = Recorder::default();
    let stock = rm_with(
        &hub,
        ("stock", "jdbc:stock"),
        recorder.clone(),
        &config,
        |_| {},
    )
    .await;
    let tx = tm.begin("gz", Duration::from_secs(30)).await.unwrap();
    let b = stock
        .branch_register(tx.xid(), BranchType::AT, "jdbc:stock", Some("gz:1"), None)
        .await
        .unwrap();
    let xid = tx.xid().to_string();
    assert_eq!(tx.commit().await.unwrap(), GlobalStatus::Committed);
    assert_eq!(
        recorder.wait_calls(1, Duration::from_secs(5)).await,
        vec![Call::Commit(xid, b)]
    );
    assert_eq!(wires(&tc.server), (0, 2));
}
