//! The client's call limits on real connections: its cap on calls in flight refuses
//! the call past it at once and sends nothing; an endpoint at its own cap is skipped
//! for another, and a call every endpoint would refuse is refused; the circuit breaker
//! opens when most recent calls failed, refuses calls (none reaches the server) for its
//! cool-down, and closes after its probes succeed. The settings come from `transport.*`
//! keys.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use meshline_loadbalance::PickRequest;
use meshline_rpc_client::limits::BreakerState;
use meshline_rpc_client::{
    CallOptions, Classifier, ClientOptions, LimitScope, Outcome, Payload, RpcClient, RpcError,
};
use tokio::time::Instant;

const SEC: Duration = Duration::from_secs(1);

fn quick() -> Payload {
    Payload::new(&b"x"[..])
}

async fn client(servers: &[&TestServer], lb: &str, o: ClientOptions) -> RpcClient {
    let hub = hub_of(servers);
    build_alive(builder(&hub, lb).options(o), servers.len(), SEC).await
}

/// A call routed by `key` that the test server answers after 1.5 s.
fn spawn_call(
    client: &RpcClient,
    key: &'static [u8],
) -> tokio::task::JoinHandle<Result<meshline_rpc_client::Response, RpcError>> {
    let by_key = CallOptions::route(PickRequest::default().with_key(key));
    spawn_held_call(client, "1500", by_key)
}

