//! Peers that stop answering without closing: the probe finds a silent one under load
//! (calls in flight fail at once as "may have been delivered", the endpoint leaves the
//! alive set), does not mistake a slow one for it, and failure accrual takes an endpoint
//! whose calls keep timing out out of the picks until a PING brings it back.

use crate::common;

use std::time::{Duration, Instant};

use common::{
    Mode, alive_ports, build_alive, builder, echo_servers, endpoint_on, hub_of, hub_with, instance,
    mute_peer, no_reconnect, start, state_of, until,
};
use meshline_rpc_client::{EndpointState, Payload, Probe, RpcError};

const PROBE: Probe = Probe {
    after: Duration::from_millis(100),
    timeout: Duration::from_millis(200),
};

/// The endpoint is down: its peer was found silent.
fn assert_found_silent(state: &EndpointState) {
    assert!(
        matches!(state, EndpointState::Down(r) if r.contains("peer silent")),
        "{state:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_peer_fails_its_calls_in_flight_within_the_probe_window() {
    let live = start("live", Mode::Echo).await;
    let mute = mute_peer().await;
    let hub = hub_with(vec![live.instance(), instance(mute)]);
    let probed = builder(&hub, "RoundRobinLoadBalance").configure(|o| {
        o.probe = Some(PROBE);
        o.request_timeout = Duration::from_secs(10);
        // The heartbeat stays out of the way: 10 s.
        o.write_idle = Duration::from_secs(10);
        o.read_idle = Duration::from_secs(30);
        no_reconnect(o);
    });
    let client = build_alive(probed, 2, Duration::from_secs(2)).await;
    let started = Instant::now();
    let err = client
        .call_to(instance(mute).key(), Payload::new(&b"anyone?"[..]), None)
        .await
        .unwrap_err();
    let took = started.elapsed();
    match &err {
        RpcError::MaybeDelivered { reason, .. } => {
            assert!(
                reason
                    .message()
                    .starts_with("peer silent: no answer to requests or to a PING"),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
    // after + timeout = 300 ms; far under the 10 s call timeout.
    assert!(took >= Duration::from_millis(280), "{took:?}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    assert!(
        until(Duration::from_secs(1), || alive_ports(&client)
            == vec![live.addr().port()])
        .await
        .is_some()
    );
    assert_found_silent(&state_of(&client, mute.port()));
    // The live one was never disturbed.
    assert!(
        client
            .call(Payload::new(&b"x"[..]), Default::default())
            .await
            .is_ok()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_silent_peer_is_found_by_its_unanswered_ping() {
    let mute = mute_peer().await;
    let hub = hub_with(vec![instance(mute)]);
    let probed = builder(&hub, "RoundRobinLoadBalance").configure(|o| {
        o.probe = Some(PROBE);
        o.write_idle = Duration::from_millis(200);
        o.read_idle = Duration::from_secs(5);
        no_reconnect(o);
    });
    let client = build_alive(probed, 1, Duration::from_secs(2)).await;
    let t0 = Instant::now();
    until(Duration::from_secs(5), || client.alive().is_empty())
        .await
        .expect("still alive");
    // The heartbeat's PING at 200 ms, unanswered: + 100 ms + 200 ms. Well before the
    // 5 s read idle.
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert_found_silent(&client.endpoints()[0].state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_live_peer_is_not_taken_for_a_silent_one() {
    let slow = start("slow", Mode::Echo).await;
    let hub = hub_of(&[&slow]);
    let probed = builder(&hub, "RoundRobinLoadBalance").configure(|o| {
        o.probe = Some(PROBE);
        o.request_timeout = Duration::from_secs(10);
    });
    let client = build_alive(probed, 1, Duration::from_secs(2)).await;
    let conn = client.alive().endpoints()[0].connection.clone();
    // The handler takes 1.5 s, five times the probe window: PONGs keep coming.
    let started = Instant::now();
    let r = client
        .call(
            Payload::new(&b"x"[..]).with_head("delay_ms", "1500"),
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(r.payload.head.get("server"), Some("slow"));
    assert!(started.elapsed() >= Duration::from_millis(1500));
    assert!(!conn.is_closed(), "{:?}", conn.close_reason());
    assert!(conn.ping(Duration::from_secs(1)).await.is_ok());
}

/// What the test and the peer on its own thread tell each other.
struct PeerSignals {
    /// The peer got a PING (after the first).
    pings: tokio::sync::mpsc::UnboundedReceiver<()>,
    /// The test's runtime is stalled: the peer may answer.
    stalled: std::sync::mpsc::Sender<()>,
    /// The peer wrote its answers.
    answered: std::sync::mpsc::Receiver<()>,
}

/// A peer on a thread and runtime of its own, so that it keeps answering while the
/// client's runtime is blocked: it answers the first PING at once and holds each
/// request; on every later PING it tells the test, waits until the test says its
/// runtime is stalled, then answers the PING and the requests it holds, and says so.
fn peer_on_its_own_thread() -> (std::net::SocketAddr, PeerSignals) {
    use futures_util::{SinkExt, StreamExt};
    use meshline_rpc_client::{Frame, FrameCodec, HeadMap, MessageType};
    let (pinged, pings) = tokio::sync::mpsc::unbounded_channel();
    let (stalled, stall) = std::sync::mpsc::channel();
    let (answer, answered) = std::sync::mpsc::channel();
    let (bound, addr) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            bound.send(listener.local_addr().unwrap()).unwrap();
            let (sock, _) = listener.accept().await.unwrap();
            let Some(sock) = common::answer_first_ping(sock).await else {
                return;
            };
            let mut framed = tokio_util::codec::Framed::new(sock, FrameCodec::default());
            let mut held = Vec::new();
            while let Some(Ok(f)) = framed.next().await {
                match f.msg_type {
                    MessageType::Request => held.push(f),
                    MessageType::HeartbeatRequest => {
                        // The test ended (its receiver gone): nothing more to answer.
                        if pinged.send(()).is_err() || stall.recv().is_err() {
                            return;
                        }
                        let mut answers = vec![Frame::pong_for(&f)];
                        answers.extend(held.drain(..).map(|r| Frame {
                            msg_type: MessageType::Response,
                            head: HeadMap::new(),
                            ..r
                        }));
                        for a in answers {
                            // A write the client refused ends the peer; the test then
                            // fails on the closed connection it asserts against.
                            if let Err(e) = framed.send(a).await {
                                tracing::warn!(error = %e, "the peer could not answer");
                                return;
                            }
                        }
                        if answer.send(()).is_err() {
                            return;
                        }
                    }
                    _ => {}
                }
            }
        });
    });
    let signals = PeerSignals {
        pings,
        stalled,
        answered,
    };
    (addr.recv().unwrap(), signals)
}

/// The client's own runtime stalls (a blocking call on its only thread) after a probe
/// PING went out, and the peer answers meanwhile: when the runtime runs again, the
/// answer waiting in the socket is read before the probe's deadline is judged, so the
/// connection is kept. A stall of ours is not a silence of the peer's.
#[tokio::test]
async fn a_stall_of_the_clients_own_runtime_is_not_taken_for_a_silent_peer() {
    let (addr, mut peer) = peer_on_its_own_thread();
    let hub = hub_with(vec![instance(addr)]);
    let probed = builder(&hub, "RoundRobinLoadBalance").configure(|o| {
        o.probe = Some(PROBE);
        o.request_timeout = Duration::from_secs(10);
        // The heartbeat stays out of the way: every PING is the probe's.
        o.write_idle = Duration::from_secs(30);
        o.read_idle = Duration::from_secs(60);
    });
    let client = build_alive(probed, 1, Duration::from_secs(2)).await;
    let conn = client.alive().endpoints()[0].connection.clone();
    // Each round the reader wakes to both a readable socket and a passed deadline;
    // when it judged them in random order, each round closed the connection half of
    // the time.
    for round in 0..8 {
        let call = {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .call(Payload::new(&b"x"[..]), Default::default())
                    .await
            })
        };
        // The request went out and drew the probe's PING (100 ms without a byte).
        tokio::time::timeout(Duration::from_secs(5), peer.pings.recv())
            .await
            .expect("no probe PING")
            .expect("the peer ended");
        let pinged = Instant::now();
        // From here this runtime is stalled: the calls below block its only thread.
        peer.stalled.send(()).expect("the peer ended");
        peer.answered
            .recv_timeout(Duration::from_secs(5))
            .expect("the peer did not answer");
        // The stall goes on past the probe's timeout (200 ms after the PING went out,
        // which was before `pinged`): the reader then wakes to the answers and a passed
        // deadline at once.
        std::thread::sleep(
            (pinged + PROBE.timeout + Duration::from_millis(100))
                .saturating_duration_since(Instant::now()),
        );
        let answer = call.await.unwrap();
        assert!(
            answer.is_ok(),
            "round {round}: {answer:?}, connection {:?}",
            conn.close_reason()
        );
        assert!(
            !conn.is_closed(),
            "round {round}: {:?}",
            conn.close_reason()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_keep_timing_out_eject_the_endpoint_until_a_ping_brings_it_back() {
    let [a, b] = echo_servers(["a", "b"]).await;
    // Registers and answers PINGs, never answers a request: an application stall.
    let stuck = start("stuck", Mode::Silent).await;
    let hub = hub_of(&[&a, &b, &stuck]);
    let ejecting = builder(&hub, "RoundRobinLoadBalance").configure(|o| {
        o.request_timeout = Duration::from_millis(150);
        o.eject_after_failures = 3;
        o.ejection_time = Duration::from_millis(400);
    });
    let client = build_alive(ejecting, 3, Duration::from_secs(2)).await;
    let all = {
        let mut v = vec![a.addr().port(), b.addr().port(), stuck.addr().port()];
        v.sort_unstable();
        v
    };
    let two = {
        let mut v = vec![a.addr().port(), b.addr().port()];
        v.sort_unstable();
        v
    };
    // Round robin reaches the stuck one every third call: after its third timeout it is
    // out of the picks.
    let mut timeouts = 0;
    while alive_ports(&client) == all {
        match client
            .call(Payload::new(&b"x"[..]), Default::default())
            .await
        {
            Ok(_) => {}
            Err(RpcError::Timeout { endpoint, .. }) => {
                assert_eq!(
                    endpoint.as_deref(),
                    Some(stuck.instance().to_string().as_str())
                );
                timeouts += 1;
                assert!(timeouts <= 3, "not ejected after {timeouts} timeouts");
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(timeouts, 3);
    assert_eq!(alive_ports(&client), two);
    assert_eq!(client.stats().ejections, 1);
    let st = endpoint_on(&client, stuck.addr().port());
    assert!(
        matches!(&st.state, EndpointState::Ejected(r) if r.contains("3 failed calls in a row") && r.contains("400ms")),
        "{:?}",
        st.state
    );
    // Meanwhile every call succeeds.
    for _ in 0..20 {
        client
            .call(Payload::new(&b"x"[..]), Default::default())
            .await
            .unwrap();
    }
    // After its ejection it answers a PING (its reader is fine): back in the picks.
    let back = until(Duration::from_secs(2), || alive_ports(&client) == all)
        .await
        .expect("never returned");
    assert!(back >= Duration::from_millis(100), "{back:?}");
    // Its first call fails again: ejected at once, for twice as long.
    loop {
        if let Err(RpcError::Timeout { .. }) = client
            .call(Payload::new(&b"x"[..]), Default::default())
            .await
        {
            break;
        }
    }
    assert!(
        until(Duration::from_secs(1), || alive_ports(&client) == two)
            .await
            .is_some()
    );
    assert_eq!(client.stats().ejections, 2);
    let st = endpoint_on(&client, stuck.addr().port());
    assert!(
        matches!(&st.state, EndpointState::Ejected(r) if r.contains("800ms")),
        "{:?}",
        st.state
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_than_half_the_endpoints_are_ejected() {
    let s1 = start("s1", Mode::Silent).await;
    let s2 = start("s2", Mode::Silent).await;
    let hub = hub_of(&[&s1, &s2]);
    let ejecting = builder(&hub, "RoundRobinLoadBalance").configure(|o| {
        o.request_timeout = Duration::from_millis(50);
        o.eject_after_failures = 2;
        o.ejection_time = Duration::from_secs(30);
    });
    let client = build_alive(ejecting, 2, Duration::from_secs(2)).await;
    for _ in 0..10 {
        let e = client
            .call(Payload::new(&b"x"[..]), Default::default())
            .await
            .unwrap_err();
        assert!(matches!(e, RpcError::Timeout { .. }), "{e}");
    }
    // Both fail every call; one is ejected, the other stays: errors stay timeouts (with
    // an endpoint named), not "no endpoint".
    assert_eq!(client.alive().len(), 1);
    assert_eq!(client.stats().ejections, 1);
}
