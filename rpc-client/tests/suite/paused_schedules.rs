//! The client's schedules in tokio's paused time, where every duration is exact. The
//! servers and connections are real loopback ones (ready at once); only the waits are
//! virtual. (The reconnect backoff's are unit tests of the endpoint task.)
//!
//! - Ejection: an endpoint whose answers keep failing is out of the picks for the
//!   ejection time, doubled for each ejection in a row up to the longest, and back at
//!   once when a PING is answered; an ejection more than a minute after its return
//!   starts the row again. `silent_peers.rs` and `outlier_detection.rs` keep the
//!   real-time tests.
//! - A membership change: an endpoint the registry removes drains until its calls are
//!   answered or the drain deadline passes, then closes. `client.rs` keeps the
//!   real-time tests of removals.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use meshline_rpc_client::{
    CallOptions, Classifier, ClientOptions, EndpointState, Outcome, Payload, RpcClient, RpcError,
};
use tokio::time::Instant;

/// One step of virtual time between two looks at the endpoint's state.
const STEP: Duration = Duration::from_millis(1);

fn ejected(client: &RpcClient, port: u16) -> bool {
    matches!(state_of(client, port), EndpointState::Ejected(_))
}

/// Calls until `port` is ejected (every call is answered: a failing answer is one the
/// classifier reads); returns when it was.
async fn call_until_ejected(client: &RpcClient, port: u16) -> Instant {
    for _ in 0..1000 {
        client
            .call(Payload::new(&b"x"[..]), CallOptions::new())
            .await
            .expect("every call is answered");
        if ejected(client, port) {
            return Instant::now();
        }
    }
    panic!("not ejected after 1000 calls: {:?}", state_of(client, port));
}

/// How long `port` stays ejected from `since`, looked at every [`STEP`].
async fn ejected_for(client: &RpcClient, port: u16, since: Instant) -> Duration {
    while ejected(client, port) {
        assert!(since.elapsed() < Duration::from_secs(60), "never back");
        tokio::time::sleep(STEP).await;
    }
    assert_eq!(state_of(client, port), EndpointState::Alive);
    since.elapsed()
}

/// Within a step of `want` (the look that saw it back came at most a step later).
fn about(got: Duration, want: Duration) -> bool {
    got >= want && got <= want + STEP * 2
}

#[tokio::test(start_paused = true)]
async fn ejections_in_a_row_double_up_to_the_longest_and_a_late_one_starts_again() {
    let [a, b] = echo_servers(["a", "b"]).await;
    let hub = hub_of(&[&a, &b]);
    let port = b.addr().port();
    // b's answers fail while `sick`.
    let sick = Arc::new(AtomicBool::new(true));
    let s = sick.clone();
    let classifier = Classifier::new(move |answer: &Payload| {
        if s.load(Ordering::SeqCst) && answer.head.get("server") == Some("b") {
            Outcome::ServerFailure
        } else {
            Outcome::Success
        }
    });
    let mut o = ClientOptions {
        eject_after_failures: 3,
        ejection_time: Duration::from_secs(1),
        // No idle timers: the only clocks are the ejection's.
        heartbeat: false,
        classifier: Some(classifier),
        ..ClientOptions::default()
    };
    o.outlier.max_ejection_time = Duration::from_secs(4);
    let client = build_alive(
        builder(&hub, "RoundRobinLoadBalance").options(o),
        2,
        Duration::from_secs(1),
    )
    .await;

    // Still failing on its return, each ejection follows the last: 1, 2, 4, 4 s.
    for want in [1, 2, 4, 4].map(Duration::from_secs) {
        let since = call_until_ejected(&client, port).await;
        let out = ejected_for(&client, port, since).await;
        assert!(about(out, want), "ejected for {out:?}, want {want:?}");
    }
    // Healed: its answers clear the row of failures.
    sick.store(false, Ordering::SeqCst);
    for _ in 0..10 {
        client
            .call(Payload::new(&b"x"[..]), CallOptions::new())
            .await
            .unwrap();
    }
    assert_eq!(state_of(&client, port), EndpointState::Alive);
    // Failing again more than a minute after it came back: a new row, 1 s. The minute
    // is the condition under test, and it passes in paused time by sleeping through it:
    // the runtime fires every timer due on the way in order (the server closes the idle
    // connection, the client reconnects), where `advance` would fire them all at once
    // and leave the next call racing a closing connection.
    tokio::time::sleep(Duration::from_secs(61)).await;
    sick.store(true, Ordering::SeqCst);
    let since = call_until_ejected(&client, port).await;
    let out = ejected_for(&client, port, since).await;
    assert!(about(out, Duration::from_secs(1)), "ejected for {out:?}");
    // Within the minute: in the same row, 2 s.
    let since = call_until_ejected(&client, port).await;
    let out = ejected_for(&client, port, since).await;
    assert!(about(out, Duration::from_secs(2)), "ejected for {out:?}");
    client.shutdown(Duration::from_secs(1)).await;
}

/// A call in flight on an endpoint the registry removes, its server never answering: the
/// connection drains for exactly the drain deadline, then closes, and the call fails as
/// maybe delivered (it was written); the endpoint is gone from the client then.
#[tokio::test(start_paused = true)]
async fn a_removed_endpoint_drains_until_its_deadline_then_closes() {
    const DRAIN: Duration = Duration::from_secs(2);
    let silent = start("s", Mode::Silent).await;
    let hub = hub_of(&[&silent]);
    let draining = builder(&hub, "RoundRobinLoadBalance").configure(|o| {
        o.heartbeat = false;
        o.drain_timeout = DRAIN;
        o.request_timeout = Duration::from_secs(60);
    });
    let client = build_alive(draining, 1, Duration::from_secs(1)).await;
    let c = client.clone();
    let call =
        tokio::spawn(async move { c.call(Payload::new(&b"x"[..]), CallOptions::new()).await });
    until(Duration::from_secs(1), || {
        silent.requests.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await
    .expect("the request reached the server");
    let removed = Instant::now();
    hub.publish("c", vec![]);
    let r = call.await.unwrap();
    let took = removed.elapsed();
    assert!(matches!(r, Err(RpcError::MaybeDelivered { .. })), "{r:?}");
    // The drain looks every 5 ms.
    assert!(
        took >= DRAIN && took <= DRAIN + Duration::from_millis(10),
        "closed {took:?} after the removal, drain deadline {DRAIN:?}"
    );
    until(Duration::from_secs(1), || client.endpoints().is_empty())
        .await
        .expect("the endpoint left the client");
}