#[tokio::test]
async fn the_client_cap_refuses_the_call_past_it_at_once_and_sends_nothing() {
    let a = start("a", Mode::Echo).await;
    let client = client(
        &[&a],
        "RoundRobinLoadBalance",
        options_from("transport.maxInFlight=2\n"),
    )
    .await;
    let held_calls = [spawn_call(&client, b"k"), spawn_call(&client, b"k")];
    until(SEC, || a.requests.load(Ordering::SeqCst) == 2)
        .await
        .expect("both held calls reached the server");

    let started = Instant::now();
    let err = client.call(quick(), CallOptions::new()).await.unwrap_err();
    let refused_after = started.elapsed();
    assert!(
        matches!(
            err,
            RpcError::LimitReached {
                scope: LimitScope::Client,
                limit: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.is_not_delivered());
    // At once, not when a held call ends (1.5 s).
    assert!(
        refused_after < Duration::from_millis(200),
        "{refused_after:?}"
    );
    assert_eq!(
        a.requests.load(Ordering::SeqCst),
        2,
        "the refused call reached no server"
    );
    assert_eq!(client.stats().limit_refused, 1);

    for call in held_calls {
        call.await.unwrap().expect("the held calls are answered");
    }
    client
        .call(quick(), CallOptions::new())
        .await
        .expect("a slot is free again");
    assert_eq!(a.requests.load(Ordering::SeqCst), 3);
    client.shutdown(SEC).await;
}

/// One key hashes to one endpoint: without the per-endpoint cap both held calls would
/// wait there. With a cap of one, the second goes to the other endpoint, and a third
/// finds both at their cap.
#[tokio::test]
async fn an_endpoint_at_its_cap_is_skipped_and_all_at_cap_refuses() {
    let [a, b] = echo_servers(["a", "b"]).await;
    let o = options_from("transport.maxInFlightPerEndpoint=1\n");
    let client = client(&[&a, &b], "ConsistentHash", o).await;
    let held_calls = [
        spawn_call(&client, b"player-1"),
        spawn_call(&client, b"player-1"),
    ];
    until(SEC, || {
        a.requests.load(Ordering::SeqCst) == 1 && b.requests.load(Ordering::SeqCst) == 1
    })
    .await
    .expect("one held call on each endpoint");

    let err = client
        .call(
            quick(),
            CallOptions::route(PickRequest::default().with_key(b"player-1")),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            RpcError::LimitReached {
                scope: LimitScope::Endpoint,
                limit: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.is_not_delivered());
    let sent = a.requests.load(Ordering::SeqCst) + b.requests.load(Ordering::SeqCst);
    assert_eq!(sent, 2, "the refused call reached no server");
    for call in held_calls {
        call.await.unwrap().expect("the held calls are answered");
    }
    // Both slots free: the key's own endpoint takes it again.
    client
        .call(
            quick(),
            CallOptions::route(PickRequest::default().with_key(b"player-1")),
        )
        .await
        .expect("the endpoints have room again");
    client.shutdown(SEC).await;
}

/// Every answer is the server's failure until `healed`.
fn failing_until(healed: Arc<AtomicBool>) -> Classifier {
    Classifier::new(move |_: &Payload| {
        if healed.load(Ordering::SeqCst) {
            Outcome::Success
        } else {
            Outcome::ServerFailure
        }
    })
}

const BREAKER_KEYS: &str = "transport.breaker=true\n\
     transport.breakerMinRequests=5\n\
     transport.breakerFailureRatio=0.5\n\
     transport.breakerWindow=10s\n\
     transport.breakerCoolDown=400ms\n\
     transport.breakerProbes=2\n\
     transport.ejectAfterFailures=0\n";

#[tokio::test]
async fn the_breaker_opens_on_failures_refuses_for_its_cool_down_and_closes_after_probes() {
    let a = start("a", Mode::Echo).await;
    let healed = Arc::new(AtomicBool::new(false));
    let mut o = options_from(BREAKER_KEYS);
    o.classifier = Some(failing_until(healed.clone()));
    let client = client(&[&a], "RoundRobinLoadBalance", o).await;
    assert_eq!(client.circuit(), Some(BreakerState::Closed));

    // Four failures: under the minimum count. The fifth opens it.
    for i in 0..5 {
        client
            .call(quick(), CallOptions::new())
            .await
            .expect("answered");
        let want = if i < 4 {
            BreakerState::Closed
        } else {
            BreakerState::Open
        };
        assert_eq!(client.circuit(), Some(want), "after call {}", i + 1);
    }
    let opened = Instant::now();
    let err = client.call(quick(), CallOptions::new()).await.unwrap_err();
    assert!(matches!(err, RpcError::CircuitOpen { .. }), "{err}");
    assert!(err.is_not_delivered());
    assert_eq!(
        a.requests.load(Ordering::SeqCst),
        5,
        "no call reached the server while open"
    );

    // The cluster heals; calls keep being refused until the cool-down ends, then the
    // first is let through as a probe.
    healed.store(true, Ordering::SeqCst);
    let err = client.call(quick(), CallOptions::new()).await.unwrap_err();
    assert!(
        matches!(err, RpcError::CircuitOpen { .. }),
        "healed, still open: {err}"
    );
    // The breaker itself says when its cool-down is over: it reports half-open.
    until(2 * SEC, || client.circuit() == Some(BreakerState::HalfOpen))
        .await
        .expect("the cool-down ended");
    client
        .call(quick(), CallOptions::new())
        .await
        .expect("the first probe");
    let first = opened.elapsed();
    assert!(
        first >= Duration::from_millis(380) && first < SEC,
        "first call let through {first:?} after opening (cool-down 400 ms)"
    );
    assert_eq!(client.circuit(), Some(BreakerState::HalfOpen));
    client
        .call(quick(), CallOptions::new())
        .await
        .expect("the second probe");
    assert_eq!(client.circuit(), Some(BreakerState::Closed));
    let refused = client.stats().circuit_refused;
    assert!(refused >= 1, "{refused}");
    assert_eq!(
        a.requests.load(Ordering::SeqCst),
        7,
        "five failures and two probes reached the server, nothing else"
    );
    client.shutdown(SEC).await;
}

/// A client without limits has no breaker and refuses nothing, however many calls.
#[tokio::test]
async fn limits_are_off_by_default() {
    let o = ClientOptions::default();
    assert_eq!(o.limits, Default::default());
    let a = start("a", Mode::Echo).await;
    let client = client(&[&a], "RoundRobinLoadBalance", o).await;
    assert_eq!(client.circuit(), None);
    let calls: Vec<_> = (0..64).map(|_| spawn_call(&client, b"k")).collect();
    for call in calls {
        call.await.unwrap().expect("answered");
    }
    assert_eq!(client.stats().limit_refused, 0);
    client.shutdown(SEC).await;
}
