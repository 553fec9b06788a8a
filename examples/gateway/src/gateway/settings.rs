//! The gateway's settings: the `gateway:` section of the same config file (and
//! `MESHLINE_GATEWAY__*` variables), read by the same loader as the rest.
//!
//! ```yaml
//! gateway:
//!   id: gw-1                      # names this gateway to clients and backends
//!   listen: 127.0.0.1:7000        # TCP clients
//!   ws-listen: 127.0.0.1:7001     # WebSocket clients (browsers); optional
//!   admin-listen: 127.0.0.1:7080  # HTTP: GET /gateway.html, the browser client; optional
//!   secret: change-me             # HMAC key shared with the login service
//!   auth-deadline: 3s             # first frame must be AUTH within this
//!   max-unauthenticated: 5000     # connections still authenticating, at most
//!   auth-max-frame: 1KiB          # cap of the first frame (AUTH / RESUME), before login
//!   max-frame: 64KiB              # client frame cap (checked before allocating)
//!   send-queue-soft: 256KiB       # above: oldest unreliable frames dropped
//!   send-queue-hard: 1MiB         # above: the client is disconnected
//!   register-cluster: gateway     # registered here in the registry ("" = do not)
//!   app-version: 2.3.1            # new sessions only to backends of major version 2
//!   resume-window: 60s            # a detached session can be resumed this long
//!   client-keepalive: 20s         # a silent client's connection closed after this (0s: never)
//!   push-buffer-bytes: 32KiB      # numbered pushes kept per session for a resume ...
//!   push-buffer-age: 60s          # ... and for at most this long
//!   duplicate-login: kick-old     # kick-old, refuse-new or allow
//!   session-store: memory         # memory (this gateway only) or redis (any gateway)
//!   redis-url: redis://127.0.0.1:6379   # with session-store: redis
//!   redis-timeout: 2s             # each Redis command (and connect) at most
//!   drain:                        # graceful drain (SIGTERM, POST /drain): see drain.rs
//!     threshold: 0                # done when at most this many clients are connected
//!     deadline: 30s               # clients still connected then are closed
//!     reason: gateway draining    # the RECONNECT advice's payload
//!   limits:                       # rate limits; see the `limits` module (0 = off)
//!     ip-connects-per-sec: 20
//!     allow: 203.0.113.0/24       # proxies / NATs: their own, higher per-IP limit
//!     account-messages-per-sec: 100
//!   queue:                        # the login queue; see the `queue` module (0 = off)
//!     admit-per-sec: 500
//!     max-online: 50000
//!   protect: { max-in-flight: 5000, hold-for: 3s }   # see below
//!   modules:
//!     1: { name: lobby, cluster: lobby, kind: stateless, choice: RoundRobinLoadBalance }
//!     2: { name: chat,  cluster: chat,  kind: stateless, choice: accounthash, key: account }
//!     3: { name: room,  cluster: room,  kind: keyed,     key: word }
//!     4: { name: shop,  cluster: shop,  max-in-flight: 500, shed: [7, 8] }
//!     5: { name: inventory, cluster: inventory, kind: static }
//! ```
//!
//! The gateway keeps one rpc-client per *cluster*: modules that share a cluster share its
//! balancer (the first such module's `choice`), each still routing by its own `key`
//! (the key travels with the request). Give modules that need different algorithms
//! different clusters.
//!
//! `kind`, the binding: `stateless` (every request balanced), `static` (per session:
//! the first request to any static module binds the session to one backend of that
//! cluster, for every static module that cluster serves: Zeze's static binding),
//! `dynamic` (per session, by the backend: it binds and unbinds sessions explicitly) or
//! `keyed` (per key: every request carries a key, a room id, and every request with the
//! same key goes to the same backend, from every gateway, so a room has one copy; see
//! [`keys`](super::keys)). `key`: what hashing balancers hash, or what a keyed module's
//! key is: `account`, `role`, `source` (client IP), `prefix:N` (the payload's first N
//! bytes) or `word` (the payload up to its first space, or all of it); read without
//! decoding the payload. A keyed module's key is `word` unless set (and must be `word`
//! or `prefix:N`).
//!
//! `session-store` (see [`session`](super::session)): `memory` keeps sessions in this
//! gateway only, so a client resumes on the gateway it left; `redis` also writes each
//! session's durable part (account, a SHA-256 of the resume secret, role, user state,
//! bindings, groups) to the Redis at `redis-url` (`redis://[:password@]host:port[/db]`)
//! as the hash `meshline:gw:session:<id>` with a TTL of `resume-window`, so a client can
//! resume on any gateway sharing that Redis. Redis is only needed to resume: while it is
//! down, resumes are refused with a reason and everything else keeps working.
//!
//! `protect` and the modules' `max-in-flight`, `shed` and `replay`: the bulkheads,
//! circuit breakers, holding of requests while a cluster has no endpoint, and load
//! shedding of [`protect`](super::protect), with every key and default in
//! [`ProtectSettings`].

