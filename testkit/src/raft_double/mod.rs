//! A Seata raft cluster double: the HTTP API a Seata 2.x TC serves in raft mode, on one
//! loopback port per TC, all sharing one cluster state.
//!
//! No Seata server (Java) runs on the build machines, so the `raft` backend is tested
//! against this double, written from Seata's sources (2.3.0-SNAPSHOT, `0b9d7c9a`):
//! `server/src/main/java/org/apache/seata/server/controller/ClusterController.java`,
//! `server/src/main/java/org/apache/seata/server/cluster/manager/ClusterWatcherManager.java`,
//! `common/src/main/java/org/apache/seata/common/metadata/{MetadataResponse,Node,ClusterRole}.java`,
//! `console/src/main/java/org/apache/seata/console/controller/AuthController.java`,
//! `console/src/main/java/org/apache/seata/console/filter/JwtAuthenticationTokenFilter.java`,
//! `console/src/main/java/org/apache/seata/console/security/JwtAuthenticationEntryPoint.java`
//! and `common/src/main/java/org/apache/seata/common/result/{Code,Result,SingleResult}.java`.
//!
//! - `GET /metadata/v1/cluster?group=` answers a `MetadataResponse`
//!   `{nodes, storeMode, term}`; a blank group is the TC's own (`default`); an unknown
//!   group has `nodes: null, storeMode: null, term: 0`, a group without a leader
//!   `nodes: null` (the controller fills nodes only when it knows a leader).
//! - `POST /metadata/v1/watch`, form `<group>=<term>` (and `timeout`, ms, default
//!   28,000): 200 at once when a group's term is past the client's, else when it moves
//!   past it; 304 when the hold runs out.
//! - `POST /api/v1/auth/login` `{"username","password"}`: HTTP 200 with
//!   `{"code":"200","data":"Bearer <token>"}` or `{"code":"401","message":"Login failed"}`.
//!   With [`RaftDoubleOptions::credentials`] set, the metadata endpoints want
//!   `Authorization: Bearer <token>` of an unexpired token (HTTP 401 otherwise), as
//!   Spring Security with Seata's JWT filter. Tokens are JWT-shaped random strings,
//!   valid for [`RaftDoubleOptions::token_validity`].
//!
//! The term moves on every change the test makes (a leader change, a node added or
//! removed): the TC publishes a `ClusterChangeEvent` with the raft term on such
//! changes, which is what wakes the watches. Stopping a node closes its connections
//! (its watches too); restarting it keeps the cluster state, as a TC keeps its raft log.

mod routes;
mod state;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};

use crate::Result;
use crate::console_auth::guard;
use crate::http_double::{Built, HttpDouble};
use state::{NodeDef, State};

/// Settings of a [`RaftDouble`].
#[derive(Debug, Clone)]
pub struct RaftDoubleOptions {
    /// How many TC HTTP servers (each its own free loopback port).
    pub nodes: usize,
    /// `storeMode` in the answers: `raft` (clients list the leader only) or another
    /// (`db`: clients list every node).
    pub store_mode: String,
    /// The group a blank `group` means (`server.raft.group`).
    pub default_group: String,
    /// Console user and password; `None`: no login wanted.
    pub credentials: Option<(String, String)>,
    /// Lifetime of an issued token.
    pub token_validity: Duration,
    /// How long a watch is held when the client sends no `timeout`.
    pub watch_hold: Duration,
}

impl Default for RaftDoubleOptions {
    fn default() -> Self {
        RaftDoubleOptions {
            nodes: 3,
            store_mode: "raft".into(),
            default_group: "default".into(),
            credentials: None,
            token_validity: Duration::from_millis(1_740_000),
            watch_hold: Duration::from_millis(28_000),
        }
    }
}

/// A running raft cluster double. Dropping it stops every node.
pub struct RaftDouble {
    servers: Vec<HttpDouble>,
    state: Arc<State>,
}

impl std::fmt::Debug for RaftDouble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftDouble")
            .field("control", &self.control_addrs())
            .finish()
    }
}

fn parse_addr(a: &str) -> (String, u16) {
    let (h, p) = a.rsplit_once(':').unwrap_or((a, "0"));
    (
        h.trim_start_matches('[').trim_end_matches(']').to_string(),
        p.parse().unwrap_or(0),
    )
}

impl RaftDouble {
    /// Starts `opts.nodes` TC HTTP servers on free loopback ports.
    pub fn start(opts: RaftDoubleOptions) -> Result<Self> {
        let n = opts.nodes.max(1);
        let state = Arc::new(State::new(opts));
        let mut servers = Vec::new();
        for _ in 0..n {
            let s = state.clone();
            servers.push(HttpDouble::start("raft", 0, move || build(s.clone()))?);
        }
        Ok(RaftDouble { servers, state })
    }

