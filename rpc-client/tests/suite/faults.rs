//! The client under the faults a gateway meets: a peer that stops reading, full queues,
//! servers that accept and drop, slow handshakes, shutdown during a drain, and the
//! routing facts and one-way sends a gateway needs.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use meshline_loadbalance::PickRequest;
use meshline_registry_core::{Config, Instance};
use meshline_rpc_client::message::register_reply;
use meshline_rpc_client::{
    CallOptions, ClientOptions, EndpointState, InboundRequest, Payload, RpcClient, RpcError,
    Server, TransportOptions,
};
use tokio::net::TcpListener;

const SEC: Duration = Duration::from_secs(1);

/// Fault 2 at the client: the endpoint whose peer stopped reading leaves the alive set
/// (kept, every call routed there would time out).
#[tokio::test]
async fn an_endpoint_that_stops_reading_leaves_the_alive_set() {
    let (deaf, _t) = deaf_listener().await;
    let hub = hub_with(vec![instance(deaf)]);
    let write_deadline = builder(&hub, "RandomLoadBalance").configure(|o| {
        o.transport.write_timeout = Some(Duration::from_millis(300));
        no_reconnect(o);
    });
    let client = build_alive(write_deadline, 1, SEC).await;
    let big = Payload::new(Bytes::from(vec![1u8; 1 << 20]));
    let mut outcomes = Vec::new();
    for _ in 0..64 {
        let r = client
            .send_oneway(big.clone(), CallOptions::new().with_timeout(SEC * 5))
            .await;
        let done = r.is_err();
        outcomes.push(r);
        if done {
            break;
        }
    }
    until(SEC * 3, || client.alive().is_empty())
        .await
        .expect("the stalled endpoint is still alive");
    let st = &client.endpoints()[0];
    match &st.state {
        EndpointState::Down(reason) => assert!(reason.contains("write stalled"), "{reason}"),
        other => panic!("expected Down(write stalled), got {other:?}"),
    }
    let e = outcomes.pop().unwrap().unwrap_err();
    assert!(
        matches!(e, RpcError::MaybeDelivered { .. }),
        "the frame in the stalled write may have been delivered: {e:?}"
    );
}

/// Fault 4 at the client: a full queue is skipped for another endpoint, and with no
/// other endpoint it is `Overloaded` (never `Timeout`), at once for `try_call`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_goes_elsewhere_or_is_overloaded() {
    let (deaf, _t) = deaf_listener().await;
    let good = start("good", Mode::Echo).await;
    let hub = hub_with(vec![instance(deaf), good.instance()]);
    let small_queues = builder(&hub, "RoundRobinLoadBalance").configure(|o| {
        o.transport.write_timeout = None;
        o.transport.max_frame_len = 64 << 20;
        o.transport.request_queue_bytes = 1 << 20;
    });
    let client = build_alive(small_queues, 2, SEC).await;
    // Fill the deaf endpoint's queue: a 48 MiB send holds the whole 1 MiB budget while
    // it is (never) written.
    let c2 = client.clone();
    let deaf_key = instance(deaf).key().clone();
    let k2 = deaf_key.clone();
    let _stuck = tokio::spawn(async move {
        c2.send_oneway_to(&k2, Payload::new(Bytes::from(vec![0u8; 48 << 20])), None)
            .await
    });
    let conn = client.alive().get(&deaf_key).unwrap().connection.clone();
    until(SEC * 5, || conn.queued_bytes() == 1 << 20)
        .await
        .expect("the deaf endpoint's queue never filled");
    // Round robin alternates; every call lands on the good server anyway.
    for _ in 0..10 {
        let r = call_within(&client, SEC)
            .await
            .expect("a full queue must not fail the call when another endpoint has room");
        assert_eq!(r.payload.head.get("server"), Some("good"));
    }
    assert!(client.stats().overloaded >= 4, "{:?}", client.stats());
    // Only the full endpoint left.
    hub.publish("c", vec![instance(deaf)]);
    until(SEC, || client.alive().len() == 1).await.unwrap();
    let t0 = tokio::time::Instant::now();
    let e = client
        .try_call(Payload::new(&b"x"[..]), CallOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(e, RpcError::Overloaded { .. }), "{e:?}");
    assert!(t0.elapsed() < Duration::from_millis(200));
    let e = call_within(&client, Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            RpcError::Overloaded {
                waited: Some(_),
                ..
            }
        ),
        "a call that never got into the queue is overloaded, not timed out: {e:?}"
    );
    assert!(e.is_not_delivered());
    assert_eq!(client.stats().timeouts, 0);
}