mod read;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::limits::LimitSettings;
use super::protect::settings::ProtectSettings;
use super::queue::QueueSettings;

/// How a module's requests choose a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleKind {
    /// Every request balanced on its own.
    Stateless,
    /// Bound on first use, with the cluster's other static modules.
    Static,
    /// Bound by the backend (Bind / UnBind commands).
    Dynamic,
    /// Bound per key: a key's requests go to one backend, chosen by rendezvous hashing
    /// of the key over the cluster's alive backends (the same on every gateway).
    Keyed,
}

impl ModuleKind {
    /// Every kind (the table of `docs/gateway-protocol.md`).
    pub const ALL: [ModuleKind; 4] = [
        ModuleKind::Stateless,
        ModuleKind::Static,
        ModuleKind::Dynamic,
        ModuleKind::Keyed,
    ];

    /// The name in the config (`kind`).
    pub fn name(self) -> &'static str {
        match self {
            ModuleKind::Stateless => "stateless",
            ModuleKind::Static => "static",
            ModuleKind::Dynamic => "dynamic",
            ModuleKind::Keyed => "keyed",
        }
    }
}

/// What hashing balancers route by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteKey {
    /// No key: the balancer decides.
    None,
    /// The session's account.
    Account,
    /// The session's role (user state until set).
    Role,
    /// The client's IP address.
    Source,
    /// The first `n` payload bytes.
    Prefix(usize),
    /// The payload up to its first space (all of it without one).
    Word,
}

impl RouteKey {
    /// The key bytes of `payload` for the payload keys (`prefix:N`, `word`).
    pub fn of_payload(self, payload: &[u8]) -> Option<&[u8]> {
        match self {
            RouteKey::Prefix(n) => Some(&payload[..n.min(payload.len())]),
            RouteKey::Word => Some(
                payload
                    .iter()
                    .position(|b| *b == b' ')
                    .map_or(payload, |i| &payload[..i]),
            ),
            _ => None,
        }
    }
}

/// One module's route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleRoute {
    /// Module id on the wire.
    pub id: u16,
    /// A name for logs and metrics.
    pub name: String,
    /// The registry cluster serving it.
    pub cluster: String,
    /// Stateless, static or dynamic.
    pub kind: ModuleKind,
    /// The balancer (any meshline / Seata balancer name).
    pub choice: String,
    /// The routing key.
    pub key: RouteKey,
}

/// Where sessions are kept beyond this gateway's memory (`session-store`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionStoreKind {
    /// Nowhere: a session can be resumed on this gateway only.
    Memory,
    /// In Redis at `redis-url`: a session can be resumed on any gateway sharing it.
    Redis,
}

