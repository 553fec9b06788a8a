//! RpcClient's connection lifecycle against in-process servers: shutdown waits for
//! what is in flight, a removed endpoint drains, heartbeats keep idle connections and
//! drop silent peers.

use crate::common;

use std::time::Duration;

use common::*;
use meshline_rpc_client::{CallOptions, EndpointState, Payload, RpcError};

const SEC: Duration = Duration::from_secs(1);

#[tokio::test]
async fn shutdown_waits_for_in_flight_then_refuses_calls() {
    let s = start("s", Mode::Echo).await;
    let hub = hub_of(&[&s]);
    let client = build_alive(builder(&hub, "RandomLoadBalance"), 1, SEC).await;
    let slow = spawn_held_call(&client, "300", CallOptions::new());
    // The call is in the server's handler: in flight for ~300 ms more.
    until(SEC, || {
        s.requests.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await
    .expect("the slow call did not reach the server");
    client.shutdown(Duration::from_secs(10)).await;
    // Had shutdown not waited, closing the connection under the call would have failed
    // it with "may have been delivered".
    assert!(slow.await.unwrap().is_ok(), "in-flight call finished");
    let err = client
        .call(Payload::new(&b"x"[..]), CallOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Shutdown), "{err}");
    until(SEC, || s.server.connections().is_empty())
        .await
        .expect("connections not closed after shutdown");
}

#[tokio::test]
async fn removed_endpoint_drains_in_flight_then_closes() {
    let [a, b] = echo_servers(["a", "b"]).await;
    let hub = hub_of(&[&a, &b]);
    let client = build_alive(builder(&hub, "XID"), 2, SEC).await;
    let xid = format!("127.0.0.1:{}:9", b.addr().port());
    let c2 = client.clone();
    let slow = tokio::spawn(async move {
        c2.call(
            Payload::new(&b"x"[..]).with_head("delay_ms", "300"),
            CallOptions::xid(&xid),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    publish(&hub, &[&a]);
    until(SEC, || alive_ports(&client) == vec![a.addr().port()])
        .await
        .expect("removed endpoint still alive");
    let r = slow
        .await
        .unwrap()
        .expect("in-flight call on the removed endpoint finished");
    assert_eq!(r.endpoint.port(), b.addr().port());
    until(SEC, || b.server.connections().is_empty())
        .await
        .expect("drained connection not closed");
}

#[tokio::test]
async fn heartbeats_keep_idle_connections_and_silent_peers_are_dropped() {
    let s = start("s", Mode::Echo).await;
    // A peer that answers the first PING (a new connection joins the alive set only
    // once it has answered something), then reads everything and never writes again.
    let mute = mute_peer().await;
    let hub = hub_with(vec![s.instance(), instance(mute)]);
    // PING every 100 ms of write silence, drop after 1 s of read silence: a PONG has
    // ten PING periods to arrive, which a loaded 2-core machine keeps. (The busy rule,
    // which would find the mute peer sooner through its unanswered PINGs, is off: this
    // test is about the idle rule; tests/suite/silent_peers.rs has the other.)
    let idle_rule = builder(&hub, "RandomLoadBalance").configure(|o| {
        o.write_idle = Duration::from_millis(100);
        o.read_idle = Duration::from_secs(1);
        o.probe = None;
        no_reconnect(o);
    });
    let client = build_alive(idle_rule, 2, SEC).await;
    let first = client
        .alive()
        .get(s.instance().key())
        .unwrap()
        .connection
        .clone();
    // The mute peer is dropped for read idle (not before its second).
    let t0 = tokio::time::Instant::now();
    until(Duration::from_secs(10), || {
        alive_ports(&client) == vec![s.addr().port()]
    })
    .await
    .expect("the mute peer was never dropped");
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t0.elapsed()
    );
    match state_of(&client, mute.port()) {
        EndpointState::Down(reason) => assert!(reason.contains("read idle"), "{reason}"),
        other => panic!("mute peer should be down, is {other:?}"),
    }
    // Two more read-idle periods: the echo server answered PINGs, so its connection is
    // the same one and still alive.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!first.is_closed(), "{:?}", first.close_reason());
    assert_eq!(alive_ports(&client), vec![s.addr().port()]);
}