/// The backoff starts again only after a connection stayed up: a server that accepts
/// and drops at once is retried with growing delays, not every 50-100 ms forever.
#[tokio::test]
async fn a_server_that_accepts_and_drops_is_retried_with_growing_delays() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let acc = accepted.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            acc.fetch_add(1, Ordering::SeqCst);
            drop(sock);
        }
    });
    let hub = hub_with(vec![instance(addr)]);
    let client = builder(&hub, "RandomLoadBalance").build().await.unwrap();
    // 50 ms doubling to 400 ms, jittered to [d/2, d]: with every delay at its shortest
    // the connects come at 0, 25, 75, 175, 375, then every 200 ms: at most 13 in 2 s
    // (about 9 on average). With the reset after every connect (delays of 25-50 ms
    // forever) it was 49-52. None of them counts as connected: nothing answered.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let n = accepted.load(Ordering::SeqCst);
    assert!((3..=13).contains(&n), "{n} connects in 2 s");
    let stats = client.stats();
    assert_eq!(stats.connects, 0);
    assert!(
        (n as u64).abs_diff(stats.connect_failures) <= 1,
        "{n} accepted, {} connect failures",
        stats.connect_failures
    );
}

/// A handshake's own longer timeout (Seata RegisterTM: 30 s) is not capped by the
/// client's `handshake_timeout` (10 s).
#[tokio::test]
async fn a_handshake_gets_its_own_longer_timeout() {
    let handler = |req: InboundRequest| async move {
        let msg = req.payload.decode_seata().ok()?;
        let reply = register_reply(&msg, true, "slow-tc")?;
        tokio::time::sleep(Duration::from_millis(600)).await;
        Some(Payload::seata(&reply).unwrap())
    };
    let server = Server::bind("127.0.0.1:0".parse().unwrap(), handler)
        .await
        .unwrap();
    let hub = hub_with(vec![instance(server.local_addr())]);
    let client = builder(&hub, "RandomLoadBalance")
        .handshake(seata_tm().with_timeout(Duration::from_secs(3)))
        .configure(|o| o.handshake_timeout = Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    client
        .wait_alive(1, SEC * 3)
        .await
        .expect("the 3 s registration timeout must win over the 200 ms client setting");
    assert_eq!(client.stats().handshake_failures, 0);
}

/// When `shutdown` returns, the drains of removed endpoints have ended too.
#[tokio::test]
async fn shutdown_ends_drains_of_removed_endpoints() {
    let s = start("s", Mode::Echo).await;
    let hub = hub_of(&[&s]);
    let long_drains =
        builder(&hub, "RandomLoadBalance").configure(|o| o.drain_timeout = Duration::from_secs(30));
    let client = build_alive(long_drains, 1, SEC).await;
    let slow = spawn_held_call(&client, "10000", CallOptions::new());
    until(SEC, || s.requests.load(Ordering::SeqCst) == 1)
        .await
        .unwrap();
    hub.publish("c", vec![]);
    until(SEC, || client.endpoints().is_empty()).await.unwrap();
    assert_eq!(s.server.connection_count(), 1, "draining: still connected");
    let t0 = tokio::time::Instant::now();
    client.shutdown(Duration::from_millis(100)).await;
    assert!(t0.elapsed() < Duration::from_secs(5));
    // When shutdown returns, the draining connection is closed.
    until(SEC, || s.server.connection_count() == 0)
        .await
        .expect("the drain outlived shutdown");
    assert!(slow.await.unwrap().is_err());
}

/// A shutdown deadline of `Duration::MAX` waits without overflowing `Instant`.
#[tokio::test]
async fn shutdown_with_no_deadline_does_not_panic() {
    let s = start("s", Mode::Echo).await;
    let hub = hub_of(&[&s]);
    let client = build_alive(builder(&hub, "RandomLoadBalance"), 1, SEC).await;
    client.shutdown(Duration::MAX).await;
    let e = call_within(&client, Duration::MAX).await.unwrap_err();
    assert!(matches!(e, RpcError::Shutdown), "{e}");
}

/// `.config()` keeps the options set earlier on the builder (it does not reset them).
#[tokio::test]
async fn config_keeps_options_set_before_it() {
    let mut cfg = Config::default();
    cfg.set("transport.writeTimeout", "2s").unwrap();
    cfg.set("transport.maxInboundRequests", "7").unwrap();
    let b = RpcClient::builder()
        .configure(|o| {
            o.max_attempts = 9;
            o.subset_size = Some(3);
            o.drain_timeout = Duration::from_secs(1);
            o.transport.request_queue_bytes = 12345;
        })
        .config(&cfg);
    let o: &ClientOptions = b.current_options();
    assert_eq!(o.max_attempts, 9);
    assert_eq!(o.subset_size, Some(3));
    assert_eq!(o.drain_timeout, Duration::from_secs(1));
    assert_eq!(o.transport.request_queue_bytes, 12345);
    // What the config carries is applied.
    assert_eq!(o.transport.write_timeout, Some(Duration::from_secs(2)));
    assert_eq!(o.transport.max_inbound_requests, 7);
    assert_eq!(o.request_timeout, Duration::from_millis(30_000));
}

#[test]
fn transport_settings_come_from_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seata.properties");
    std::fs::write(
        &path,
        "transport.maxFrameLength=1MiB\ntransport.requestQueueBytes=256KiB\n\
         transport.responseQueueBytes=512KiB\ntransport.writeTimeout=0s\n\
         transport.maxInboundRequests=32\ntransport.compressor=LZ4\ntransport.protocol=grpc\n",
    )
    .unwrap();
    let cfg = Config::load(Some(&path)).unwrap();
    let t = TransportOptions::from_config(&cfg).unwrap();
    assert_eq!(
        t,
        TransportOptions {
            max_frame_len: 1 << 20,
            request_queue_bytes: 256 << 10,
            response_queue_bytes: 512 << 10,
            write_timeout: None,
            max_inbound_requests: 32,
            compressor: meshline_rpc_client::Compressor::Lz4,
            codec: meshline_rpc_client::codec::CODEC_SEATA,
            protocol: meshline_rpc_client::Protocol::Grpc,
            batch: None,
        }
    );
    assert_eq!(ClientOptions::from_config(&cfg).unwrap().transport, t);
    assert_eq!(
        meshline_rpc_client::ServerConfig::from_config(&cfg)
            .unwrap()
            .transport,
        t
    );
}