/// Every gateway setting.
#[derive(Debug, Clone)]
pub struct GatewaySettings {
    /// This gateway's id.
    pub id: String,
    /// TCP listen address.
    pub listen: SocketAddr,
    /// WebSocket listen address (`None`: no WebSocket listener). The frame is the same,
    /// one per binary message.
    pub ws_listen: Option<SocketAddr>,
    /// Admin HTTP listen address serving the browser client page (`None`: none).
    pub admin_listen: Option<SocketAddr>,
    /// Token secret (never logged).
    pub secret: String,
    /// Time allowed for the first frame (AUTH / RESUME).
    pub auth_deadline: Duration,
    /// Connections still authenticating, at most.
    pub max_unauthenticated: usize,
    /// Cap of a connection's first frame (AUTH / RESUME), before login.
    pub auth_max_frame: usize,
    /// Client frame cap.
    pub max_frame: usize,
    /// Soft limit of a client's send queue.
    pub send_queue_soft: usize,
    /// Hard limit of a client's send queue.
    pub send_queue_hard: usize,
    /// Cluster to register the gateway under (`None`: do not register).
    pub register_cluster: Option<String>,
    /// How long a backend call may take.
    pub backend_timeout: Duration,
    /// The application version (`gateway.app-version`, e.g. `2.3.1`): new sessions are
    /// bound only to backends whose `version` metadata has the same major version.
    /// Backends without version metadata are accepted. `None`: no version check.
    pub app_version: Option<String>,
    /// The modules by id.
    pub modules: BTreeMap<u16, ModuleRoute>,
    /// How long a detached session can be resumed (and its store record's TTL).
    pub resume_window: Duration,
    /// A client connection from which nothing (not even a TCP acknowledgement) came for
    /// this long is closed, and its session detached (`client-keepalive`; zero: never).
    /// TCP keep-alive and `TCP_USER_TIMEOUT` on each client connection.
    pub client_keepalive: Duration,
    /// Where sessions are kept beyond memory.
    pub session_store: SessionStoreKind,
    /// The Redis of [`SessionStoreKind::Redis`] (may hold a password: never logged).
    pub redis_url: String,
    /// Bound on each Redis command and connect.
    pub redis_timeout: Duration,
    /// The per-session push buffer (`push-buffer-bytes`, `push-buffer-age`).
    pub push_buffer: super::session::pushes::PushLimits,
    /// What a second login of an account does (`duplicate-login`).
    pub duplicate_login: super::session::DuplicateLogin,
    /// Graceful drain (`gateway.drain.*`).
    pub drain: super::drain::DrainSettings,
    /// Connection and message rate limits (`limits.*`).
    pub limits: LimitSettings,
    /// The login queue (`queue.*`).
    pub queue: QueueSettings,
    /// Bulkheads, breakers, hold and shedding (`protect.*`, `modules.N.max-in-flight`,
    /// `modules.N.shed`, `modules.N.replay`).
    pub protect: ProtectSettings,
}

impl Default for GatewaySettings {
    fn default() -> Self {
        GatewaySettings {
            id: "gw-1".into(),
            listen: "127.0.0.1:7000".parse().expect("valid address"),
            ws_listen: None,
            admin_listen: None,
            secret: String::new(),
            auth_deadline: Duration::from_secs(3),
            max_unauthenticated: 5000,
            auth_max_frame: 1024,
            max_frame: 64 * 1024,
            send_queue_soft: 256 * 1024,
            send_queue_hard: 1024 * 1024,
            register_cluster: Some("gateway".into()),
            backend_timeout: Duration::from_secs(5),
            app_version: None,
            modules: BTreeMap::new(),
            resume_window: Duration::from_secs(60),
            client_keepalive: Duration::from_secs(20),
            session_store: SessionStoreKind::Memory,
            redis_url: "redis://127.0.0.1:6379".into(),
            redis_timeout: Duration::from_secs(2),
            push_buffer: Default::default(),
            duplicate_login: Default::default(),
            drain: Default::default(),
            limits: LimitSettings::default(),
            queue: QueueSettings::default(),
            protect: ProtectSettings::default(),
        }
    }
}

/// A setting that is wrong, naming the key.
#[derive(Debug, thiserror::Error)]
#[error("gateway.{key}: {reason}")]
pub struct SettingsError {
    key: String,
    reason: String,
}

