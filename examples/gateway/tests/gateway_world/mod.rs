//! What the gateway tests share: a world of game backends and a gateway in one
//! process over an in-memory registry, and the imports the tests use.

#![allow(dead_code, unused_imports)]

pub use std::collections::HashMap;
pub use std::net::SocketAddr;
pub use std::sync::Arc;
pub use std::sync::atomic::Ordering;
pub use std::time::Duration;

pub use bytes::Bytes;
pub use meshline_example_gateway::client::{ClientError, GatewayClient, Welcome};
pub use meshline_example_gateway::game_backend::{GameBackend, modules};
pub use meshline_example_gateway::gateway::admission::{Refusal, TokenMinter};
pub use meshline_example_gateway::gateway::limits::{LimitKind, LimitSettings, Rate};
pub use meshline_example_gateway::gateway::protocol::{ClientFrame, GATEWAY_MODULE, op};
pub use meshline_example_gateway::gateway::queue::QueueSettings;
pub use meshline_example_gateway::gateway::session::{KEY_PREFIX, secret_sha256};
pub use meshline_example_gateway::gateway::settings::{
    GatewaySettings, ModuleKind, ModuleRoute, RouteKey, SessionStoreKind,
};
pub use meshline_example_gateway::gateway::{Gateway, command, wire};
pub use meshline_example_gateway::memory_registry::MemoryRegistry;
pub use meshline_testkit::Redis;
pub use tokio::io::{AsyncReadExt, AsyncWriteExt};
pub use tokio::net::TcpStream;

pub const SECRET: &str = "test-secret";
pub const CLUSTERS: [&str; 5] = ["lobby", "chat", "room", "bind", "inventory"];

pub fn settings() -> GatewaySettings {
    let mut s = GatewaySettings {
        id: "gw-a".into(),
        listen: "127.0.0.1:0".parse().unwrap(),
        secret: SECRET.into(),
        auth_deadline: Duration::from_millis(500),
        max_frame: 4096,
        register_cluster: Some("gateway".into()),
        // Tests open many connections from 127.0.0.1 at once and send flat out: the
        // rate limits are off here, and gateway_limits.rs turns each on.
        limits: LimitSettings::off(),
        ..GatewaySettings::default()
    };
    for (id, name, kind) in [
        (modules::LOBBY, "lobby", ModuleKind::Stateless),
        (modules::CHAT, "chat", ModuleKind::Stateless),
        (modules::ROOM, "room", ModuleKind::Keyed),
        (modules::BIND, "bind", ModuleKind::Dynamic),
        (modules::INVENTORY, "inventory", ModuleKind::Static),
    ] {
        s.modules.insert(id, route(id, name, kind));
    }
    s
}

/// The route of test module `id`: to the cluster of its `name`, round robin, a keyed
/// module keyed by the first word of the payload.
pub fn route(id: u16, name: &str, kind: ModuleKind) -> ModuleRoute {
    ModuleRoute {
        id,
        name: name.into(),
        cluster: name.into(),
        kind,
        choice: "RoundRobinLoadBalance".into(),
        key: if kind == ModuleKind::Keyed {
            RouteKey::Word
        } else {
            RouteKey::None
        },
    }
}

/// Game backend `id` on `addr` (port 0: any), registered in `registry` for every test
/// cluster, its rooms snapshotting every 50 ms.
pub async fn start_backend(
    id: &str,
    addr: SocketAddr,
    registry: &Arc<MemoryRegistry>,
) -> GameBackend {
    GameBackend::start(
        id,
        addr,
        registry.clone(),
        &CLUSTERS,
        Duration::from_millis(50),
    )
    .await
    .unwrap()
}

/// Waits (up to `limit`) until `gateway` sees `n` alive backends in `cluster`.
pub async fn wait_alive(gateway: &Gateway, cluster: &str, n: usize, limit: Duration) {
    gateway
        .backend(cluster)
        .unwrap()
        .wait_alive(n, limit)
        .await
        .unwrap();
}

/// Asks the lobby who `p` is (opcode 1, answered `account@backend`); the answer.
pub async fn who(p: &GatewayClient) -> Bytes {
    p.request(modules::LOBBY, 1, Bytes::new()).await.unwrap()
}

