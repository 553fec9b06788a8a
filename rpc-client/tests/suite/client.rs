//! RpcClient against in-process servers: membership, failures, routing, inbound
//! requests (shutdown, drains and heartbeats are in `client_lifecycle.rs`).

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use meshline_rpc_client::{
    CallOptions, EndpointState, InboundRequest, Payload, RpcClient, RpcError,
};

const SEC: Duration = Duration::from_secs(1);

#[tokio::test]
async fn new_endpoint_is_connected_and_picked_within_one_second() {
    let a = start("a", Mode::Echo).await;
    let hub = hub_of(&[&a]);
    let client = build_alive(
        builder(&hub, "RoundRobinLoadBalance").handshake(seata_tm()),
        1,
        SEC,
    )
    .await;

    let b = start("b", Mode::Echo).await;
    let t0 = tokio::time::Instant::now();
    publish(&hub, &[&a, &b]);
    // Connected (and handshaken) ...
    until(SEC, || alive_ports(&client).contains(&b.addr().port()))
        .await
        .expect("new endpoint not alive within 1 s");
    // ... and picked.
    let mut picked_b = false;
    while !picked_b && t0.elapsed() < SEC {
        let r = client
            .call(Payload::new(&b"x"[..]), CallOptions::new())
            .await
            .unwrap();
        picked_b = r.endpoint.port() == b.addr().port();
    }
    assert!(picked_b, "new endpoint not picked within 1 s");
    assert!(b.requests.load(Ordering::SeqCst) > 0);
}

/// Makes `n` calls; the endpoint on `port` must answer every one.
async fn all_answered_on(client: &RpcClient, n: usize, port: u16) {
    for _ in 0..n {
        let r = client
            .call(Payload::new(&b"x"[..]), CallOptions::new())
            .await
            .unwrap();
        assert_eq!(r.endpoint.port(), port);
    }
}

#[tokio::test]
async fn killed_endpoint_leaves_alive_set_within_one_second_and_calls_move() {
    let [a, b] = echo_servers(["a", "b"]).await;
    let hub = hub_of(&[&a, &b]);
    let client = build_alive(builder(&hub, "RandomLoadBalance"), 2, SEC).await;

    b.server.kill();
    let took = until(SEC, || !alive_ports(&client).contains(&b.addr().port()))
        .await
        .expect("killed endpoint still alive after 1 s");
    assert!(took < SEC);
    // Everything now goes to a (the registry still lists b: it is reconnecting).
    all_answered_on(&client, 50, a.addr().port()).await;
    let st = endpoint_on(&client, b.addr().port());
    assert!(
        matches!(st.state, EndpointState::Down(_) | EndpointState::Connecting),
        "{st:?}"
    );
}

/// A server that accepts and never reads: the client's writes fill the socket buffers,
/// its writer blocks, and later requests stay queued (not written).
async fn stuck_server() -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (kill_tx, kill_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (sock, _) = listener.accept().await.unwrap();
        let _ = kill_rx.await;
        // Unread data + close = RST, like a crashed process.
        drop(sock);
        drop(listener);
    });
    (addr, kill_tx)
}