pub(crate) fn err(key: &str, reason: impl Into<String>) -> SettingsError {
    SettingsError {
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// A count setting of `limits.*` or `queue.*`: a whole number, 0 turning it off.
pub(crate) fn off_or_count<T>(v: &str) -> Result<T, String>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    v.trim()
        .parse::<T>()
        .map_err(|e| format!("`{v}`: {e} (a whole number; 0 = off)"))
}

pub(crate) fn duration(key: &str, v: &str) -> Result<Duration, SettingsError> {
    meshline::core::config::parse_duration_with_unit(v).map_err(|e| err(key, e))
}

impl GatewaySettings {
    /// The distinct clusters the modules use.
    pub fn clusters(&self) -> Vec<String> {
        let mut v: Vec<String> = self.modules.values().map(|m| m.cluster.clone()).collect();
        v.sort();
        v.dedup();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshline::{Config, Format};

    /// The settings the YAML `text` gives (which must be right).
    fn from_yaml(text: &str) -> GatewaySettings {
        GatewaySettings::from_config(&Config::from_text(text, Format::Yaml).unwrap()).unwrap()
    }

    /// What reading the properties `text` gives.
    fn from_properties(text: &str) -> Result<GatewaySettings, SettingsError> {
        GatewaySettings::from_config(&Config::from_text(text, Format::Properties).unwrap())
    }

    /// Asserts each properties `text` is refused with an error that names `want`.
    fn assert_refused(cases: &[(&str, &str)]) {
        for (text, want) in cases {
            let e = from_properties(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn reads_the_gateway_section() {
        let s = from_yaml(
            "gateway:\n  id: gw-9\n  secret: k\n  listen: 127.0.0.1:7100\n  max-frame: 1KiB\n  auth-deadline: 2s\n  modules:\n    1: { name: lobby, cluster: lobby }\n    3: { cluster: room, kind: static, key: prefix:4, choice: consistenthash }\n",
        );
        assert_eq!(s.id, "gw-9");
        assert_eq!(s.ws_listen, None);
        assert_eq!(s.max_frame, 1024);
        assert_eq!(s.auth_deadline, Duration::from_secs(2));
        assert_eq!(s.modules[&1].name, "lobby");
        assert_eq!(s.modules[&3].kind, ModuleKind::Static);
        assert_eq!(s.modules[&3].key, RouteKey::Prefix(4));
        assert_eq!(s.clusters(), vec!["lobby".to_string(), "room".to_string()]);
        assert_eq!(s.session_store, SessionStoreKind::Memory);
        assert_eq!(s.resume_window, Duration::from_secs(60));
    }

    #[test]
    fn reads_the_session_store() {
        let s = from_yaml(
            "gateway:\n  secret: k\n  session-store: redis\n  redis-url: redis://10.0.0.7:6380/2\n  resume-window: 2m\n  redis-timeout: 500ms\n",
        );
        assert_eq!(s.session_store, SessionStoreKind::Redis);
        assert_eq!(s.redis_url, "redis://10.0.0.7:6380/2");
        assert_eq!(s.resume_window, Duration::from_secs(120));
        assert_eq!(s.redis_timeout, Duration::from_millis(500));
    }

    #[test]
    fn the_websocket_and_admin_listeners_are_optional() {
        let s = from_yaml(
            "gateway:\n  secret: k\n  ws-listen: 127.0.0.1:7001\n  admin-listen: 127.0.0.1:7080\n",
        );
        assert_eq!(s.ws_listen, Some("127.0.0.1:7001".parse().unwrap()));
        assert_eq!(s.admin_listen, Some("127.0.0.1:7080".parse().unwrap()));
        let s = from_properties("gateway.secret=k\ngateway.ws-listen=\n").unwrap();
        assert_eq!(s.ws_listen, None);
        let e = from_properties("gateway.secret=k\ngateway.ws-listen=localhost\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("127.0.0.1:7001"), "{e}");
    }

    #[test]
    fn reads_limits_and_the_queue() {
        let s = from_yaml(
            "gateway:\n  secret: k\n  limits:\n    ip-connects-per-sec: 5\n    allow: [10.0.0.0/8, \"2001:db8::/32\"]\n    opcodes: { \"2.1\": 3/s burst 6 }\n    global-connects-per-sec: 0\n  queue:\n    admit-per-sec: 50\n    max-length: 10\n",
        );
        assert_eq!(s.limits.ip_connects.per_sec, 5);
        assert_eq!(s.limits.ip_connects.burst, 40, "the default burst stays");
        assert_eq!(s.limits.allow.to_string(), "10.0.0.0/8, 2001:db8::/32");
        assert!(s.limits.global_connects.is_off());
        assert_eq!(s.limits.opcodes.len(), 1);
        assert_eq!((s.queue.admit_per_sec, s.queue.max_length), (50, 10));
        assert_eq!(s.queue.max_online, 50_000);
        assert_refused(&[
            (
                "gateway.secret=k\ngateway.limits.allow=10.0.0.0/99\n",
                "gateway.limits.allow",
            ),
            (
                "gateway.secret=k\ngateway.limits.speed=1\n",
                "unknown limits setting",
            ),
            (
                "gateway.secret=k\ngateway.queue.max-online=lots\n",
                "gateway.queue.maxonline",
            ),
        ]);
    }

    #[test]
    fn mistakes_name_the_key() {
        assert_refused(&[
            ("gateway.secret=k\ngateway.colour=red\n", "gateway.colour"),
            (
                "gateway.secret=k\ngateway.modules.1.kind=weird\n",
                "modules.1.kind",
            ),
            (
                "gateway.secret=k\ngateway.modules.1.kind=static\n",
                "modules.1.cluster",
            ),
            (
                "gateway.secret=k\ngateway.modules.0.cluster=x\n",
                "module 0",
            ),
            (
                "gateway.secret=k\ngateway.modules.1.cluster=x\ngateway.modules.1.choice=nope\n",
                "modules.1.choice",
            ),
            ("gateway.id=x\n", "secret"),
            ("gateway.secret=k\ngateway.auth-deadline=3\n", "no unit"),
            (
                "gateway.secret=k\ngateway.session-store=disk\n",
                "gateway.sessionstore: memory or redis",
            ),
            (
                "gateway.secret=k\ngateway.session-store=redis\ngateway.redis-url=http://x\n",
                "redis-url",
            ),
            (
                "gateway.secret=k\ngateway.resume-window=0s\n",
                "resume-window",
            ),
            (
                "gateway.secret=k\ngateway.protect.hold-time=3s\n",
                "gateway.protect.holdtime: unknown protect setting",
            ),
            (
                "gateway.secret=k\ngateway.protect.breaker-failure-ratio=2\n",
                "protect.breakerfailureratio: a ratio",
            ),
            (
                "gateway.secret=k\ngateway.protect.max-in-flight=0\n",
                "more than zero",
            ),
            (
                "gateway.secret=k\ngateway.protect.shed-load=101\n",
                "protect.shedload",
            ),
            (
                "gateway.secret=k\ngateway.modules.1.cluster=x\ngateway.modules.1.shed=7,x\n",
                "modules.1.shed: expected opcodes",
            ),
            (
                "gateway.secret=k\ngateway.modules.1.cluster=x\ngateway.modules.1.replay=maybe\n",
                "modules.1.replay",
            ),
        ]);
    }

    #[test]
    fn reads_the_protection_settings() {
        let s = from_yaml(
            "gateway:\n  secret: k\n  protect:\n    max-in-flight: 100\n    hold-max: 5\n    hold-for: 1500ms\n    shed-load: 70\n    breaker-window: 5s\n    breaker-min-requests: 8\n    breaker-failure-ratio: 0.25\n    breaker-cool-down: 2s\n    breaker-probes: 1\n    reconnect-max: 200ms\n  modules:\n    1: { cluster: login, max-in-flight: 7 }\n    2: { cluster: shop, shed: [7, 8], replay: false }\n    3: { cluster: room, kind: static }\n",
        );
        let p = &s.protect;
        assert_eq!((p.max_in_flight, p.hold_max, p.shed_load), (100, 5, 70));
        assert_eq!(p.hold_for, Duration::from_millis(1500));
        assert_eq!(p.reconnect_max, Duration::from_millis(200));
        assert_eq!(p.breaker.window, Duration::from_secs(5));
        assert_eq!(p.breaker.min_requests, 8);
        assert_eq!(p.breaker.failure_ratio, 0.25);
        assert_eq!(p.breaker.cool_down, Duration::from_secs(2));
        assert_eq!(p.breaker.probes, 1);
        assert_eq!(p.max_in_flight(1), 7);
        assert_eq!(p.max_in_flight(2), 100, "the default");
        assert_eq!(p.shed(2), [7, 8]);
        assert!(p.shed(1).is_empty());
        assert!(p.replay(&s.modules[&1]), "stateless: replayed by default");
        assert!(!p.replay(&s.modules[&2]));
        assert!(!p.replay(&s.modules[&3]), "bound: not replayed by default");
        // Flat keys too.
        let s = from_properties(
            "gateway.secret=k\ngateway.modules.4.cluster=x\ngateway.modules.4.shed=3\n",
        )
        .unwrap();
        assert_eq!(s.protect.shed(4), [3]);
    }
}