    /// The TCs' control (HTTP) addresses, `127.0.0.1:port`.
    pub fn control_addrs(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.addr().to_string()).collect()
    }

    /// The address of TC `i`.
    pub fn addr(&self, i: usize) -> SocketAddr {
        self.servers[i].addr()
    }

    /// `registry.raft.serverAddr`: every TC, comma-separated.
    pub fn server_addr(&self) -> String {
        self.control_addrs().join(",")
    }

    /// Sets `group`'s members: transaction addresses (`ip:port`), node `i` with the
    /// control address of TC `i` (modulo the TC count), `leader` the index of the
    /// leader (`None`: no leader, an election). Returns the new term.
    pub fn set_members(&self, group: &str, transaction: &[&str], leader: Option<usize>) -> i64 {
        let controls = self.control_addrs();
        let nodes: Vec<NodeDef> = transaction
            .iter()
            .enumerate()
            .map(|(i, t)| NodeDef {
                control: parse_addr(&controls[i % controls.len()]),
                transaction: parse_addr(t),
                role: if Some(i) == leader {
                    "LEADER"
                } else {
                    "FOLLOWER"
                },
            })
            .collect();
        self.state.change(group, |g| g.nodes = nodes)
    }

    /// Makes the node with transaction address `transaction` the leader of `group`
    /// (the old leader becomes a follower): a leader change. Returns the new term.
    pub fn set_leader(&self, group: &str, transaction: &str) -> i64 {
        let t = parse_addr(transaction);
        self.state.change(group, |g| {
            for n in &mut g.nodes {
                n.role = if n.transaction == t {
                    "LEADER"
                } else {
                    "FOLLOWER"
                };
            }
        })
    }

    /// Adds a node to `group` (the leader when the group has none; else a follower).
    pub fn add_node(&self, group: &str, transaction: &str) -> i64 {
        let t = parse_addr(transaction);
        let controls = self.control_addrs();
        self.state.change(group, |g| {
            if g.nodes.iter().any(|n| n.transaction == t) {
                return;
            }
            let leader = g.nodes.iter().any(|n| n.role == "LEADER");
            g.nodes.push(NodeDef {
                control: parse_addr(&controls[g.nodes.len() % controls.len()]),
                transaction: t,
                role: if leader { "FOLLOWER" } else { "LEADER" },
            });
        })
    }

    /// Removes a node from `group`; when it led, the first follower left is elected.
    pub fn remove_node(&self, group: &str, transaction: &str) -> i64 {
        let t = parse_addr(transaction);
        self.state.change(group, |g| {
            g.nodes.retain(|n| n.transaction != t);
            if !g.nodes.iter().any(|n| n.role == "LEADER")
                && let Some(n) = g.nodes.first_mut()
            {
                n.role = "LEADER";
            }
        })
    }

    /// Adds malformed nodes to `group`'s answers (round 0: port 0 and no transaction
    /// endpoint; other rounds: an empty host and a port past 65535).
    pub fn put_garbage(&self, group: &str, round: u32) -> i64 {
        use serde_json::json;
        let bad = if round == 0 {
            vec![
                json!({"transaction": {"host": "10.66.0.1", "port": 0}, "role": "LEADER"}),
                json!({"control": {"host": "10.66.0.2", "port": 7091}, "role": "FOLLOWER"}),
            ]
        } else {
            vec![
                json!({"transaction": {"host": "", "port": 8091}, "role": "FOLLOWER"}),
                json!({"transaction": {"host": "10.66.0.3", "port": 70000 + round}}),
                json!("not a node"),
            ]
        };
        self.state.change(group, |g| g.garbage.extend(bad))
    }

    /// `group`'s current term (0 when unknown).
    pub fn term(&self, group: &str) -> i64 {
        self.state.term(group)
    }

    /// Invalidates every issued token: the next call with one gets HTTP 401.
    pub fn expire_tokens(&self) {
        self.state.auth.expire();
    }

    /// How many logins succeeded so far.
    pub fn logins(&self) -> usize {
        self.state.auth.logins()
    }

    /// How many calls were refused with HTTP 401 so far.
    pub fn refused(&self) -> usize {
        self.state.auth.refused()
    }

    /// Stops TC `i`: its connections (held watches too) close.
    pub fn stop_node(&mut self, i: usize) {
        self.servers[i].stop();
    }

    /// Starts TC `i` again on its port (the cluster state is kept).
    pub fn restart_node(&mut self, i: usize) -> Result<()> {
        self.servers[i].restart()
    }

    /// Stops every TC.
    pub fn stop(&mut self) {
        for s in &mut self.servers {
            s.stop();
        }
    }

    /// Starts every TC again (the cluster state is kept).
    pub fn restart(&mut self) -> Result<()> {
        for s in &mut self.servers {
            s.restart()?;
        }
        Ok(())
    }
}

fn build(state: Arc<State>) -> Built {
    let router = Router::new()
        .route("/metadata/v1/cluster", get(routes::cluster))
        .route("/metadata/v1/watch", post(routes::watch))
        .route_layer(from_fn_with_state(state.auth.clone(), guard))
        .route("/api/v1/auth/login", post(routes::login))
        .fallback(routes::not_found)
        .with_state(state);
    Built {
        router,
        background: Box::pin(std::future::pending()),
    }
}
