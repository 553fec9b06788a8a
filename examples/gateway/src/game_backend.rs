//! The example game backend behind the gateway, in-process or as the `game-backend`
//! program. Five modules, one of each binding a game needs (their opcodes and payloads,
//! for client developers, are in `docs/gateway-protocol.md`):
//!
//! - **lobby** (module 1, stateless request/response): opcode 1 answers
//!   `<account>@<backend id>`; opcode 7 answers the message's trace id
//!   ([`wire::TRACE`], stamped by the gateway); opcode 4 answers the session's role and
//!   user state as the gateway stamped them (`role=<role> state=<state>`); opcode 3 is a
//!   slow request: it answers `slept <N>` after the `N` milliseconds in its payload;
//!   anything else is echoed.
//! - **chat** (module 2, stateless, broadcast to all): opcode 1 sends the text to every
//!   player: one `bcast` per *gateway* (by its `gw` id), the gateways copy to their players.
//! - **room** (module 3, keyed by room: every payload starts with the room's name, and
//!   the gateway sends each room's requests to the room's one backend, from every
//!   gateway): opcode 1 `<room>` joins (the session joins the gateway group
//!   `room:<room>`), opcode 2 `<room>` answers the room's state
//!   (`<room> <snapshots> snapshots <members> members on <backend>`), opcode 3 `<room>`
//!   leaves, opcode 4 `<room> <text>` says something to the room (a reliable push, opcode
//!   5, `<account>: <text>`, to every member). The room pushes a snapshot
//!   (`<room> snapshot <n>`, opcode 9, unreliable) to its members through gateway
//!   fan-out at a configurable rate. A room that moves here (the gateway's `moved`
//!   command: its backend died) starts afresh with its members, its count at 0; one
//!   that moves away (`dropkey`) is dropped.
//! - **bind** (module 4, dynamic): opcode 1 binds the session's module 4 to this backend
//!   (a `bind` command), opcode 2 answers this backend's id, opcode 3 unbinds.
//! - **inventory** (module 5, static: per session, the first request binds the session
//!   to one backend): opcode 1 `<item>` puts an item in the session's bag here and
//!   answers `<n> items on <backend>`, opcode 2 answers the bag,
//!   `<item>,<item>,... on <backend>` (`empty on <backend>`).
//!
//! A room remembers each member's gateway connection. When a session is resumed (on
//! another gateway or the same one), the gateway sends `rebind` (see
//! [`wire`]) on its own connection: the member's room snapshots
//! go through that connection from then on, and the session is joined to the room's
//! group there again. When a session ends, the gateway sends `ended`: the session
//! leaves every room here at once, and its bag is dropped.
//!
//! Every request is logged (`trace` level) with its trace id, and an error answer names
//! it, so a client's complaint can be found in the backend's log.

mod handle;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use meshline::rpc::{Connection, ConnectionId, InboundRequest, Server};
use meshline::{Instance, RegistryService};

use crate::gateway::{command, wire};
use handle::handle;

/// Module ids of the example game.
pub mod modules {
    /// Stateless request/response.
    pub const LOBBY: u16 = 1;
    /// Stateless, broadcast to all.
    pub const CHAT: u16 = 2;
    /// Stateful (static binding), room snapshots by fan-out.
    pub const ROOM: u16 = 3;
    /// Dynamic binding.
    pub const BIND: u16 = 4;
    /// Static binding (per session).
    pub const INVENTORY: u16 = 5;

    /// Every module: id, name (its cluster in the examples' configurations) and kind.
    pub const ALL: [(u16, &str, &str); 5] = [
        (LOBBY, "lobby", "stateless"),
        (CHAT, "chat", "stateless"),
        (ROOM, "room", "keyed"),
        (BIND, "bind", "dynamic"),
        (INVENTORY, "inventory", "static"),
    ];
}

#[derive(Default)]
struct Room {
    /// Members (session ids) and the gateway connection each is reached through.
    members: HashMap<String, ConnectionId>,
    snapshots: u64,
}

struct State {
    id: String,
    rooms: Mutex<HashMap<String, Room>>,
    /// Each session's bag (module 5).
    bags: Mutex<HashMap<String, Vec<String>>>,
    gateways: Mutex<HashMap<ConnectionId, Connection>>,
    /// One connection per gateway id (a gateway holds one connection per cluster it
    /// reaches us through): broadcasts go once per gateway, not once per connection.
    by_gateway: Mutex<HashMap<String, Connection>>,
    requests: AtomicU64,
    fanout_sends: AtomicU64,
    rebinds: AtomicU64,
    /// Sessions the gateways said ended.
    ended: AtomicU64,
}

/// A running game backend.
pub struct GameBackend {
    server: Server,
    state: Arc<State>,
    registry: Arc<dyn RegistryService>,
    clusters: Vec<String>,
    instance: Instance,
    ticker: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for GameBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GameBackend")
            .field("id", &self.state.id)
            .field("addr", &self.server.local_addr())
            .finish()
    }
}

impl GameBackend {
    /// Starts a backend `id` on `addr`, registered under each of `clusters` in
    /// `registry`; rooms push a snapshot every `snapshot_every`.
    pub async fn start(
        id: &str,
        addr: SocketAddr,
        registry: Arc<dyn RegistryService>,
        clusters: &[&str],
        snapshot_every: Duration,
    ) -> Result<GameBackend, Box<dyn std::error::Error + Send + Sync>> {
        Self::start_versioned(id, addr, registry, clusters, snapshot_every, "1.0").await
    }

