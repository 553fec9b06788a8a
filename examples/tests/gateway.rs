//! The example gateway end to end, in-process on loopback: real TCP clients, the
//! gateway, game backends found through an in-memory registry.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use meshline_examples::client::{ClientError, GatewayClient};
use meshline_examples::game_backend::{GameBackend, modules};
use meshline_examples::gateway::admission::{Refusal, TokenMinter};
use meshline_examples::gateway::protocol::{ClientFrame, GATEWAY_MODULE, op};
use meshline_examples::gateway::settings::{GatewaySettings, ModuleKind, ModuleRoute, RouteKey};
use meshline_examples::gateway::{Gateway, command, wire};
use meshline_examples::memory_registry::MemoryRegistry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SECRET: &str = "test-secret";
const CLUSTERS: [&str; 4] = ["lobby", "chat", "room", "bind"];

fn settings() -> GatewaySettings {
    let mut s = GatewaySettings {
        id: "gw-a".into(),
        listen: "127.0.0.1:0".parse().unwrap(),
        secret: SECRET.into(),
        auth_deadline: Duration::from_millis(500),
        max_frame: 4096,
        register_cluster: Some("gateway".into()),
        ..GatewaySettings::default()
    };
    for (id, name, kind) in [
        (modules::LOBBY, "lobby", ModuleKind::Stateless),
        (modules::CHAT, "chat", ModuleKind::Stateless),
        (modules::ROOM, "room", ModuleKind::Static),
        (modules::BIND, "bind", ModuleKind::Dynamic),
    ] {
        s.modules.insert(
            id,
            ModuleRoute {
                id,
                name: name.into(),
                cluster: name.into(),
                kind,
                choice: "RoundRobinLoadBalance".into(),
                key: RouteKey::None,
            },
        );
    }
    s
}

struct World {
    _registry: Arc<MemoryRegistry>,
    backends: Vec<GameBackend>,
    gateway: Gateway,
    minter: TokenMinter,
}

async fn world(backends: usize, tweak: impl FnOnce(&mut GatewaySettings)) -> World {
    let registry = Arc::new(MemoryRegistry::default());
    let mut list = Vec::new();
    for i in 0..backends {
        list.push(
            GameBackend::start(
                &format!("be-{i}"),
                "127.0.0.1:0".parse().unwrap(),
                registry.clone(),
                &CLUSTERS,
                Duration::from_millis(50),
            )
            .await
            .unwrap(),
        );
    }
    let mut s = settings();
    tweak(&mut s);
    let gateway = Gateway::start(s, registry.clone()).await.unwrap();
    for c in CLUSTERS {
        gateway
            .backend(c)
            .unwrap()
            .wait_alive(backends, Duration::from_secs(5))
            .await
            .unwrap();
    }
    World {
        _registry: registry,
        backends: list,
        gateway,
        minter: TokenMinter::new(SECRET),
    }
}

impl World {
    async fn player(&self, account: &str) -> GatewayClient {
        GatewayClient::auth(
            self.gateway.local_addr(),
            &self.minter.mint(account, Duration::from_secs(60)),
        )
        .await
        .unwrap()
    }
}

