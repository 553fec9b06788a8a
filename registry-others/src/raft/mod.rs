//! Seata 2.x raft backend (`registry.type = raft`), read-only, as Seata's client.
//!
//! # What a Seata raft cluster offers
//!
//! In raft mode the TCs are the registry: they form raft groups and serve the group's
//! metadata over their HTTP (control) port. The server registers nothing anywhere.
//! Read from Seata's sources (2.3.0-SNAPSHOT, `0b9d7c9a`):
//! `discovery/seata-discovery-raft/src/main/java/org/apache/seata/discovery/registry/raft/RaftRegistryServiceImpl.java`
//! (the client), `server/src/main/java/org/apache/seata/server/controller/ClusterController.java`
//! and `server/.../cluster/manager/ClusterWatcherManager.java` (the endpoints),
//! `common/.../metadata/{MetadataResponse,Node,ClusterRole,Metadata}.java` (the JSON),
//! `console/.../controller/AuthController.java`, `console/.../filter/JwtAuthenticationTokenFilter.java`
//! and `console/.../security/JwtAuthenticationEntryPoint.java` (the login).
//!
//! - `GET /metadata/v1/cluster?group=<g>` answers `{nodes:[Node], storeMode, term}`;
//!   each `Node` has `control` (HTTP) and `transaction` (RPC) endpoints `{host,port}`,
//!   `role` (`LEADER`, `FOLLOWER`, `LEARNER`, `MEMBER`), `weight`, `group`,
//!   `metadata`. `nodes` is empty when the TC has no such group or no leader.
//! - `POST /metadata/v1/watch`, form `<group>=<term>`: held up to 28 s, answered 200
//!   as soon as the group's term moves past ours (at once when it already has), 304
//!   when nothing changed.
//! - `POST /api/v1/auth/login` with `{"username","password"}`: HTTP 200 and
//!   `{"code":"200","data":"Bearer <jwt>"}`, or `code` `"401"` ("Login failed") for a
//!   wrong password. The token goes in the `Authorization` header; an expired or
//!   foreign one gets HTTP 401.
//!
//! # What meshline does
//!
//! - **The name looked up is the raft group**: the tx group's `vgroupMapping` value
//!   (Seata's server names its group with `server.raft.group`, default `default`).
//!   Seata's Java client asks with an empty `group` (the TC's own default group) and
//!   files the answer under the mapping value; meshline asks for the mapping value,
//!   so it must equal the TCs' `server.raft.group`, as Seata's documentation sets it.
//! - **Who is listed**: with `storeMode` `raft` only the **leader** (Seata's
//!   `aliveLookup` in raft mode: only the leader serves transactions; a follower
//!   would refuse them). With another store mode (`db`, `redis`, `file`: the raft
//!   group only carries the metadata) every node, as Seata's `aliveLookup` falls back
//!   to the whole list. While a group has no leader the TC sends no nodes: the list is
//!   empty and `registry.empty-protection` keeps the last one.
//! - **Following**: one watch long poll per watched group (ours carries the term of
//!   our last read; a 200 means read again), plus a forced read every
//!   `metadataMaxAgeMs`. A leader change moves the term, so the watch returns at once
//!   and the new leader is listed one metadata read later.
//! - **Fail-over**: every call goes to the TC that answered last, then to the control
//!   addresses the metadata named, then to `serverAddr` in order. When none answers,
//!   watches go stale (keeping their list) and retry with backoff.
//! - **Login** when both `username` and `password` are set: before the first call, again
//!   at 90 % of `tokenValidityInMilliseconds` (so the TC never sees an expired token),
//!   and at once on a 401/403 (the call is then repeated once). A refused login is an
//!   error naming the TC and the user, never the password.
//! - **Read-only**: `register`/`unregister` return [`RegistryError::ReadOnly`] (a raft
//!   TC is a member by being in the raft group, not by registering).
//!
//! # Settings
//!
//! `registry.raft.serverAddr` (comma list of TC HTTP addresses, `host:port` or
//! `http(s)://`; default `127.0.0.1:7091`), `username`, `password`,
//! `tokenValidityInMilliseconds`, `metadataMaxAgeMs`, `maxBodyBytes`, `tls.*`
//! (cargo feature `raft-tls`), and `registry.empty-protection`. See [`RaftSettings`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use meshline_registry_core::{Config, Instance, Lifecycle, RegistryError, RegistryService, Watch};