#[tokio::test]
async fn unwritten_calls_are_retried_and_written_ones_say_maybe_delivered() {
    let live = start("live", Mode::Echo).await;
    let (stuck_addr, kill) = stuck_server().await;
    let hub = hub_with(vec![live.instance(), instance(stuck_addr)]);
    let big_queue = builder(&hub, "XID").configure(|o| {
        o.heartbeat = false;
        o.transport.request_queue_bytes = 64 << 20;
        o.request_timeout = Duration::from_secs(20);
    });
    let client = build_alive(big_queue, 2, SEC).await;

    // 400 calls of 64 KiB routed by XID to the stuck server: ~25 MiB, far more than
    // loopback socket buffers hold.
    let xid = format!("127.0.0.1:{}:1", stuck_addr.port());
    let body = Bytes::from(vec![0u8; 64 * 1024]);
    let mut calls = Vec::new();
    for _ in 0..400 {
        let client = client.clone();
        let xid = xid.clone();
        let body = body.clone();
        calls.push(tokio::spawn(async move {
            client
                .call(Payload::new(body), CallOptions::xid(&xid))
                .await
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    kill.send(()).unwrap();

    let (mut ok, mut maybe) = (0, 0);
    for c in calls {
        match c.await.unwrap() {
            Ok(r) => {
                assert_eq!(r.endpoint.port(), live.addr().port());
                ok += 1;
            }
            Err(e @ RpcError::MaybeDelivered { .. }) => {
                assert!(e.to_string().contains("may have been delivered"), "{e}");
                maybe += 1;
            }
            Err(e) => panic!("an unwritten call failed: {e}"),
        }
    }
    assert!(maybe > 0, "some calls were written to the stuck server");
    assert!(ok > 0, "queued calls were retried on the live server");
    assert_eq!(ok + maybe, 400);
    assert_eq!(live.requests.load(Ordering::SeqCst), ok);
}

#[tokio::test]
async fn restarted_server_is_reconnected_with_backoff() {
    let a = start("a", Mode::Echo).await;
    let addr = a.addr();
    let hub = hub_of(&[&a]);
    let client = build_alive(
        builder(&hub, "RandomLoadBalance").handshake(seata_tm()),
        1,
        SEC,
    )
    .await;
    a.server.kill();
    until(SEC, || client.alive().is_empty())
        .await
        .expect("dead server still alive");
    // Down for a while: the client keeps retrying with growing delays.
    let failures_before = client.stats().connect_failures;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let failures = client.stats().connect_failures - failures_before;
    // Delays of 25-50, 50-100, 100-200, 200-400 ms (50 ms doubling to 400 ms, jittered
    // to [d/2, d]): 600 ms hold 2 to 5 attempts. Without backoff (a fixed 50 ms) there
    // would be 12 or more; without retries, none.
    assert!(
        (2..=5).contains(&failures),
        "{failures} failed connects in 600 ms"
    );
    let a2 = start_on(addr, "a2", Mode::Echo).await;
    until(Duration::from_secs(2), || !client.alive().is_empty())
        .await
        .expect("not reconnected after restart");
    let r = client
        .call(Payload::new(&b"x"[..]), CallOptions::new())
        .await
        .unwrap();
    assert_eq!(r.payload.head.get("server"), Some("a2"));
    let st = &client.endpoints()[0];
    assert_eq!(st.connects, 2);
    assert_eq!(st.state, EndpointState::Alive);
    drop(a2);
}

/// Waits up to a second for the client to refuse its endpoint on `port`; the reason it
/// gives.
async fn refusal_of(client: &RpcClient, port: u16) -> String {
    let refused = until(SEC, || {
        client
            .endpoints()
            .iter()
            .any(|e| e.instance.port() == port && matches!(e.state, EndpointState::Refused(_)))
    })
    .await;
    assert!(refused.is_some(), "{:?}", client.endpoints());
    let EndpointState::Refused(reason) = state_of(client, port) else {
        unreachable!()
    };
    reason
}

#[tokio::test]
async fn handshake_refusal_means_never_picked() {
    let good = start("good", Mode::Echo).await;
    let bad = start("bad", Mode::Refuse).await;
    let hub = hub_of(&[&good, &bad]);
    let client = build_alive(
        builder(&hub, "RoundRobinLoadBalance").handshake(seata_tm()),
        1,
        SEC,
    )
    .await;
    let reason = refusal_of(&client, bad.addr().port()).await;
    assert!(reason.contains("identified=0"), "{reason}");
    all_answered_on(&client, 100, good.addr().port()).await;
    assert_eq!(alive_ports(&client), vec![good.addr().port()]);
    assert_eq!(bad.requests.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn inbound_request_from_server_runs_handler_and_response_reaches_server() {
    let tc = start("tc", Mode::Echo).await;
    let hub = hub_of(&[&tc]);
    let seen = Arc::new(AtomicUsize::new(0));
    let seen2 = seen.clone();
    let inbound = builder(&hub, "RandomLoadBalance").inbound(move |req: InboundRequest| {
        let seen = seen2.clone();
        async move {
            seen.fetch_add(1, Ordering::SeqCst);
            // A branch commit: answer with "committed:<xid>".
            let xid = req.payload.head.get("xid").unwrap_or("").to_string();
            Some(Payload::new(format!("committed:{xid}")))
        }
    });
    let _client = build_alive(inbound, 1, SEC).await;
    let conns = tc.server.connections();
    assert_eq!(conns.len(), 1);
    let resp = conns[0]
        .call(
            Payload::new(&b"branch-commit"[..]).with_head("xid", "127.0.0.1:8091:7"),
            SEC,
        )
        .await
        .unwrap();
    assert_eq!(&resp.body[..], b"committed:127.0.0.1:8091:7");
    // One-way pushes run the handler too.
    conns[0]
        .send_oneway(Payload::new(&b"push"[..]))
        .await
        .unwrap();
    until(SEC, || seen.load(Ordering::SeqCst) == 2)
        .await
        .expect("one-way push not handled");
}

#[tokio::test]
async fn xid_routing_hits_the_tc_named_in_the_xid() {
    let servers = echo_servers(["tc1", "tc2", "tc3"]).await;
    let hub = hub_of(&servers.each_ref());
    let client = build_alive(builder(&hub, "XID").handshake(seata_tm()), 3, SEC).await;
    for s in &servers {
        for tx in 0..20u64 {
            let xid = format!("127.0.0.1:{}:{}", s.addr().port(), 1_000_000 + tx);
            let r = client
                .call(Payload::new(&b"x"[..]), CallOptions::xid(&xid))
                .await
                .unwrap();
            assert_eq!(r.endpoint.port(), s.addr().port(), "{xid}");
            assert_eq!(r.payload.head.get("server"), Some(s.id.as_str()));
        }
    }
}

#[tokio::test]
async fn timeouts_and_cancellations_release_in_flight() {
    let s = start("silent", Mode::Silent).await;
    let hub = hub_of(&[&s]);
    // An algorithm that reads load: its balancer counts requests in flight (a
    // load-blind one counts nothing, see `LoadBalance::reads_in_flight`), and a count
    // left behind would steer its picks.
    let client = build_alive(builder(&hub, "LeastActiveLoadBalance"), 1, SEC).await;
    let in_flight = || {
        client
            .balancer()
            .endpoints()
            .iter()
            .map(|e| e.stats().in_flight())
            .sum::<u64>()
    };
    let err = call_within(&client, Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("may have been delivered"));
    assert_eq!(in_flight(), 0);

    let c2 = client.clone();
    let task =
        tokio::spawn(async move { c2.call(Payload::new(&b"x"[..]), CallOptions::new()).await });
    until(SEC, || in_flight() == 1)
        .await
        .expect("call not in flight");
    task.abort();
    let _ = task.await;
    assert_eq!(in_flight(), 0);
    // The abandoned requests' pending entries were removed as well.
    let conn = client.alive().endpoints()[0].connection.clone();
    assert_eq!(conn.pending_requests(), 0);
}

#[tokio::test]
async fn send_to_all_and_oneway() {
    let servers = echo_servers(["s1", "s2", "s3"]).await;
    let hub = hub_of(&servers.each_ref());
    let client = build_alive(builder(&hub, "RandomLoadBalance"), 3, SEC).await;
    let results = client.send_to_all(Payload::new(&b"hi"[..]), None).await;
    assert_eq!(results.len(), 3);
    let mut by_port = HashMap::new();
    for (inst, r) in results {
        let p = r.unwrap();
        by_port.insert(inst.port(), p.head.get("server").unwrap().to_string());
    }
    for s in &servers {
        assert_eq!(by_port[&s.addr().port()], s.id);
    }
    let before: usize = servers
        .iter()
        .map(|s| s.requests.load(Ordering::SeqCst))
        .sum();
    for _ in 0..30 {
        client
            .send_oneway(Payload::new(&b"event"[..]), CallOptions::new())
            .await
            .unwrap();
    }
    until(SEC, || {
        servers
            .iter()
            .map(|s| s.requests.load(Ordering::SeqCst))
            .sum::<usize>()
            == before + 30
    })
    .await
    .expect("one-way requests not all delivered");
}

#[tokio::test]
async fn no_endpoint_and_bad_config_errors_are_clear() {
    let hub = hub();
    let client = builder(&hub, "RandomLoadBalance").build().await.unwrap();
    let err = client
        .call(Payload::new(&b"x"[..]), CallOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::NoEndpoint { .. }), "{err}");
    assert!(err.to_string().contains("no connected endpoint for `c`"));
    let err = RpcClient::builder()
        .watch(hub.subscribe("c"), "c")
        .load_balance_name("NoSuchBalancer")
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("NoSuchBalancer"), "{err}");
    // Frame too long: refused before anything is sent.
    let s = start("s", Mode::Echo).await;
    publish(&hub, &[&s]);
    client.wait_alive(1, SEC).await.unwrap();
    let big = Payload::new(Bytes::from(vec![0u8; 9 * 1024 * 1024]));
    let err = client.call(big, CallOptions::new()).await.unwrap_err();
    assert!(err.to_string().contains("exceeds"), "{err}");
}

#[tokio::test]
async fn subset_connects_to_at_most_k() {
    let mut servers = Vec::new();
    for i in 0..6 {
        servers.push(start(&format!("s{i}"), Mode::Echo).await);
    }
    let hub = hub_of(&servers.iter().collect::<Vec<_>>());
    let subset = builder(&hub, "RandomLoadBalance").configure(|o| o.subset_size = Some(3));
    let client = build_alive(subset, 3, SEC).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(client.endpoints().len(), 3);
    assert_eq!(client.alive().len(), 3);
    let connected: usize = servers.iter().map(|s| s.server.connections().len()).sum();
    assert_eq!(connected, 3);
}

#[tokio::test]
async fn a_peer_speaking_another_protocol_is_dropped_with_the_fault_named() {
    // A "server" that answers with HTTP: the client must not use it, and must say why.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            use tokio::io::AsyncWriteExt;
            let _ = sock.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    });
    let good = start("good", Mode::Echo).await;
    let hub = hub_with(vec![good.instance(), instance(addr)]);
    let client = build_alive(
        builder(&hub, "RoundRobinLoadBalance").handshake(seata_tm()),
        1,
        SEC,
    )
    .await;
    let reason = refusal_of(&client, addr.port()).await;
    assert!(reason.contains("bad magic 0x4854"), "{reason}");
    assert_eq!(alive_ports(&client), vec![good.addr().port()]);
}

#[tokio::test]
async fn call_to_reaches_the_named_endpoint_only() {
    let [a, b] = echo_servers(["a", "b"]).await;
    let hub = hub_of(&[&a, &b]);
    let client = build_alive(builder(&hub, "RandomLoadBalance"), 2, SEC).await;
    for _ in 0..20 {
        let r = client
            .call_to(b.instance().key(), Payload::new(&b"x"[..]), None)
            .await
            .unwrap();
        assert_eq!(r.payload.head.get("server"), Some("b"));
    }
    assert_eq!(b.requests.load(Ordering::SeqCst), 20);
    assert_eq!(a.requests.load(Ordering::SeqCst), 0);
    // The calls are counted on the balancer's stats of that endpoint (what load-aware
    // balancers read), and nothing stays in flight.
    let stats = client.balancer().endpoint(b.instance().key()).unwrap();
    assert_eq!(stats.stats().successes(), 20);
    assert_eq!(stats.stats().in_flight(), 0);
    // A bound endpoint that dies is an error, never a silent move to another server.
    b.server.kill();
    until(SEC, || alive_ports(&client) == vec![a.addr().port()])
        .await
        .expect("killed endpoint still alive");
    let err = client
        .call_to(b.instance().key(), Payload::new(&b"x"[..]), None)
        .await
        .unwrap_err();
    assert!(matches!(err, RpcError::NoEndpoint { .. }), "{err}");
    assert_eq!(a.requests.load(Ordering::SeqCst), 0);
}
