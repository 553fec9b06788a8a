//! Outlier detection by rate on real connections: an endpoint that fails every other
//! call never fails five in a row, so failure accrual alone keeps it in the picks; the
//! failure-percentage rule ejects it within an interval or two, and a PING and the
//! probe bring it back when its answers are good again. The settings come from
//! `transport.*` keys, and the cap on ejections holds.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use meshline_rpc_client::{
    CallOptions, Classifier, ClientOptions, EndpointState, Outcome, Payload, RpcClient,
};

const SEC: Duration = Duration::from_secs(1);

/// Answers from servers named in `sick` fail every other time (their own count), while
/// `healed` is false; every other answer is a success.
fn alternating(sick: &'static [&'static str], healed: Arc<AtomicBool>) -> Classifier {
    let count = Arc::new(AtomicU64::new(0));
    Classifier::new(move |answer: &Payload| {
        let server = answer.head.get("server").unwrap_or_default();
        if !healed.load(Ordering::SeqCst)
            && sick.contains(&server)
            && count.fetch_add(1, Ordering::SeqCst) % 2 == 1
        {
            return Outcome::ServerFailure;
        }
        Outcome::Success
    })
}

fn options(config: &str, classifier: Classifier) -> ClientOptions {
    let mut o = options_from(config);
    o.classifier = Some(classifier);
    o
}

/// Calls `client` as fast as it answers until `done` holds or `limit` passes; returns
/// how many calls were made.
async fn call_until(client: &RpcClient, limit: Duration, mut done: impl FnMut() -> bool) -> u64 {
    let start = tokio::time::Instant::now();
    let mut calls = 0;
    while start.elapsed() < limit && !done() {
        // A server failure is an answer the classifier reads: every call is answered.
        client
            .call(Payload::new(&b"x"[..]), CallOptions::new())
            .await
            .expect("every call is answered");
        calls += 1;
    }
    calls
}

const RATE_KEYS: &str = "transport.failurePercentageThreshold=40\n\
     transport.failurePercentageMinimumHosts=3\n\
     transport.failurePercentageRequestVolume=10\n\
     transport.outlierInterval=200ms\n\
     transport.ejectionTime=300ms\n";

#[tokio::test]
async fn an_endpoint_failing_half_its_calls_is_ejected_by_failure_percentage() {
    let [a, b, sick] = echo_servers(["a", "b", "sick"]).await;
    let hub = hub_of(&[&a, &b, &sick]);
    let port = sick.addr().port();

    // Failure accrual alone: 1.5 s of calls, the sick endpoint half failing, never out.
    let healed = Arc::new(AtomicBool::new(false));
    let o = options("", alternating(&["sick"], healed.clone()));
    assert!(
        !o.outlier.judges_rates(),
        "rates are judged only when asked"
    );
    let client = build_alive(builder(&hub, "RoundRobinLoadBalance").options(o), 3, SEC).await;
    let calls = call_until(&client, Duration::from_millis(1500), || false).await;
    assert!(calls > 300, "only {calls} calls");
    assert_eq!(state_of(&client, port), EndpointState::Alive);
    assert_eq!(client.stats().ejections, 0);
    assert!(client.stats().server_failures > 50);
    client.shutdown(SEC).await;

    // With the failure-percentage rule: out within a few intervals, then back once its
    // answers are good (the PING after the ejection time).
    let o = options(RATE_KEYS, alternating(&["sick"], healed.clone()));
    assert_eq!(o.outlier.failure_percentage_threshold, Some(40));
    assert_eq!(o.outlier.interval, Duration::from_millis(200));
    let client = build_alive(builder(&hub, "RoundRobinLoadBalance").options(o), 3, SEC).await;
    let start = tokio::time::Instant::now();
    call_until(&client, Duration::from_secs(3), || {
        matches!(state_of(&client, port), EndpointState::Ejected(_))
    })
    .await;
    let out_after = start.elapsed();
    let EndpointState::Ejected(why) = state_of(&client, port) else {
        panic!("not ejected within 3 s: {:?}", state_of(&client, port));
    };
    assert!(why.contains("calls failed"), "{why}");
    // Two intervals (the first sets the baseline) and calls enough: well under 1.5 s,
    // which accrual alone never managed above.
    assert!(out_after < Duration::from_millis(1200), "{out_after:?}");
    assert_eq!(client.alive().len(), 2);
    assert!(client.stats().ejections >= 1);
    // Healed: back within the ejection time (doubled at most twice) and a PING.
    healed.store(true, Ordering::SeqCst);
    let back = until(Duration::from_secs(3), || {
        state_of(&client, port) == EndpointState::Alive
    })
    .await;
    assert!(back.is_some(), "not back: {:?}", state_of(&client, port));
    // And it stays: good answers do not eject it again.
    call_until(&client, Duration::from_millis(600), || false).await;
    assert_eq!(state_of(&client, port), EndpointState::Alive);
    client.shutdown(SEC).await;
}

/// Two of four endpoints fail half their calls; `transport.maxEjectionPercent=25`
/// lets one go, not both.
#[tokio::test]
async fn the_ejection_cap_holds_for_rate_ejections() {
    let servers = echo_servers(["a", "b", "sick", "sick2"]).await;
    let hub = hub_of(&servers.each_ref());
    let keys = format!("{RATE_KEYS}transport.maxEjectionPercent=25\n");
    let o = options(
        &keys,
        alternating(&["sick", "sick2"], Arc::new(AtomicBool::new(false))),
    );
    assert_eq!(o.outlier.max_ejection_percent, 25);
    let client = build_alive(builder(&hub, "RoundRobinLoadBalance").options(o), 4, SEC).await;
    let ejected = |c: &RpcClient| {
        c.endpoints()
            .iter()
            .filter(|e| matches!(e.state, EndpointState::Ejected(_)))
            .count()
    };
    // Over 3 s of calls (each sick one ejected and returned in turn), never two out.
    let mut most = 0;
    call_until(&client, Duration::from_secs(3), || {
        most = most.max(ejected(&client));
        most > 1
    })
    .await;
    assert_eq!(most, 1, "{:?}", client.endpoints());
    assert!(client.stats().ejections >= 1);
    client.shutdown(SEC).await;
}

/// An invalid value names its key.
#[test]
fn invalid_outlier_keys_are_refused_by_name() {
    assert_each_refused_by_name(&[
        ("transport.maxEjectionPercent=101", "maxEjectionPercent"),
        (
            "transport.failurePercentageThreshold=-1",
            "failurePercentageThreshold",
        ),
        (
            "transport.successRateStdevFactor=much",
            "successRateStdevFactor",
        ),
        ("transport.outlierInterval=10", "outlierInterval"),
        ("transport.maxEjectionTime=0s", "maxEjectionTime"),
    ]);
}
