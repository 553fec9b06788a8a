//! The retry budget on real connections: a TM commit that gets no answer is sent again
//! only while the budget allows; a request that was not written goes to another
//! endpoint whatever the budget (failover: it reached no server). The settings come
//! from `transport.retryBudget*`.

use crate::common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use meshline_rpc_client::tm::{TmOptions, TransactionManager};
use meshline_rpc_client::{
    CallOptions, ClientOptions, Payload, RetryBudget, RpcClient, RpcError, TransactionError,
};

const SEC: Duration = Duration::from_secs(1);

fn budget(percent: f32, min_per_second: u32) -> RetryBudget {
    RetryBudget {
        percent,
        min_per_second,
        ..RetryBudget::default()
    }
}

/// One call queued behind a stalled 48 MiB write to a deaf endpoint, the only one
/// alive when it is picked; a good endpoint joins while it waits; the write deadline
/// then closes the deaf connection with the call still queued: not written. What the
/// call returns, and what the good server saw.
async fn call_not_written_first(
    retry_budget: RetryBudget,
) -> (Result<String, RpcError>, RpcClient, usize) {
    let (deaf, _deaf_task) = deaf_listener().await;
    let good = start("good", Mode::Echo).await;
    let hub = hub_with(vec![instance(deaf)]);
    let big_queues = builder(&hub, "RoundRobinLoadBalance").configure(|o| {
        o.transport.write_timeout = Some(Duration::from_millis(800));
        o.transport.max_frame_len = 64 << 20;
        o.transport.request_queue_bytes = 64 << 20;
        o.retry_budget = retry_budget;
    });
    let client = build_alive(big_queues, 1, SEC).await;
    let c2 = client.clone();
    let key = instance(deaf).key().clone();
    let stuck = tokio::spawn(async move {
        c2.send_oneway_to(&key, Payload::new(Bytes::from(vec![0u8; 48 << 20])), None)
            .await
    });
    let conn = client.alive().endpoints()[0].connection.clone();
    until(SEC * 5, || conn.queued_bytes() >= 48 << 20)
        .await
        .expect("the big write never started");
    let c3 = client.clone();
    let call = tokio::spawn(async move {
        c3.call(
            Payload::new(&b"x"[..]),
            CallOptions::new().with_timeout(SEC * 5),
        )
        .await
        .map(|r| r.payload.head.get("server").unwrap_or_default().to_string())
    });
    // The call is queued on the deaf connection; now the good endpoint joins.
    until(SEC * 5, || conn.queued() >= 1)
        .await
        .expect("the call never queued behind the big write");
    assert!(
        !conn.is_closed(),
        "the deaf connection closed before the call queued"
    );
    hub.publish("c", vec![instance(deaf), good.instance()]);
    client.wait_alive(2, SEC).await.unwrap();
    let got = call.await.unwrap();
    // The big send was in the write the deadline cut: it may have been delivered.
    let big = stuck.await.unwrap();
    assert!(
        matches!(big, Err(RpcError::MaybeDelivered { .. })),
        "the stalled send: {big:?}"
    );
    let seen = good.requests.load(std::sync::atomic::Ordering::SeqCst);
    (got, client, seen)
}

/// A call left queued on a connection that died goes to the live endpoint even with a
/// budget of nothing: it never reached a server, so sending it elsewhere is failover,
/// not a retry, and the budget neither refuses it nor pays for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_not_written_fails_over_whatever_the_budget() {
    for retry_budget in [RetryBudget::default(), budget(0.0, 0)] {
        let (got, client, seen) = call_not_written_first(retry_budget).await;
        assert_eq!(got.unwrap(), "good", "{retry_budget:?}");
        assert_eq!(seen, 1);
        assert_eq!(client.stats().retries, 1);
        assert_eq!(client.stats().retries_refused, 0);
        // And the budget is untouched: with none at all, the TM's door stays shut.
        assert_eq!(client.withdraw_retry(), retry_budget.min_per_second > 0);
        client.shutdown(SEC).await;
    }
}

/// A TM commit against a TC that never answers: Seata's five attempts with a budget,
/// one without.
#[tokio::test]
async fn a_tm_commit_is_sent_again_only_while_the_budget_allows() {
    for (retry_budget, expected) in [(RetryBudget::default(), 5), (budget(0.0, 0), 1)] {
        let silent = start("silent", Mode::Silent).await;
        let hub = hub_of(&[&silent]);
        let tm_client = builder(&hub, "XID").handshake(seata_tm()).configure(|o| {
            o.request_timeout = Duration::from_millis(100);
            o.retry_budget = retry_budget;
        });
        let client = build_alive(tm_client, 1, SEC).await;
        let tm = TransactionManager::from_client(client.clone(), TmOptions::default());
        let e = tm.commit("127.0.0.1:8091:1").await.unwrap_err();
        assert!(matches!(e, TransactionError::Rpc { .. }), "{e:?}");
        let seen = silent.requests.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(seen, expected, "commits sent with {retry_budget:?}");
        let refused = client.stats().retries_refused;
        assert_eq!(refused, u64::from(expected == 1), "{retry_budget:?}");
        client.shutdown(SEC).await;
    }
}

/// The keys, and a value out of range named by its key.
#[test]
fn the_budget_comes_from_transport_keys() {
    let o = ClientOptions::from_config(&properties(
        "transport.retryBudgetPercent=5\ntransport.retryBudgetMinPerSecond=2\n\
         transport.retryBudgetTtl=30s\n",
    ))
    .unwrap();
    assert_eq!(
        o.retry_budget,
        RetryBudget {
            percent: 5.0,
            min_per_second: 2,
            ttl: Duration::from_secs(30),
        }
    );
    assert_eq!(
        ClientOptions::default().retry_budget,
        RetryBudget::default()
    );
    assert_each_refused_by_name(&[
        ("transport.retryBudgetPercent=1001", "retryBudgetPercent"),
        ("transport.retryBudgetTtl=0s", "retryBudgetTtl"),
        ("transport.retryBudgetTtl=2m", "retryBudgetTtl"),
        (
            "transport.retryBudgetMinPerSecond=-1",
            "retryBudgetMinPerSecond",
        ),
    ]);
}
