//! What the gateway tests share: a world of game backends and a gateway in one
//! process over an in-memory registry, and the imports the tests use.

#![allow(dead_code, unused_imports)]

pub use std::collections::HashMap;
pub use std::sync::Arc;
pub use std::sync::atomic::Ordering;
pub use std::time::Duration;

pub use bytes::Bytes;
pub use meshline_example_gateway::client::{ClientError, GatewayClient};
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
        s.modules.insert(
            id,
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
            },
        );
    }
    s
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
            g.backend(c)
                .unwrap()
                .wait_alive(self.backends.len(), Duration::from_secs(5))
                .await
                .unwrap();
        }
        g
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
        s.write_all(
            &ClientFrame::new(
                GATEWAY_MODULE,
                op::AUTH,
                0,
                self.minter.mint(account, Duration::from_secs(60)),
            )
            .to_bytes(),
        )
        .await
        .unwrap();
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
        GatewayClient::auth(
            self.gateway.local_addr(),
            &self.minter.mint(account, Duration::from_secs(60)),
        )
        .await
        .unwrap()
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
