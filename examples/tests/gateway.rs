//! The example gateway end to end, in-process on loopback: real TCP clients, the
//! gateway, game backends found through an in-memory registry.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use meshline_examples::client::{ClientError, GatewayClient};
use meshline_examples::game_backend::{GameBackend, modules};
use meshline_examples::gateway::admission::{Refusal, TokenMinter};
use meshline_examples::gateway::protocol::{ClientFrame, GATEWAY_MODULE, op};
use meshline_examples::gateway::session::{KEY_PREFIX, secret_sha256};
use meshline_examples::gateway::settings::{
    GatewaySettings, ModuleKind, ModuleRoute, RouteKey, SessionStoreKind,
};
use meshline_examples::gateway::{Gateway, command, wire};
use meshline_examples::memory_registry::MemoryRegistry;
use meshline_testkit::Redis;
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
    registry: Arc<MemoryRegistry>,
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
        registry,
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
    // The gateway reaches a backend through one connection per cluster (lobby, chat,
    // ...): a lobby request first, so the backend has seen this gateway on two
    // connections; the broadcast must still go once per gateway.
    for p in &players {
        p.request(modules::LOBBY, 1, Bytes::new()).await.unwrap();
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
        // A reading client has 1 MiB (eight bursts) of slack on a loaded machine.
        s.send_queue_soft = 1024 * 1024;
        s.send_queue_hard = 3 * 1024 * 1024;
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
    // Reliable frames cannot be dropped: 300 x 16 KiB is past the 3 MiB hard limit, and
    // the silent client is cut.
    for _ in 0..300 {
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

// --- WebSocket: the same frame, one per binary message -------------------------------

fn with_ws(s: &mut GatewaySettings) {
    s.ws_listen = Some("127.0.0.1:0".parse().unwrap());
}

impl World {
    fn ws_url(&self) -> String {
        format!(
            "ws://{}/",
            self.gateway.ws_addr().expect("ws-listen is configured")
        )
    }
}

/// A raw WebSocket connection, authenticated as `account` (AUTH_OK read).
async fn raw_ws(
    w: &World,
    account: &str,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>> {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let (mut ws, _) = tokio_tungstenite::connect_async(w.ws_url()).await.unwrap();
    let auth = ClientFrame::new(
        GATEWAY_MODULE,
        op::AUTH,
        0,
        w.minter.mint(account, Duration::from_secs(60)),
    );
    ws.send(Message::Binary(auth.to_bytes())).await.unwrap();
    match ws.next().await {
        Some(Ok(Message::Binary(b))) => {
            let f = ClientFrame::from_message(&b, 4096).unwrap();
            assert_eq!(f.opcode, op::AUTH_OK, "{f:?}");
        }
        other => panic!("expected AUTH_OK, got {other:?}"),
    }
    ws
}

/// Reads until the gateway's close frame; returns its code and reason.
async fn close_of(
    ws: &mut tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>,
) -> (u16, String) {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(Some(c)))) => {
                    return (u16::from(c.code), c.reason.to_string());
                }
                Some(Ok(_)) => {}
                other => panic!("expected a close frame, got {other:?}"),
            }
        }
    })
    .await
    .expect("the gateway closes the connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_clients_authenticate_request_and_share_broadcasts_with_tcp_clients() {
    let w = world(1, with_ws).await;
    let url = w.ws_url();
    let alice = GatewayClient::auth_ws(&url, &w.minter.mint("alice", Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(alice.welcome.gateway, "gw-a");
    // A TCP player in the same broadcast.
    let bob = w.player("bob").await;
    bob.request(modules::CHAT, 1, &b"hi from tcp"[..])
        .await
        .unwrap();
    alice
        .request(modules::CHAT, 1, &b"hi from ws"[..])
        .await
        .unwrap();
    for p in [&alice, &bob] {
        let mut got = Vec::new();
        for _ in 0..2 {
            let f = p
                .next_push(Duration::from_secs(2))
                .await
                .expect("broadcast");
            assert_eq!(f.module, modules::CHAT);
            got.push(String::from_utf8_lossy(&f.payload).into_owned());
        }
        got.sort();
        assert_eq!(got, ["alice: hi from ws", "bob: hi from tcp"]);
    }
    // (Chat first: the example backend broadcasts once per gateway *connection* it has
    // seen a request on, and the gateway holds one per cluster, lobby included.)
    let who = alice
        .request(modules::LOBBY, 1, Bytes::new())
        .await
        .unwrap();
    assert_eq!(&who[..], b"alice@be-0");
    // Refusals reach WebSocket clients the same way.
    let forged = TokenMinter::new("not-the-secret").mint("mallory", Duration::from_secs(60));
    let e = GatewayClient::auth_ws(&url, &forged).await.unwrap_err();
    assert_eq!(refusal(e), Refusal::Forged);
    // And a session resumes over WebSocket.
    let welcome = alice.welcome.clone();
    drop(alice);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let again = GatewayClient::resume_ws(&url, &welcome).await.unwrap();
    assert_eq!(again.welcome.session, welcome.session);
    assert_eq!(
        &again
            .request(modules::LOBBY, 1, Bytes::new())
            .await
            .unwrap()[..],
        b"alice@be-0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_websocket_message_closes_that_connection() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let w = world(1, with_ws).await;
    let url = w.ws_url();
    let alice = GatewayClient::auth_ws(&url, &w.minter.mint("alice", Duration::from_secs(60)))
        .await
        .unwrap();
    // A message over max-frame (4096): refused by the WebSocket layer on its header.
    let mut big = raw_ws(&w, "big").await;
    let payload = Bytes::from(vec![1u8; 8192]);
    let _ = big
        .send(Message::Binary(
            ClientFrame::new(modules::LOBBY, 1, 1, payload).to_bytes(),
        ))
        .await;
    let (code, reason) = close_of(&mut big).await;
    assert_eq!(code, 1009, "message too big: {reason}");
    assert!(reason.contains("4096-byte limit"), "{reason}");
    // A small message whose frame announces 4 GiB: refused by the frame's cap.
    let mut liar = raw_ws(&w, "liar").await;
    liar.send(Message::Binary(Bytes::from_static(&[0xff; 13])))
        .await
        .unwrap();
    let (code, reason) = close_of(&mut liar).await;
    assert_eq!(code, 1009, "{reason}");
    // A message that is not one whole frame.
    let mut cut = raw_ws(&w, "cut").await;
    cut.send(Message::Binary(Bytes::from_static(&[0, 0, 0, 20, 0, 1])))
        .await
        .unwrap();
    let (code, reason) = close_of(&mut cut).await;
    assert_eq!(code, 1002, "{reason}");
    assert!(reason.contains("inside its frame"), "{reason}");
    // Others are unaffected.
    assert!(alice.request(modules::LOBBY, 1, Bytes::new()).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_text_message_closes_that_connection() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let w = world(1, with_ws).await;
    let mut ws = raw_ws(&w, "texter").await;
    ws.send(Message::Text("hello".into())).await.unwrap();
    let (code, reason) = close_of(&mut ws).await;
    assert_eq!(code, 1003, "unsupported data: {reason}");
    assert!(reason.contains("binary"), "{reason}");
    // Text instead of AUTH is refused at admission, with the reason code.
    let (mut early, _) = tokio_tungstenite::connect_async(w.ws_url()).await.unwrap();
    early.send(Message::Text("AUTH".into())).await.unwrap();
    use futures_util::StreamExt;
    match early.next().await {
        Some(Ok(Message::Binary(b))) => {
            let f = ClientFrame::from_message(&b, 4096).unwrap();
            assert_eq!(f.opcode, op::AUTH_FAIL, "{f:?}");
        }
        other => panic!("expected AUTH_FAIL, got {other:?}"),
    }
    let (code, _) = close_of(&mut early).await;
    assert_eq!(code, 1008);
}

// Sessions across gateways: the session store.

/// Sessions in the Redis at `url`.
fn use_redis(s: &mut GatewaySettings, url: &str, window: Duration) {
    s.session_store = SessionStoreKind::Redis;
    s.redis_url = url.to_string();
    s.resume_window = window;
    s.redis_timeout = Duration::from_millis(500);
}

impl World {
    /// Another gateway on the same registry, in front of the same backends.
    async fn another_gateway(&self, id: &str, tweak: impl FnOnce(&mut GatewaySettings)) -> Gateway {
        let mut s = settings();
        s.id = id.into();
        tweak(&mut s);
        let g = Gateway::start(s, self.registry.clone()).await.unwrap();
        for c in CLUSTERS {
            g.backend(c)
                .unwrap()
                .wait_alive(self.backends.len(), Duration::from_secs(5))
                .await
                .unwrap();
        }
        g
    }
}

fn last_word(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string()
}

async fn redis_conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The stored hash of session `id`.
async fn stored(c: &mut redis::aio::MultiplexedConnection, id: &str) -> HashMap<String, String> {
    redis::cmd("HGETALL")
        .arg(format!("{KEY_PREFIX}{id}"))
        .query_async(c)
        .await
        .unwrap()
}

/// Waits (up to 10 s) until session `id`'s stored hash satisfies `ok`.
async fn stored_until(
    c: &mut redis::aio::MultiplexedConnection,
    id: &str,
    what: &str,
    ok: impl Fn(&HashMap<String, String>) -> bool,
) -> HashMap<String, String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let h = stored(c, id).await;
        if ok(&h) {
            return h;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "stored session never {what}: {h:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The next push of module `module`, skipping others.
async fn next_push_of(p: &GatewayClient, module: u16, limit: Duration) -> Option<ClientFrame> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let f = p.next_push(left).await?;
        if f.module == module {
            return Some(f);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumes_on_another_gateway_through_redis_and_its_backend_follows() {
    let redis = Redis::start().unwrap();
    let url = redis.url();
    let window = Duration::from_secs(3);
    let w = world(3, |s| use_redis(s, &url, window)).await;
    let b = w
        .another_gateway("gw-b", |s| use_redis(s, &url, window))
        .await;
    let mut c = redis_conn(&url).await;

    // On gateway A: authenticate, join a room (static binding), get its snapshots.
    let p = w.player("roamer").await;
    assert_eq!(p.welcome.gateway, "gw-a");
    let joined = p.request(modules::ROOM, 1, &b"r"[..]).await.unwrap();
    let home = last_word(&joined);
    let f = next_push_of(&p, modules::ROOM, Duration::from_secs(3))
        .await
        .expect("room snapshots through gateway A");
    assert!(String::from_utf8_lossy(&f.payload).starts_with("r snapshot"));
    let welcome = p.welcome.clone();
    // Redis holds the durable part: the binding, the group, a hash of the secret only.
    let h = stored_until(&mut c, &welcome.session, "bound and in its room", |h| {
        h.contains_key("b:room") && h.contains_key("g:room:r")
    })
    .await;
    assert_eq!(h["account"], "roamer");
    assert_eq!(h["gateway"], "gw-a");
    assert_eq!(h["secret"], secret_sha256(&welcome.secret));
    assert!(
        h.values().all(|v| !v.contains(&welcome.secret)),
        "the resume secret itself is never stored: {h:?}"
    );
    let ttl: i64 = redis::cmd("PTTL")
        .arg(format!("{KEY_PREFIX}{}", welcome.session))
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(ttl > 0 && ttl <= 3_000, "TTL = the resume window: {ttl} ms");

    // Disconnect, resume on gateway B.
    drop(p);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let rebinds: u64 = w.backends.iter().map(|b| b.rebinds()).sum();
    let again = GatewayClient::resume(b.local_addr(), &welcome)
        .await
        .unwrap();
    // (a) Same session, same binding: room requests reach the same backend.
    assert_eq!(again.welcome.session, welcome.session);
    assert_eq!(again.welcome.gateway, "gw-b");
    for _ in 0..3 {
        let state = again.request(modules::ROOM, 2, Bytes::new()).await.unwrap();
        assert_eq!(last_word(&state), home, "{state:?}");
    }
    // (b) The backend was told the new gateway: the room's snapshots come through B.
    let f = next_push_of(&again, modules::ROOM, Duration::from_secs(3))
        .await
        .expect("room snapshots through gateway B");
    assert!(String::from_utf8_lossy(&f.payload).starts_with("r snapshot"));
    assert!(b.stats().pushed.load(Ordering::Relaxed) > 0);
    let home_backend = w.backends.iter().find(|b| b.id() == home).unwrap();
    assert!(home_backend.rebinds() >= 1);
    assert!(w.backends.iter().map(|b| b.rebinds()).sum::<u64>() > rebinds);
    // B holds it now.
    stored_until(&mut c, &welcome.session, "claimed by gw-b", |h| {
        h.get("gateway").map(String::as_str) == Some("gw-b")
    })
    .await;

    // (c) A wrong secret is refused on B (and on A).
    let mut bad = welcome.clone();
    bad.secret = "0".repeat(32);
    for gw in [b.local_addr(), w.gateway.local_addr()] {
        let e = GatewayClient::resume(gw, &bad).await.unwrap_err();
        assert_eq!(refusal(e), Refusal::BadResume);
    }

    // A client still connected to A whose session is resumed on B: A learns it lost the
    // session (its next TTL refresh, a third of the window) and closes that connection.
    let q = w.player("twice").await;
    q.request(modules::LOBBY, 1, Bytes::new()).await.unwrap();
    stored_until(&mut c, &q.welcome.session, "written", |h| !h.is_empty()).await;
    let q2 = GatewayClient::resume(b.local_addr(), &q.welcome)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if q.request(modules::LOBBY, 1, Bytes::new()).await.is_err() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gateway A kept a session gateway B took over"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let who = q2.request(modules::LOBBY, 1, Bytes::new()).await.unwrap();
    assert!(String::from_utf8_lossy(&who).starts_with("twice@"));
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_store_resumes_only_on_the_gateway_holding_the_session() {
    let w = world(1, |_| {}).await;
    let b = w.another_gateway("gw-b", |_| {}).await;
    let p = w.player("homebody").await;
    p.request(modules::ROOM, 1, &b"r"[..]).await.unwrap();
    let welcome = p.welcome.clone();
    drop(p);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let e = GatewayClient::resume(b.local_addr(), &welcome)
        .await
        .unwrap_err();
    assert_eq!(refusal(e), Refusal::BadResume);
    let again = GatewayClient::resume(w.gateway.local_addr(), &welcome)
        .await
        .unwrap();
    assert_eq!(again.welcome.session, welcome.session);
    // Resumed on the same gateway, the backend is told too.
    let f = next_push_of(&again, modules::ROOM, Duration::from_secs(3)).await;
    assert!(
        f.is_some(),
        "room snapshots after a resume on the same gateway"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while w.backends[0].rebinds() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "no rebind");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_resumes_are_refused_with_a_reason_and_traffic_goes_on() {
    let mut redis = Redis::start().unwrap();
    let url = redis.url();
    let window = Duration::from_secs(3);
    let w = world(1, |s| use_redis(s, &url, window)).await;
    let b = w
        .another_gateway("gw-b", |s| use_redis(s, &url, window))
        .await;
    let mut c = redis_conn(&url).await;
    let gone = w.player("gone").await;
    let stays = w.player("stays").await;
    let home = last_word(&stays.request(modules::ROOM, 1, &b"r"[..]).await.unwrap());
    for id in [&gone.welcome.session, &stays.welcome.session] {
        stored_until(&mut c, id, "written", |h| !h.is_empty()).await;
    }
    let gone_welcome = gone.welcome.clone();
    drop(gone);
    drop(c);

    redis.kill();
    // A resume needs the store: refused, with the reason.
    let e = GatewayClient::resume(b.local_addr(), &gone_welcome)
        .await
        .unwrap_err();
    match &e {
        ClientError::Refused(text) => assert!(text.contains("session store unavailable"), "{text}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(refusal(e), Refusal::StoreUnavailable);
    // Everything else goes on: requests, bound requests, new logins, room changes.
    for _ in 0..3 {
        let who = stays
            .request(modules::LOBBY, 1, Bytes::new())
            .await
            .unwrap();
        assert_eq!(&who[..], b"stays@be-0");
    }
    stays.request(modules::ROOM, 1, &b"r2"[..]).await.unwrap();
    let state = stays.request(modules::ROOM, 2, Bytes::new()).await.unwrap();
    assert_eq!(last_word(&state), home);
    let newcomer = w.player("newcomer").await;
    newcomer
        .request(modules::LOBBY, 1, Bytes::new())
        .await
        .unwrap();
    let on_b = GatewayClient::auth(
        b.local_addr(),
        &w.minter.mint("on-b", Duration::from_secs(60)),
    )
    .await
    .unwrap();
    on_b.request(modules::LOBBY, 1, Bytes::new()).await.unwrap();

    // Redis back, empty (no persistence): connected sessions are written again (the
    // TTL refresh finds them missing), with what changed meanwhile, and resume anywhere.
    tokio::task::block_in_place(|| redis.restart()).unwrap();
    let mut c = redis_conn(&url).await;
    stored_until(&mut c, &stays.welcome.session, "written again", |h| {
        h.contains_key("g:room:r2")
    })
    .await;
    let welcome = stays.welcome.clone();
    drop(stays);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let again = GatewayClient::resume(b.local_addr(), &welcome)
        .await
        .unwrap();
    let state = again.request(modules::ROOM, 2, Bytes::new()).await.unwrap();
    assert_eq!(last_word(&state), home);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_sessions_go_only_to_backends_that_take_them() {
    let registry = Arc::new(MemoryRegistry::default());
    let mut backends = Vec::new();
    for (id, version) in [("v2-a", "2.1"), ("v3", "3.0"), ("v2-b", "2.4.1")] {
        backends.push(
            GameBackend::start_versioned(
                id,
                "127.0.0.1:0".parse().unwrap(),
                registry.clone(),
                &CLUSTERS,
                Duration::from_secs(3600),
                version,
            )
            .await
            .unwrap(),
        );
    }
    let mut s = settings();
    s.app_version = Some("2.0.0".into());
    let gateway = Gateway::start(s, registry.clone()).await.unwrap();
    let room = gateway.backend("room").unwrap();
    room.wait_alive(3, Duration::from_secs(5)).await.unwrap();
    let minter = TokenMinter::new(SECRET);
    let mut homes = std::collections::HashSet::new();
    for i in 0..12 {
        let p = GatewayClient::auth(
            gateway.local_addr(),
            &minter.mint(&format!("v{i}"), Duration::from_secs(60)),
        )
        .await
        .unwrap();
        let joined = p.request(modules::ROOM, 1, &b"r"[..]).await.unwrap();
        homes.insert(
            String::from_utf8_lossy(&joined)
                .rsplit(' ')
                .next()
                .unwrap()
                .to_string(),
        );
    }
    let want: std::collections::HashSet<String> = ["v2-a".into(), "v2-b".into()].into();
    assert_eq!(homes, want, "major version 3 must get no new session");
    // A backend that disables new sessions gets none either.
    let v2a = backends.iter().find(|b| b.id() == "v2-a").unwrap();
    for c in v2a.gateway_connections() {
        c.send_oneway(command("disable", Bytes::new()))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    for i in 0..6 {
        let p = GatewayClient::auth(
            gateway.local_addr(),
            &minter.mint(&format!("d{i}"), Duration::from_secs(60)),
        )
        .await
        .unwrap();
        let joined = p.request(modules::ROOM, 1, &b"r"[..]).await.unwrap();
        assert!(
            String::from_utf8_lossy(&joined).ends_with("v2-b"),
            "{joined:?}"
        );
    }
}
