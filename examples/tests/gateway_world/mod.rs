//! What the gateway tests share: a world of game backends and a gateway in one
//! process over an in-memory registry, and the imports the tests use.

#![allow(dead_code, unused_imports)]

pub use std::collections::HashMap;
pub use std::sync::Arc;
pub use std::sync::atomic::Ordering;
pub use std::time::Duration;

pub use bytes::Bytes;
pub use meshline_examples::client::{ClientError, GatewayClient};
pub use meshline_examples::game_backend::{GameBackend, modules};
pub use meshline_examples::gateway::admission::{Refusal, TokenMinter};
pub use meshline_examples::gateway::limits::{LimitKind, LimitSettings, Rate};
pub use meshline_examples::gateway::protocol::{ClientFrame, GATEWAY_MODULE, op};
pub use meshline_examples::gateway::queue::QueueSettings;
pub use meshline_examples::gateway::session::{KEY_PREFIX, secret_sha256};
pub use meshline_examples::gateway::settings::{
    GatewaySettings, ModuleKind, ModuleRoute, RouteKey, SessionStoreKind,
};
pub use meshline_examples::gateway::{Gateway, command, wire};
pub use meshline_examples::memory_registry::MemoryRegistry;
pub use meshline_testkit::Redis;
pub use tokio::io::{AsyncReadExt, AsyncWriteExt};
pub use tokio::net::TcpStream;

pub const SECRET: &str = "test-secret";
pub const CLUSTERS: [&str; 4] = ["lobby", "chat", "room", "bind"];

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
    pub async fn player(&self, account: &str) -> GatewayClient {
        GatewayClient::auth(
            self.gateway.local_addr(),
            &self.minter.mint(account, Duration::from_secs(60)),
        )
        .await
        .unwrap()
    }
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