    /// [`start`](Self::start) with an application version, registered as the instance's
    /// `version` metadata (gateways give new sessions only to backends of their major
    /// version; registries whose layout keeps only `ip:port`, such as etcd3, carry none).
    pub async fn start_versioned(
        id: &str,
        addr: SocketAddr,
        registry: Arc<dyn RegistryService>,
        clusters: &[&str],
        snapshot_every: Duration,
        version: &str,
    ) -> Result<GameBackend, Box<dyn std::error::Error + Send + Sync>> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        Self::serve(id, listener, registry, clusters, snapshot_every, version).await
    }

    /// [`start_versioned`](Self::start_versioned) on a listener already bound (e.g. in
    /// another network namespace: `meshline_testkit::net::Host::bind_tcp`, then
    /// `tokio::net::TcpListener::from_std`); registered at the listener's address.
    pub async fn serve(
        id: &str,
        listener: tokio::net::TcpListener,
        registry: Arc<dyn RegistryService>,
        clusters: &[&str],
        snapshot_every: Duration,
        version: &str,
    ) -> Result<GameBackend, Box<dyn std::error::Error + Send + Sync>> {
        let state = Arc::new(State {
            id: id.to_string(),
            rooms: Mutex::new(HashMap::new()),
            bags: Mutex::new(HashMap::new()),
            gateways: Mutex::new(HashMap::new()),
            by_gateway: Mutex::new(HashMap::new()),
            requests: AtomicU64::new(0),
            fanout_sends: AtomicU64::new(0),
            rebinds: AtomicU64::new(0),
            ended: AtomicU64::new(0),
        });
        let s2 = state.clone();
        let s3 = state.clone();
        let server = Server::builder(move |req: InboundRequest| handle(s2.clone(), req))
            .on_close(move |conn, _| {
                s3.gateways
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&conn.id());
                s3.by_gateway
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .retain(|_, c| c.id() != conn.id());
            })
            .serve(listener)?;
        let local = server.local_addr();
        let instance =
            Instance::new(&local.ip().to_string(), local.port())?.with_metadata("version", version);
        for c in clusters {
            registry.register(c, &instance).await?;
        }
        let s4 = state.clone();
        let ticker = tokio::spawn(async move {
            let mut tick = tokio::time::interval(snapshot_every);
            loop {
                tick.tick().await;
                let sends: Vec<(Connection, String, u64)> = {
                    let mut rooms = s4.rooms.lock().unwrap_or_else(|p| p.into_inner());
                    let gws = s4.gateways.lock().unwrap_or_else(|p| p.into_inner());
                    let mut v = Vec::new();
                    for (name, room) in rooms.iter_mut() {
                        room.snapshots += 1;
                        // One send per gateway with members, however many members.
                        let via: HashSet<&ConnectionId> = room.members.values().collect();
                        for g in via {
                            if let Some(c) = gws.get(g) {
                                v.push((c.clone(), name.clone(), room.snapshots));
                            }
                        }
                    }
                    v
                };
                for (conn, room, n) in sends {
                    s4.fanout_sends.fetch_add(1, Ordering::Relaxed);
                    let _ = conn.try_send_oneway(
                        command("bcast", format!("{room} snapshot {n}"))
                            .with_head(wire::GROUP, format!("room:{room}"))
                            .with_head(wire::MODULE, modules::ROOM.to_string())
                            .with_head(wire::OPCODE, "9"),
                    );
                }
            }
        });
        Ok(GameBackend {
            server,
            state,
            registry,
            clusters: clusters.iter().map(|c| c.to_string()).collect(),
            instance,
            ticker,
        })
    }

    /// The listening address.
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// The backend's id.
    pub fn id(&self) -> &str {
        &self.state.id
    }

    /// Requests handled.
    pub fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::Relaxed)
    }

    /// The connections gateways hold to this backend (to push commands to them).
    pub fn gateway_connections(&self) -> Vec<Connection> {
        self.server.connections()
    }

    /// `rebind` commands received (sessions resumed on some gateway).
    pub fn rebinds(&self) -> u64 {
        self.state.rebinds.load(Ordering::Relaxed)
    }

    /// Sessions the gateways said ended (`ended` commands' sessions).
    pub fn ended(&self) -> u64 {
        self.state.ended.load(Ordering::Relaxed)
    }

    /// Fan-out sends made (one per gateway per broadcast).
    pub fn fanout_sends(&self) -> u64 {
        self.state.fanout_sends.load(Ordering::Relaxed)
    }

    /// The rooms held here: name, snapshots pushed, members.
    pub fn rooms(&self) -> Vec<(String, u64, usize)> {
        let mut v: Vec<_> = self
            .state
            .rooms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(n, r)| (n.clone(), r.snapshots, r.members.len()))
            .collect();
        v.sort();
        v
    }

    /// Unregisters and stops (in-flight requests finish within `grace`).
    pub async fn stop(self, grace: Duration) {
        for c in &self.clusters {
            let _ = self.registry.unregister(c, &self.instance).await;
        }
        self.ticker.abort();
        self.server.shutdown(grace).await;
    }

    /// Stops at once, without unregistering: a crash.
    pub fn kill(self) {
        self.ticker.abort();
        self.server.kill();
    }
}
