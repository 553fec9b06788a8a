//! Slow start on real connections: a server that joins a warm cluster takes a small
//! share of the calls at first and its full share once the window has passed, under a
//! plain balancer (round robin) and a load-aware one (least-active, which would give
//! the idle newcomer more than its share); the servers of a client that is starting
//! take their full share at once; calls that name an XID on the newcomer reach it
//! every time, ramp or not. The settings come from `transport.*` keys.
//!
//! runs alone: it measures shares of the calls in windows of 0.3 s.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use meshline_registry_core::WatchHub;
use meshline_rpc_client::{CallOptions, ClientOptions, Payload, RpcClient};
use tokio::time::Instant;

const SEC: Duration = Duration::from_secs(1);
const WINDOW: Duration = Duration::from_secs(1);
const WINDOW_KEYS: &str = "transport.slowStartWindow=1s\n";

/// A client of `a` and `b` under `lb`, warm for `warm`, then `c` joining: returns
/// when `c` is alive, with the moment it was seen alive.
async fn joined(
    lb: &str,
    o: ClientOptions,
    servers: &[TestServer; 3],
    warm: Duration,
) -> (RpcClient, WatchHub, Instant) {
    let hub = WatchHub::new("test", meshline_registry_core::EmptyProtection::Apply);
    publish(&hub, &[&servers[0], &servers[1]]);
    let client = build_alive(builder(&hub, lb).options(o), 2, SEC).await;
    // The cluster warms under load: a newcomer ramps only once the alive set has been
    // up for a window. A starting client's two servers take their halves meanwhile.
    if !warm.is_zero() {
        let served = drive(&client, servers, Instant::now() + warm).await;
        let total = (served[0] + served[1]) as f64;
        assert!(
            served[..2].iter().all(|&n| n as f64 > 0.4 * total),
            "a starting client's servers served {served:?}"
        );
    }
    publish(&hub, &servers.each_ref());
    let port = servers[2].addr().port();
    until(SEC, || alive_ports(&client).contains(&port))
        .await
        .expect("the third server joined");
    (client, hub, Instant::now())
}

/// The share of the calls `servers[2]` served while eight callers called for `span`.
async fn share_of_third(client: &RpcClient, servers: &[TestServer; 3], span: Duration) -> f64 {
    let served = drive(client, servers, Instant::now() + span).await;
    let total: usize = served.iter().sum();
    assert!(total > 200, "only {total} calls in {span:?}");
    served[2] as f64 / total as f64
}

/// Eight callers call until `until`; the calls each server served meanwhile.
async fn drive(client: &RpcClient, servers: &[TestServer; 3], until: Instant) -> Vec<usize> {
    let before: Vec<usize> = servers
        .iter()
        .map(|s| s.requests.load(Ordering::SeqCst))
        .collect();
    let callers: Vec<_> = (0..8)
        .map(|_| {
            let c = client.clone();
            tokio::spawn(async move {
                while Instant::now() < until {
                    c.call(Payload::new(&b"x"[..]), CallOptions::new())
                        .await
                        .expect("answered");
                }
            })
        })
        .collect();
    for c in callers {
        c.await.unwrap();
    }
    servers
        .iter()
        .zip(&before)
        .map(|(s, b)| s.requests.load(Ordering::SeqCst) - b)
        .collect()
}

async fn ramps_under(lb: &str, early_max: f64, late_min: f64) {
    let servers = echo_servers(["a", "b", "c"]).await;
    let (client, _hub, joined_at) = joined(lb, options_from(WINDOW_KEYS), &servers, WINDOW).await;
    // The first 300 ms of a 1 s window: a factor of 0.1 to 0.3.
    let early = share_of_third(&client, &servers, Duration::from_millis(300)).await;
    drive(
        &client,
        &servers,
        joined_at + WINDOW + Duration::from_millis(100),
    )
    .await;
    let late = share_of_third(&client, &servers, Duration::from_millis(300)).await;
    println!(
        "{lb}: the newcomer's share {:.1} % in its first 0.3 s, {:.1} % after the window",
        early * 100.0,
        late * 100.0
    );
    assert!(early < early_max, "{lb}: {early:.3} of the calls at first");
    assert!(
        late > late_min,
        "{lb}: {late:.3} of the calls after the window"
    );
    client.shutdown(SEC).await;
}

#[tokio::test]
async fn a_newcomer_ramps_up_under_round_robin() {
    // Round robin alone gives it a third at once.
    ramps_under("RoundRobinLoadBalance", 0.12, 0.28).await;
}

#[tokio::test]
async fn a_newcomer_ramps_up_under_least_active() {
    // Least-active picks the idle newcomer first nearly every time, so it keeps about
    // `factor` of all the calls (0.1 to 0.3 here) rather than `factor` of a third.
    ramps_under("LeastActiveLoadBalance", 0.20, 0.28).await;
}

/// Without slow start the same newcomer draws its third from the start: the bound the
/// ramp tests hold is one the balancer alone does not meet.
#[tokio::test]
async fn without_slow_start_a_newcomer_takes_its_share_at_once() {
    let servers = echo_servers(["a", "b", "c"]).await;
    for lb in ["RoundRobinLoadBalance", "LeastActiveLoadBalance"] {
        let (client, _hub, _) = joined(lb, options_from(""), &servers, WINDOW).await;
        let early = share_of_third(&client, &servers, Duration::from_millis(300)).await;
        println!(
            "{lb} without slow start: the newcomer's share {:.1} % in its first 0.3 s",
            early * 100.0
        );
        assert!(early > 0.28, "{lb}: {early:.3}");
        client.shutdown(SEC).await;
    }
}

/// A client that is starting has no warm endpoint to shift load to: its first
/// connections, and one joining before the set has been up for a window, take their
/// share at once.
#[tokio::test]
async fn a_starting_clients_servers_take_their_share_at_once() {
    let servers = echo_servers(["a", "b", "c"]).await;
    let o = options_from("transport.slowStartWindow=60s\n");
    let (client, _hub, _) = joined("RoundRobinLoadBalance", o, &servers, Duration::ZERO).await;
    let share = share_of_third(&client, &servers, Duration::from_millis(300)).await;
    assert!(share > 0.28, "{share:.3}");
    client.shutdown(SEC).await;
}

#[tokio::test]
async fn calls_naming_an_xid_reach_the_newcomer_during_its_ramp() {
    let servers = echo_servers(["a", "b", "c"]).await;
    let (client, _hub, _) = joined("XID", options_from(WINDOW_KEYS), &servers, WINDOW).await;
    let c = &servers[2];
    let xid = format!("127.0.0.1:{}:2612341069705662465", c.addr().port());
    let before = c.requests.load(Ordering::SeqCst);
    for _ in 0..200 {
        let r = client
            .call(Payload::new(&b"x"[..]), CallOptions::xid(&xid))
            .await
            .expect("answered");
        assert_eq!(r.endpoint.port(), c.addr().port());
    }
    assert_eq!(c.requests.load(Ordering::SeqCst) - before, 200);
    client.shutdown(SEC).await;
}