/// `CallOptions` carries a whole `PickRequest`: the source-address balancer gets its
/// key through `RpcClient` (it could not before).
#[tokio::test]
async fn the_source_address_reaches_the_balancer() {
    let [a, b, c] = echo_servers(["a", "b", "c"]).await;
    let hub = hub_of(&[&a, &b, &c]);
    let client = build_alive(builder(&hub, "sourcehash"), 3, SEC).await;
    let mut per_source = std::collections::HashMap::new();
    let mut servers = std::collections::HashSet::new();
    for i in 0..40u8 {
        let ip = std::net::IpAddr::from([203, 0, 113, i]);
        for _ in 0..3 {
            let r = client
                .call(
                    Payload::new(&b"x"[..]),
                    CallOptions::route(PickRequest::default().with_source(ip)),
                )
                .await
                .unwrap();
            let server = r.payload.head.get("server").unwrap().to_string();
            servers.insert(server.clone());
            let first = per_source.entry(ip).or_insert(server.clone());
            assert_eq!(*first, server, "source {ip} moved between servers");
        }
    }
    assert_eq!(servers.len(), 3, "40 sources should reach all 3 servers");
    // Exclusions reach the balancer too.
    let key = a.instance().key().clone();
    let keys = [key];
    for _ in 0..20 {
        let r = client
            .call(
                Payload::new(&b"x"[..]),
                CallOptions::route(PickRequest::default().excluding(&keys)),
            )
            .await
            .unwrap();
        assert_ne!(r.payload.head.get("server"), Some("a"));
    }
}