fn refusal(e: ClientError) -> Refusal {
    match e {
        ClientError::Refused(text) => {
            let code = text.split(' ').next().unwrap().parse().unwrap();
            Refusal::from_code(code).unwrap()
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_accepts_valid_tokens_and_refuses_forged_expired_replayed_and_late() {
    let w = world(1, |_| {}).await;
    let addr = w.gateway.local_addr();
    let token = w.minter.mint("alice", Duration::from_secs(60));
    let alice = GatewayClient::auth(addr, &token).await.unwrap();
    assert_eq!(alice.welcome.gateway, "gw-a");
    let who = alice
        .request(modules::LOBBY, 1, Bytes::new())
        .await
        .unwrap();
    assert_eq!(&who[..], b"alice@be-0");
    // Replayed.
    let e = GatewayClient::auth(addr, &token).await.unwrap_err();
    assert_eq!(refusal(e), Refusal::Replayed);
    // Forged.
    let forged = TokenMinter::new("not-the-secret").mint("mallory", Duration::from_secs(60));
    let e = GatewayClient::auth(addr, &forged).await.unwrap_err();
    assert_eq!(refusal(e), Refusal::Forged);
    // Expired.
    let old = w.minter.mint_at("bob", 1_000_000);
    let e = GatewayClient::auth(addr, &old).await.unwrap_err();
    assert_eq!(refusal(e), Refusal::Expired);
    // Late: connect and say nothing past the 500 ms deadline.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    let mut buf = vec![0u8; 256];
    let t0 = tokio::time::Instant::now();
    let n = tokio::time::timeout(Duration::from_secs(5), idle.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(400));
    let f = ClientFrame::from_message(&buf[..n], 4096).unwrap();
    assert_eq!(f.opcode, op::AUTH_FAIL);
    assert!(
        String::from_utf8_lossy(&f.payload).starts_with("5 "),
        "{f:?}"
    );
    // Not AUTH first.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&ClientFrame::new(modules::LOBBY, 1, 1, Bytes::new()).to_bytes())
        .await
        .unwrap();
    let n = s.read(&mut buf).await.unwrap();
    let f = ClientFrame::from_message(&buf[..n], 4096).unwrap();
    assert!(
        String::from_utf8_lossy(&f.payload).starts_with("6 "),
        "{f:?}"
    );
    assert!(w.gateway.stats().refused.load(Ordering::Relaxed) >= 5);
}

#[tokio::test]
async fn an_oversize_frame_closes_the_connection_before_allocating() {
    let w = world(1, |_| {}).await;
    let alice = w.player("alice").await;
    // 4 GiB announced: the gateway closes on the header.
    let mut raw = TcpStream::connect(w.gateway.local_addr()).await.unwrap();
    raw.write_all(
        &ClientFrame::new(
            GATEWAY_MODULE,
            op::AUTH,
            0,
            w.minter.mint("bob", Duration::from_secs(60)),
        )
        .to_bytes(),
    )
    .await
    .unwrap();
    let mut buf = vec![0u8; 512];
    let _ = raw.read(&mut buf).await.unwrap(); // AUTH_OK
    raw.write_all(&[0xff, 0xff, 0xff, 0xff]).await.unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            match raw.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(matches!(closed, Ok(true)), "oversize frame must close");
    // Others are unaffected.
    assert!(alice.request(modules::LOBBY, 1, Bytes::new()).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_binding_sticks_per_session_and_spreads_sessions() {
    let w = world(3, |_| {}).await;
    let mut homes = std::collections::HashSet::new();
    for i in 0..12 {
        let p = w.player(&format!("p{i}")).await;
        let first = p.request(modules::ROOM, 1, &b"r1"[..]).await.unwrap();
        let home = String::from_utf8_lossy(&first)
            .rsplit(' ')
            .next()
            .unwrap()
            .to_string();
        for _ in 0..5 {
            let again = p.request(modules::ROOM, 2, Bytes::new()).await.unwrap();
            assert!(
                String::from_utf8_lossy(&again).ends_with(&home),
                "session moved off {home}: {again:?}"
            );
        }
        homes.insert(home);
    }
    assert_eq!(homes.len(), 3, "12 sessions should spread over 3 backends");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_bind_routes_to_the_bound_backend() {
    let w = world(3, |_| {}).await;
    let p = w.player("dyn").await;
    // Unbound: balanced round robin over all three.
    let mut seen = std::collections::HashSet::new();
    for _ in 0..6 {
        seen.insert(p.request(modules::BIND, 2, Bytes::new()).await.unwrap());
    }
    assert_eq!(seen.len(), 3);
    let bound = p.request(modules::BIND, 1, Bytes::new()).await.unwrap();
    let id = String::from_utf8_lossy(&bound)
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string();
    tokio::time::sleep(Duration::from_millis(100)).await; // the bind command is one-way
    for _ in 0..10 {
        let who = p.request(modules::BIND, 2, Bytes::new()).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&who), id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_reaches_every_member_once_with_one_backend_send_per_gateway() {
    let w = world(2, |_| {}).await;
    let mut players = Vec::new();
    for i in 0..20 {
        players.push(w.player(&format!("c{i}")).await);
    }
    let before: u64 = w.backends.iter().map(|b| b.fanout_sends()).sum();
    players[0]
        .request(modules::CHAT, 1, &b"hello"[..])
        .await
        .unwrap();
    for p in &players {
        let f = p
            .next_push(Duration::from_secs(2))
            .await
            .expect("broadcast");
        assert_eq!(&f.payload[..], b"c0: hello");
        assert!(
            p.next_push(Duration::from_millis(100)).await.is_none(),
            "exactly once"
        );
    }
    let sends: u64 = w.backends.iter().map(|b| b.fanout_sends()).sum::<u64>() - before;
    assert_eq!(sends, 1, "one gateway, one backend send");
    assert_eq!(w.gateway.stats().fanouts.load(Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_backend_moves_stateless_traffic_and_fails_bound_sessions_clearly() {
    let mut w = world(2, |_| {}).await;
    let p = w.player("k").await;
    let joined = p.request(modules::ROOM, 1, &b"r"[..]).await.unwrap();
    let home = String::from_utf8_lossy(&joined)
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string();
    let idx = w.backends.iter().position(|b| b.id() == home).unwrap();
    let victim = w.backends.remove(idx);
    victim.kill();
    let lobby = w.gateway.backend("lobby").unwrap();
    lobby.wait_alive(1, Duration::from_secs(1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..6 {
        let who = p.request(modules::LOBBY, 1, Bytes::new()).await.unwrap();
        assert!(!String::from_utf8_lossy(&who).ends_with(&home), "{who:?}");
    }
    let e = p.request(modules::ROOM, 2, Bytes::new()).await.unwrap_err();
    match e {
        ClientError::Reply(text) => assert!(text.contains("unavailable"), "{text}"),
        other => panic!("expected an error reply, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumes_on_the_same_gateway_with_its_bindings() {
    let w = world(3, |_| {}).await;
    let p = w.player("resumer").await;
    let joined = p.request(modules::ROOM, 1, &b"r"[..]).await.unwrap();
    let welcome = p.welcome.clone();
    drop(p);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let again = GatewayClient::resume(w.gateway.local_addr(), &welcome)
        .await
        .unwrap();
    assert_eq!(again.welcome.session, welcome.session);
    let home = String::from_utf8_lossy(&joined)
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string();
    let state = again.request(modules::ROOM, 2, Bytes::new()).await.unwrap();
    assert!(String::from_utf8_lossy(&state).ends_with(&home));
    // A wrong secret is refused.
    let mut bad = welcome.clone();
    bad.secret = "0".repeat(32);
    let e = GatewayClient::resume(w.gateway.local_addr(), &bad)
        .await
        .unwrap_err();
    assert_eq!(refusal(e), Refusal::BadResume);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_loses_unreliable_frames_then_is_cut_and_a_fast_one_is_not() {
    let w = world(1, |s| {
        s.send_queue_soft = 256 * 1024;
        s.send_queue_hard = 1024 * 1024;
    })
    .await;
    let fast = w.player("fast").await;
    // The slow one authenticates and then never reads (with a small receive buffer, so
    // the kernel holds little for it).
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut slow = sock.connect(w.gateway.local_addr()).await.unwrap();
    slow.write_all(
        &ClientFrame::new(
            GATEWAY_MODULE,
            op::AUTH,
            0,
            w.minter.mint("slow", Duration::from_secs(60)),
        )
        .to_bytes(),
    )
    .await
    .unwrap();
    let mut buf = vec![0u8; 512];
    let n = slow.read(&mut buf).await.unwrap();
    let welcome = ClientFrame::from_message(&buf[..n], 4096).unwrap();
    let slow_sid = String::from_utf8_lossy(&welcome.payload)
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    let fast_sid = fast.welcome.session.clone();
    // Push frames to both as the backend does, on its connection to the gateway.
    let to_gateway = w.backends[0]
        .gateway_connections()
        .into_iter()
        .next()
        .expect("the gateway is connected to the backend");
    let body = Bytes::from(vec![7u8; 16 * 1024]);
    let fast_reader = tokio::spawn(async move {
        let mut got = 0;
        while let Some(_f) = fast.next_push(Duration::from_secs(2)).await {
            got += 1;
        }
        got
    });
    // 800 x 16 KiB unreliable frames (12.5 MiB) in bursts of 8 (128 KiB, within the soft
    // limit) every 5 ms: a reading client keeps up, the silent one cannot.
    for _ in 0..100 {
        for _ in 0..8 {
            to_gateway
                .send_oneway(
                    command("send", body.clone())
                        .with_head(wire::TO, format!("{slow_sid},{fast_sid}"))
                        .with_head(wire::MODULE, "1")
                        .with_head(wire::OPCODE, "7"),
                )
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let stats = w.gateway.stats();
    assert!(
        stats.dropped.load(Ordering::Relaxed) > 0,
        "unreliable frames dropped for the silent client"
    );
    assert_eq!(stats.overflowed.load(Ordering::Relaxed), 0);
    // Reliable frames cannot be dropped: past the hard limit the silent client is cut.
    for _ in 0..100 {
        to_gateway
            .send_oneway(
                command("send", body.clone())
                    .with_head(wire::TO, slow_sid.clone())
                    .with_head(wire::RELIABLE, "1"),
            )
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        stats.overflowed.load(Ordering::Relaxed),
        1,
        "silent client cut"
    );
    let got = fast_reader.await.unwrap();
    assert_eq!(got, 800, "the reading client got every frame");
}