use crate::common::empty_policy;
use crate::seata_http::follow::{Source, follow};
use crate::seata_http::{Login, Servers};
use crate::tls::tls_feature;

mod client;
mod follow;
mod metadata;
mod settings;

pub use settings::RaftSettings;

const KIND: &str = "raft";

/// A client of a Seata raft cluster (see the [module docs](self)).
///
/// Cheap to share behind an `Arc`; every method takes `&self`. One follow task per
/// watched group; each ends when the last [`Watch`] on its group is dropped, and all
/// end on [`close`](RegistryService::close) or drop.
pub struct RaftRegistry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RaftRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftRegistry")
            .field("servers", &self.inner.servers.shown())
            .field("login", &self.inner.login)
            .finish()
    }
}

/// What the registry and its follow tasks share.
struct Inner {
    servers: Servers,
    /// The control addresses the last metadata named (base URLs).
    learned: Mutex<Vec<String>>,
    http: reqwest::Client,
    tls: bool,
    login: Login,
    metadata_max_age: Duration,
    life: Lifecycle,
}

impl RaftRegistry {
    /// Reads `registry.raft.*`, logs in (when a user is configured) and reads the TCs'
    /// default group once, so a wrong address or password fails here.
    pub async fn connect(config: &Config) -> Result<Self, RegistryError> {
        let s = RaftSettings::from_config(config)?;
        let (servers, http, tls) = crate::seata_http::connect_parts(
            &s.server_addr,
            &s.tls,
            "registry.raft.serverAddr",
            KIND,
            "raft",
            tls_feature!("raft-tls"),
        )?;
        let inner = Arc::new(Inner {
            servers,
            learned: Mutex::new(Vec::new()),
            http: http.clone(),
            tls,
            login: Login::new(
                s.username.clone(),
                s.password.clone(),
                s.token_validity,
                "registry.raft",
                http,
                s.max_body_bytes,
            ),
            metadata_max_age: s.metadata_max_age,
            life: Lifecycle::new(KIND, empty_policy(config)),
        });
        // The TC's default group (blank `group`): reachability and the login.
        inner
            .metadata("")
            .await
            .map_err(|e| e.into_registry(&inner.servers.shown(), "connect"))?;
        Ok(RaftRegistry { inner })
    }

    /// Stops every background task at once (there is nothing to deregister): for tests
    /// shared with the other backends.
    pub fn abandon(&self) {
        self.inner.life.abandon();
    }
}

impl Drop for RaftRegistry {
    /// Ends the follow tasks and this registry's watches.
    fn drop(&mut self) {
        self.inner.life.close_on_drop(|| async { Ok(()) });
    }
}

#[async_trait]
impl RegistryService for RaftRegistry {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn register(&self, _cluster: &str, _instance: &Instance) -> Result<(), RegistryError> {
        self.inner.life.check_open()?;
        Err(RegistryError::ReadOnly {
            kind: KIND,
            op: "register",
        })
    }

    async fn unregister(&self, _cluster: &str, _instance: &Instance) -> Result<(), RegistryError> {
        self.inner.life.check_open()?;
        Err(RegistryError::ReadOnly {
            kind: KIND,
            op: "unregister",
        })
    }

    async fn lookup(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        self.inner.life.check_open()?;
        self.inner
            .metadata(cluster)
            .await
            .map(|m| m.listed())
            .map_err(|e| {
                e.into_registry(&self.inner.servers.shown(), &format!("lookup `{cluster}`"))
            })
    }

    async fn watch(&self, cluster: &str) -> Result<Watch, RegistryError> {
        let inner = &self.inner;
        let follower = inner.clone();
        let first_read = || async {
            inner
                .read(cluster)
                .await
                .map_err(|e| e.into_registry(&inner.servers.shown(), &format!("watch `{cluster}`")))
        };
        inner
            .life
            .watch(cluster, first_read, move |term, scope| {
                follow(follower, scope, term)
            })
            .await
    }

    async fn close(&self) -> Result<(), RegistryError> {
        self.inner.life.close(async { Ok(()) }).await
    }
}