/// One-way to one named endpoint and one-way to every endpoint.
#[tokio::test]
async fn oneway_to_one_and_to_all() {
    let [a, b] = echo_servers(["a", "b"]).await;
    let hub = hub_of(&[&a, &b]);
    let client = build_alive(builder(&hub, "RandomLoadBalance"), 2, SEC).await;
    let to = client
        .send_oneway_to(b.instance().key(), Payload::new(&b"only-b"[..]), None)
        .await
        .unwrap();
    assert_eq!(to.port(), b.addr().port());
    until(SEC, || b.requests.load(Ordering::SeqCst) == 1)
        .await
        .unwrap();
    assert_eq!(a.requests.load(Ordering::SeqCst), 0);
    let all = client
        .send_oneway_to_all(Payload::new(&b"everyone"[..]), None)
        .await;
    assert_eq!(all.len(), 2);
    assert!(all.iter().all(|(_, r)| r.is_ok()), "{all:?}");
    until(SEC, || {
        a.requests.load(Ordering::SeqCst) == 1 && b.requests.load(Ordering::SeqCst) == 2
    })
    .await
    .expect("each endpoint got the broadcast once");
    let missing = Instance::new("127.0.0.1", 1).unwrap();
    let e = client
        .send_oneway_to(missing.key(), Payload::new(&b"x"[..]), None)
        .await
        .unwrap_err();
    assert!(matches!(e, RpcError::NoEndpoint { .. }), "{e}");
}

/// `wait_alive` says why nothing is alive without a log subscriber.
#[tokio::test]
async fn wait_alive_names_each_endpoints_reason() {
    let refuse = start("r", Mode::Refuse).await;
    let hub = hub_with(vec![
        refuse.instance(),
        Instance::new("127.0.0.1", 1).unwrap(),
    ]);
    let client = builder(&hub, "RandomLoadBalance")
        .handshake(seata_tm())
        .build()
        .await
        .unwrap();
    let e = client
        .wait_alive(1, Duration::from_millis(800))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("identified=0"), "{e}");
    assert!(e.contains("127.0.0.1:1 down: connect failed"), "{e}");
    assert!(e.contains("waited 800ms for 1 alive, have 0"), "{e}");
}

/// The heartbeat, probe and ejection settings come from `transport.*` keys (meshline's
/// own: a unit is required), with the defaults that find a silent TC in well under a
/// second.
#[test]
fn liveness_settings_come_from_the_config_file() {
    let d = ClientOptions::default();
    assert_eq!(d.write_idle, Duration::from_secs(1));
    assert_eq!(d.read_idle, Duration::from_secs(3));
    assert_eq!(d.probe, Some(meshline_rpc_client::Probe::default()));
    assert_eq!(d.eject_after_failures, 5);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seata.properties");
    std::fs::write(
        &path,
        "transport.heartbeatInterval=2s\ntransport.heartbeatTimeout=6s\n\
         transport.probeTimeout=900ms\ntransport.ejectAfterFailures=0\n\
         transport.ejectionTime=5s\n",
    )
    .unwrap();
    let o = ClientOptions::from_config(&Config::load(Some(&path)).unwrap()).unwrap();
    assert_eq!(o.write_idle, Duration::from_secs(2));
    assert_eq!(o.read_idle, Duration::from_secs(6));
    assert_eq!(
        o.probe,
        Some(meshline_rpc_client::Probe {
            after: Duration::from_millis(250),
            timeout: Duration::from_millis(900)
        })
    );
    assert_eq!(o.eject_after_failures, 0);
    assert_eq!(o.ejection_time, Duration::from_secs(5));
    std::fs::write(&path, "transport.probeAfter=0s\n").unwrap();
    assert_eq!(
        ClientOptions::from_config(&Config::load(Some(&path)).unwrap())
            .unwrap()
            .probe,
        None
    );
    std::fs::write(&path, "transport.heartbeatTimeout=3000\n").unwrap();
    let err = ClientOptions::from_config(&Config::load(Some(&path)).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("transport.heartbeatTimeout") && err.contains("unit"),
        "{err}"
    );
}

/// The transport keys are the rpc-client's: an invalid one reaches the client builder
/// (the loader keeps it raw) and `build` refuses it, naming the key; the TM builder
/// does the same for `client.tm.*`.
#[tokio::test]
async fn an_invalid_transport_key_fails_build_naming_the_key() {
    let hub = hub();
    let client = RpcClient::builder()
        .watch(hub.subscribe("c"), "c")
        .config(&properties("transport.compressor=7z\n"))
        .build()
        .await;
    let tm = meshline_rpc_client::tm::TransactionManager::builder()
        .config(&properties(
            "client.tm.defaultGlobalTransactionTimeout=soon\n",
        ))
        .build()
        .await;
    for (refused, want) in [
        (
            client.err(),
            "key `transport.compressor` has invalid value `7z`: 7z is not supported",
        ),
        (
            tm.err(),
            "key `client.tm.defaultGlobalTransactionTimeout` has invalid value `soon`",
        ),
    ] {
        let err = refused.expect("refused").to_string();
        assert!(err.contains(want), "{err}");
    }
}