/// The last word of a text answer (`... on be-1` -> `be-1`).
pub fn last_word(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .rsplit(' ')
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Waits (polling every 5 ms, up to `limit`) until `ok` holds; panics naming `what`.
pub async fn until(what: &str, limit: Duration, ok: impl FnMut() -> bool) {
    let held = meshline_testkit::until(limit, ok).await;
    assert!(held.is_some(), "never {what}");
}

/// The next push of module `module` (and opcode `opcode`, if given), skipping others.
pub async fn next_push_of(
    p: &GatewayClient,
    module: u16,
    opcode: Option<u16>,
    limit: Duration,
) -> Option<ClientFrame> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let f = p.next_push(left).await?;
        if f.module == module && opcode.is_none_or(|o| f.opcode == o) {
            return Some(f);
        }
    }
}

pub struct World {
    pub registry: Arc<MemoryRegistry>,
    pub backends: Vec<GameBackend>,
    pub gateway: Gateway,
    pub minter: TokenMinter,
}

pub async fn world(backends: usize, tweak: impl FnOnce(&mut GatewaySettings)) -> World {
    let registry = Arc::new(MemoryRegistry::default());
    let mut list = Vec::new();
    for i in 0..backends {
        list.push(
            start_backend(
                &format!("be-{i}"),
                "127.0.0.1:0".parse().unwrap(),
                &registry,
            )
            .await,
        );
    }
    let mut s = settings();
    tweak(&mut s);
    let gateway = Gateway::start(s, registry.clone()).await.unwrap();
    for c in CLUSTERS {
        wait_alive(&gateway, c, backends, Duration::from_secs(5)).await;
    }
    World {
        registry,
        backends: list,
        gateway,
        minter: TokenMinter::new(SECRET),
    }
}

impl World {
    /// Another gateway on the same registry, in front of the same backends.
    pub async fn another_gateway(
        &self,
        id: &str,
        tweak: impl FnOnce(&mut GatewaySettings),
    ) -> Gateway {
        let mut s = settings();
        s.id = id.into();
        tweak(&mut s);
        let g = Gateway::start(s, self.registry.clone()).await.unwrap();
        for c in CLUSTERS {
            wait_alive(&g, c, self.backends.len(), Duration::from_secs(5)).await;
        }
        g
    }

    /// Another game backend `id` on the world's registry, on any port (not in `backends`).
    pub async fn add_backend(&self, id: &str) -> GameBackend {
        start_backend(id, "127.0.0.1:0".parse().unwrap(), &self.registry).await
    }

    /// A token for `account`, good for a minute.
    pub fn token(&self, account: &str) -> String {
        self.minter.mint(account, Duration::from_secs(60))
    }

    /// The AUTH frame of a fresh token for `account`, as a raw client writes it.
    pub fn auth_frame(&self, account: &str) -> Bytes {
        ClientFrame::new(GATEWAY_MODULE, op::AUTH, 0, self.token(account)).to_bytes()
    }

    /// Waits (up to 5 s) until the gateway sees exactly `n` alive endpoints in `cluster`
    /// (after a kill: until it noticed).
    pub async fn until_alive_count(&self, cluster: &str, n: usize) {
        let mut alive = self.gateway.backend(cluster).unwrap().subscribe_alive();
        tokio::time::timeout(Duration::from_secs(5), alive.wait_for(|a| a.len() == n))
            .await
            .expect("the gateway sees the backend go")
            .unwrap();
    }

    /// Binds `p`'s dynamic module to a backend (BIND opcode 1 makes the backend send
    /// `bind`) and waits until the gateway holds the binding (the command is one-way);
    /// the bound backend's id.
    pub async fn bind(&self, p: &GatewayClient) -> String {
        let bound = p.request(modules::BIND, 1, Bytes::new()).await.unwrap();
        let session = self.gateway.session(&p.welcome.session).unwrap();
        until("bound", Duration::from_secs(3), || {
            session.binding("m:4").is_some()
        })
        .await;
        last_word(&bound)
    }

    /// Drops player `p` and waits until the gateway noticed; its resume ticket.
    pub async fn disconnect(&self, p: GatewayClient) -> Welcome {
        let ticket = p.resume_ticket();
        drop(p);
        self.detached(&ticket.session).await;
        ticket
    }

    /// Resumes the session of `ticket` on the world's gateway.
    pub async fn resume(&self, ticket: &Welcome) -> GatewayClient {
        GatewayClient::resume(self.gateway.local_addr(), ticket)
            .await
            .unwrap()
    }

    /// Waits until session `id` has no connection on the world's gateway (its client
    /// went away and the gateway noticed).
    pub async fn detached(&self, id: &str) {
        until("the session detached", Duration::from_secs(5), || {
            self.gateway.session(id).is_some_and(|s| s.link().is_none())
        })
        .await
    }

    /// A raw TCP client logged in as `account`: the stream, after AUTH_OK, and its session id.
    /// Its receive buffer is small (4 KiB), so the kernel holds little for it.
    pub async fn raw_login(&self, account: &str) -> (TcpStream, String) {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut s = socket.connect(self.gateway.local_addr()).await.unwrap();
        s.write_all(&self.auth_frame(account)).await.unwrap();
        let ok = read_frame(&mut s).await.expect("AUTH_OK");
        assert_eq!(
            (ok.module, ok.opcode),
            (GATEWAY_MODULE, op::AUTH_OK),
            "{ok:?}"
        );
        let sid = String::from_utf8_lossy(&ok.payload)
            .split(' ')
            .next()
            .unwrap()
            .to_string();
        (s, sid)
    }

    pub async fn player(&self, account: &str) -> GatewayClient {
        GatewayClient::auth(self.gateway.local_addr(), &self.token(account))
            .await
            .unwrap()
    }

    /// A player logged in as `account` over WebSocket (settings tweaked by [`with_ws`]).
    pub async fn ws_player(&self, account: &str) -> GatewayClient {
        GatewayClient::auth_ws(&self.ws_url(), &self.token(account))
            .await
            .unwrap()
    }

    /// The URL of the world's WebSocket listener (settings tweaked by [`with_ws`]).
    pub fn ws_url(&self) -> String {
        format!(
            "ws://{}/",
            self.gateway.ws_addr().expect("ws-listen is configured")
        )
    }
}

/// A settings tweak: `rate` messages per account, the connection cut after `kick_after`
/// refused ones within 10 s (0: never).
pub fn account_limit(rate: Rate, kick_after: u32) -> impl FnOnce(&mut GatewaySettings) {
    move |s| {
        s.limits.account_messages = rate;
        s.limits.kick_after = kick_after;
    }
}

/// A settings tweak: a WebSocket listener on any port.
pub fn with_ws(s: &mut GatewaySettings) {
    s.ws_listen = Some("127.0.0.1:0".parse().unwrap());
}

/// A raw WebSocket connection to a gateway.
pub type RawWs = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

/// A raw WebSocket connection, authenticated as `account` (AUTH_OK read).
pub async fn raw_ws(w: &World, account: &str) -> RawWs {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let (mut ws, _) = tokio_tungstenite::connect_async(w.ws_url()).await.unwrap();
    ws.send(Message::Binary(w.auth_frame(account)))
        .await
        .unwrap();
    match ws.next().await {
        Some(Ok(Message::Binary(b))) => {
            let f = ClientFrame::from_message(&b, 4096).unwrap();
            assert_eq!(f.opcode, op::AUTH_OK, "{f:?}");
        }
        other => panic!("expected AUTH_OK, got {other:?}"),
    }
    ws
}

/// The next push of `p` (within `limit`), which must be the gateway's own `opcode` (a
/// GAP, a REBOUND notice); panics saying `what` was expected when none comes.
pub async fn gateway_push(
    p: &GatewayClient,
    opcode: u16,
    limit: Duration,
    what: &str,
) -> ClientFrame {
    let f = p.next_push(limit).await.expect(what);
    assert_eq!((f.module, f.opcode), (GATEWAY_MODULE, opcode), "{f:?}");
    f
}

/// The text of an error reply, or a panic naming what came instead.
pub fn error_text(r: Result<Bytes, ClientError>) -> String {
    match r {
        Err(ClientError::Reply(text)) => text,
        other => panic!("expected an error reply, got {other:?}"),
    }
}

/// The text of an answer, or a panic naming the error that came instead.
pub fn ok_text(r: Result<Bytes, ClientError>) -> String {
    match r {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => panic!("expected an answer, got {e}"),
    }
}

/// One whole frame from `s`, `None` at the end of the stream.
pub async fn read_frame(s: &mut TcpStream) -> Option<ClientFrame> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await.ok()?;
    let mut rest = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut rest).await.ok()?;
    ClientFrame::from_message(&[&len[..], &rest].concat(), 16 << 20).ok()
}

/// The kick code of a `KICK` frame.
pub fn kick_code(f: &ClientFrame) -> u16 {
    assert_eq!((f.module, f.opcode), (GATEWAY_MODULE, op::KICK), "{f:?}");
    meshline_example_gateway::gateway::kick::split_coded(&f.payload)
        .unwrap_or_else(|| panic!("not a kick payload: {f:?}"))
        .0
}

pub fn refusal(e: ClientError) -> Refusal {
    match e {
        ClientError::Refused(text) => {
            let code = text.split(' ').next().unwrap().parse().unwrap();
            Refusal::from_code(code).unwrap()
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}
