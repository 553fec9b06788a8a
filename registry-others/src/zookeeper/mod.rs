//! ZooKeeper backend ([`ZookeeperRegistry`]), Seata's `zk` layout.
//!
//! ## Layout
//!
//! A member of cluster `<cluster>` is the **ephemeral** node
//! `/registry/zk/<cluster>/<ip>:<port>` (Java's address form) with the data `true`; the
//! parents are persistent and created as needed. Lookup lists the children of
//! `/registry/zk/<cluster>` (a missing path is an empty cluster); child names that are
//! not addresses are skipped with a warning naming the node (truncated, at most one
//! line per cluster per 10 s: [`meshline_registry_core::redact::malformed_entry`]).
//!
//! ## Sessions and recovery
//!
//! - `server-addr` is a ZooKeeper connect string (`h1:2181,h2:2181,h3:2181`, `;` or
//!   spaces between entries accepted, a chroot suffix kept); the client fails over
//!   between the servers within one session. A server that answers nothing for the
//!   connect timeout (2 s by default; the client PINGs after 3/8 of it without a
//!   request) is left for another, with the same session, ephemeral nodes and watches:
//!   measured on an ensemble of three with the session's server blackholed, the session
//!   was on another server and a change made meanwhile in the watch 2.2 s after the cut
//!   (a follower) or 3.8-4.4 s (the leader, an election included); see
//!   `docs/faults.md` and `tests/zookeeper_ensemble.rs`.
//! - Disconnected: every watched cluster is marked stale (watchers keep the last
//!   snapshot); on reconnection the child watches fire if anything changed and the
//!   clusters are marked connected again.
//! - Session expired (by the server, or by the client after being cut off longer than
//!   the session timeout): a new session is built with jittered backoff, our ephemeral
//!   nodes are created again (a leftover node of our old session is deleted first) and
//!   every watch is re-armed and re-listed.
//! - Digest auth (`registry.zk.username` / `password`) is added to every session, and
//!   then the cluster path and our nodes are created creator-all + world-read: only
//!   that digest identity may delete or change them, anyone may read them (without
//!   credentials they are open to anyone, as Seata's Java client makes them). The shared
//!   roots `/registry` and `/registry/zk` stay open.
//! - An unregister whose delete fails (server unreachable within the connect timeout)
//!   returns the error and keeps the path as *to remove*: it is not created again
//!   after a session loss, and its delete is retried in the background until it
//!   succeeds or the client closes (close deletes it once more).
//! - Unregister and close delete a node only when one of our sessions owns it: a node
//!   at our path that another session owns (a Java TC registered on the same address)
//!   is left alone and logged.
//! - Sessions are *detached*: dropping the client does not close the session, so an
//!   [`abandon`](ZookeeperRegistry::abandon)ed or crashed registrant disappears after the
//!   session timeout; [`close`](meshline_registry_core::RegistryService::close) and drop
//!   delete our nodes explicitly.
//!
//! ## Watches
//!
//! One follow task per watched cluster (shared by every [`Watch`] on it, through
//! [`Lifecycle`]) re-arms a one-shot child watch after each event, or an existence
//! watch while the path is missing, and publishes the full child list. It ends when
//! the last `Watch` on the cluster is dropped or the client closes.
//!
//! ## Convergence (measured)
//!
//! `cargo run --release -p meshline-registry-others --features zookeeper,redis --example
//! zk_redis_convergence -- zookeeper` starts a real server (meshline-testkit), registers
//! 200 instances one by one on one client and times each from the `register` call until
//! a second client's watch shows it, then crashes a registrant three times. On the
//! 2-core development machine (load average about 2 from other builds):
//!
//! | register -> watch (200) | p50 | p99 | max |
//! |---|---|---|---|
//! | zookeeper | 2.12 ms | 9.96 ms | 19.59 ms |
//!
//! A crashed registrant (session timeout 4 s) disappeared from watches after 4.32 s,
//! 4.50 s and 4.50 s: when the server expires its session (tick 500 ms). Details in `CONVERGENCE.md`.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use meshline_registry_core::{
    Config, Instance, Lifecycle, Nearby, Registrations, RegistryError, RegistryService, Watch,
};
use zookeeper_client as zk;

use crate::common::empty_policy;

mod centre;
mod follow;
mod layout;
mod nearby;
mod session;
mod settings;
#[cfg(feature = "zookeeper-tls")]
mod tls_probe;

pub use centre::ZkCentre;
pub use layout::{cluster_path, instance_path};
pub use settings::ZkSettings;

use crate::tls::tls_feature;
use follow::watch_loop;
use layout::check_cluster;
use session::{new_session, session_loop};

const KIND: &str = "zk";

fn zk_err(server: &str, op: &str, e: zk::Error) -> RegistryError {
    RegistryError::backend(KIND, server, op.to_string(), e)
}

/// The session settings, as connect and the session loop use them.
struct Settings {
    connect_string: String,
    session_timeout: Duration,
    connect_timeout: Duration,
    auth: Option<Vec<u8>>,
    /// `registry.zk.tls.*` loaded: connect to secureClientPort with TLS.
    #[cfg_attr(not(feature = "zookeeper-tls"), allow(dead_code))]
    tls: Option<meshline_registry_core::tls::TlsMaterial>,
}

impl Settings {
    /// The session settings of `c` (`registry.zk.*` or `config.zk.*`; `prefix` names
    /// the section in messages): the connect string, the digest credentials, TLS.
    fn new(c: &ZkSettings, prefix: &str) -> Result<Settings, RegistryError> {
        let connect_string = crate::common::split_addrs(&c.server_addr).join(",");
        if connect_string.is_empty() {
            return Err(RegistryError::Config(format!(
                "{prefix}.serverAddr is empty: give a connect string, e.g. 127.0.0.1:2181"
            )));
        }
        let auth = c.username.as_ref().map(|u| {
            format!("{u}:{}", c.password.as_ref().map_or("", |p| p.expose())).into_bytes()
        });
        let tls = crate::tls::prepare(&c.tls, KIND, "zk", tls_feature!("zookeeper-tls"))?;
        Ok(Settings {
            connect_string,
            session_timeout: c.session_timeout,
            connect_timeout: c.connect_timeout,
            auth,
            tls,
        })
    }
}

/// What the registry, its session loop and its watches share.
struct Inner {
    settings: Settings,
    client: RwLock<zk::Client>,
    /// Bumped each time a new session replaces an expired one.
    generation: tokio::sync::watch::Sender<u64>,
    /// Paths of our ephemeral nodes.
    registered: Registrations<()>,
    /// Our sessions that expiries replaced (the last few): their nodes are ours to
    /// delete until the server expires them too.
    old_sessions: std::sync::Mutex<Vec<i64>>,
    life: Lifecycle,
}

/// The ZooKeeper registry (Seata `zk` layout). See the [module docs](self).
pub struct ZookeeperRegistry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ZookeeperRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZookeeperRegistry")
            .field("connect_string", &self.inner.settings.connect_string)
            .field("life", &self.inner.life)
            .finish()
    }
}
impl ZookeeperRegistry {
    /// Connects with `registry.zk.*` ([`ZkSettings`]: connect string, session and
    /// connect timeouts, digest credentials) and `registry.empty-protection`.
    ///
    /// Fails when no session can be established within the session timeout; the error
    /// names the connect string and what a TCP connect to each server said (e.g.
    /// `127.0.0.1:2181: Connection refused`), which the client library does not report.
    pub async fn connect(config: &Config) -> Result<Self, RegistryError> {
        let settings = Settings::new(&ZkSettings::from_config(config)?, "registry.zk")?;
        let client = new_session(&settings).await?;
        tracing::info!(
            registry = KIND,
            session = %client.session_id(),
            timeout = ?client.session_timeout(),
            "zookeeper session established"
        );
        let inner = Arc::new(Inner {
            settings,
            client: RwLock::new(client),
            generation: tokio::sync::watch::Sender::new(0),
            registered: Registrations::new(),
            old_sessions: std::sync::Mutex::new(Vec::new()),
            life: Lifecycle::new(KIND, empty_policy(config)),
        });
        tokio::spawn(session_loop(inner.clone()));
        Ok(ZookeeperRegistry { inner })
    }

    /// The id of the current session (changes after an expiry).
    pub fn session_id(&self) -> i64 {
        self.inner.client().session_id().0
    }

    /// Stops every background task at once **without** deleting our nodes, as if the
    /// process had crashed: they disappear when the server expires the session. Used by
    /// tests that measure how fast watchers notice a dead registrant.
    pub fn abandon(&self) {
        self.inner.life.abandon();
    }
}

impl Inner {
    /// A client-library error of `op`, naming our servers.
    fn err(&self, op: &str, e: zk::Error) -> RegistryError {
        zk_err(&self.settings.connect_string, op, e)
    }

    /// The error of `op` that did not finish within `after`, naming our servers.
    fn timed_out(&self, op: &'static str, after: Duration) -> RegistryError {
        RegistryError::timeout(KIND, &self.settings.connect_string, op, after)
    }

    /// How long an unregister (or one background retry of it) waits: the connect
    /// timeout, at least 1 s. While disconnected the client library queues requests
    /// until it reconnects or gives the session up, and the registrations lock is held
    /// meanwhile.
    fn op_timeout(&self) -> Duration {
        self.settings.connect_timeout.max(Duration::from_secs(1))
    }

    /// True when `session` is one of ours that an expiry replaced.
    fn was_ours(&self, session: i64) -> bool {
        self.old_sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&session)
    }

    /// Remembers `session` (being replaced) as ours, keeping the last few.
    fn retire_session(&self, session: i64) {
        let mut old = self.old_sessions.lock().unwrap_or_else(|p| p.into_inner());
        if old.len() >= 16 {
            old.remove(0);
        }
        old.push(session);
    }

    fn client(&self) -> zk::Client {
        self.client
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The ACLs of the nodes we create: creator-all + world-read when credentials are
    /// configured (only that digest user may change or delete them; everyone may
    /// read), else open to anyone, as Seata's Java client does without credentials.
    fn acls(&self) -> zk::Acls<'static> {
        if self.settings.auth.is_some() {
            zk::Acls::new(&CREATOR_ALL_WORLD_READ)
        } else {
            zk::Acls::anyone_all()
        }
    }

    /// Waits until the node at `path`, owned by another session `owner`, is gone: at
    /// most the session timeout plus the connect timeout and a second (the longest an
    /// expired owner's node can outlive it, with our own session's timeout as the
    /// bound). A node still there then belongs to a live session: an error naming it.
    async fn await_foreign_node(
        &self,
        client: &zk::Client,
        path: &str,
        owner: i64,
    ) -> Result<(), RegistryError> {
        tracing::warn!(
            registry = KIND,
            path,
            owner = format!("{owner:#x}"),
            "another session owns our node; waiting for it to expire (it is not deleted)"
        );
        let wait = self
            .settings
            .session_timeout
            .saturating_add(self.op_timeout())
            .saturating_add(Duration::from_secs(1));
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match client.check_stat(path).await {
                Ok(None) => return Ok(()),
                Ok(Some(stat)) if stat.ephemeral_owner != owner => return Ok(()),
                Ok(Some(_)) => {}
                Err(e) => return Err(self.err("stat", e)),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(RegistryError::unavailable(
                    KIND,
                    &self.settings.connect_string,
                    format!(
                        "{path} belongs to another live session ({owner:#x}) after {wait:?}: \
                         another process is registered at this address; it is not deleted"
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Creates our ephemeral node at `path` (and its parents). A node left by an older
    /// session of ours is replaced; another session's is waited for, never deleted.
    ///
    /// With credentials, the cluster path (whose ACL decides who may delete its
    /// children) and our node get [`acls`](Self::acls); the shared roots above stay
    /// open so that other clusters' registrants can create their own.
    async fn create_ephemeral(&self, client: &zk::Client, path: &str) -> Result<(), RegistryError> {
        let parent = &path[..path.rfind('/').unwrap_or(0)];
        let root = &parent[..parent.rfind('/').unwrap_or(0)];
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let dir = zk::CreateMode::Persistent.with_acls(self.acls());
        let mkdirs = || async {
            if !root.is_empty() {
                client
                    .mkdir(root, &open)
                    .await
                    .map_err(|e| self.err("create parents", e))?;
            }
            client
                .mkdir(parent, &dir)
                .await
                .map_err(|e| self.err("create parents", e))
        };
        mkdirs().await?;
        let eph = zk::CreateMode::Ephemeral.with_acls(self.acls());
        for _ in 0..3 {
            match client.create(path, b"true", &eph).await {
                Ok(_) => return Ok(()),
                Err(zk::Error::NodeExists) => match client.check_stat(path).await {
                    Ok(Some(stat)) if stat.ephemeral_owner == client.session_id().0 => {
                        return Ok(());
                    }
                    Ok(Some(stat)) if self.was_ours(stat.ephemeral_owner) => {
                        tracing::info!(
                            registry = KIND,
                            path,
                            owner = stat.ephemeral_owner,
                            "replacing a node left by an older session of ours"
                        );
                        match client.delete(path, Some(stat.version)).await {
                            Ok(()) | Err(zk::Error::NoNode) => {}
                            Err(zk::Error::BadVersion) => {}
                            Err(e) => return Err(self.err("delete stale node", e)),
                        }
                    }
                    Ok(Some(stat)) => {
                        // Another session's node (a Java TC on this address, or the
                        // process that had it before us): never deleted. A dead owner's
                        // node goes when its session expires; wait that long for it.
                        self.await_foreign_node(client, path, stat.ephemeral_owner)
                            .await?;
                    }
                    Ok(None) => {}
                    Err(e) => return Err(self.err("stat", e)),
                },
                Err(zk::Error::NoNode) => mkdirs().await?,
                Err(e) => return Err(self.err("create", e)),
            }
        }
        Err(RegistryError::unavailable(
            KIND,
            &self.settings.connect_string,
            format!("could not create {path}: it keeps changing under us"),
        ))
    }

    /// Deletes the node at `path` if one of our sessions (the current one, or one an
    /// expiry replaced) owns it, within `limit`. A node another session owns (a Java TC
    /// registered on the same address, or anyone's persistent node) is left alone and
    /// logged; a missing node is fine.
    async fn delete_ours(&self, path: &str, limit: Duration) -> Result<(), RegistryError> {
        let client = self.client();
        let deleting = async {
            let Some(stat) = client
                .check_stat(path)
                .await
                .map_err(|e| self.err("stat", e))?
            else {
                return Ok(());
            };
            let ours = client.session_id().0;
            if stat.ephemeral_owner != ours && !self.was_ours(stat.ephemeral_owner) {
                tracing::warn!(
                    registry = KIND,
                    path,
                    owner = stat.ephemeral_owner,
                    session = ours,
                    "not deleting a node another session owns"
                );
                return Ok(());
            }
            match client.delete(path, Some(stat.version)).await {
                Ok(()) | Err(zk::Error::NoNode) => Ok(()),
                Err(e) => Err(self.err("delete", e)),
            }
        };
        match tokio::time::timeout(limit, deleting).await {
            Ok(r) => r,
            Err(_) => Err(self.timed_out("delete", limit)),
        }
    }
}

/// Creator-all (the session's digest identity) + world-read.
static CREATOR_ALL_WORLD_READ: [zk::Acl; 2] = [
    zk::Acl::new_const(zk::Permission::ALL, "auth", ""),
    zk::Acl::new_const(zk::Permission::READ, "world", "anyone"),
];

#[async_trait]
impl RegistryService for ZookeeperRegistry {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn register(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        self.inner.life.check_open()?;
        check_cluster(cluster)?;
        let path = instance_path(cluster, instance);
        let mut registered = self.inner.registered.lock().await;
        self.inner
            .create_ephemeral(&self.inner.client(), &path)
            .await?;
        // A registration again cancels a pending background delete of the path.
        self.inner.registered.removal_done(&path);
        registered.insert(path.clone(), ());
        tracing::info!(registry = KIND, cluster, %instance, path, "registered");
        Ok(())
    }

    async fn unregister(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        self.inner.life.check_open()?;
        check_cluster(cluster)?;
        let path = instance_path(cluster, instance);
        // Not forgotten until ZooKeeper confirms the delete: our session keeps the node
        // alive, so a failed delete would otherwise leave it for as long as we run.
        let delete = |inner: Arc<Inner>, path: String| async move {
            inner.delete_ours(&path, inner.op_timeout()).await
        };
        Registrations::unregister_with(&self.inner, |i| (&i.life, &i.registered), &path, delete)
            .await
    }

    async fn lookup(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        self.inner.life.check_open()?;
        check_cluster(cluster)?;
        let v = self.inner.list(cluster).await?;
        Ok(meshline_registry_core::sorted_unique(v).0.to_vec())
    }

    async fn watch(&self, cluster: &str) -> Result<Watch, RegistryError> {
        self.inner.life.check_open()?;
        check_cluster(cluster)?;
        // The first list is done here so that errors reach the caller and the watch's
        // first value is the current membership.
        let inner = &self.inner;
        let follower = inner.clone();
        inner
            .life
            .watch(
                cluster,
                || async { Ok((inner.list(cluster).await?, ())) },
                move |(), scope| watch_loop(follower, scope),
            )
            .await
    }

    async fn close(&self) -> Result<(), RegistryError> {
        self.inner.life.close(delete_all(&self.inner)).await
    }

    /// The other clusters under `/registry/zk` with members (at most 300, each listed
    /// within the operation timeout): each is selected by mapping the group to it.
    async fn nearby(&self, cluster: &str) -> Result<Vec<Nearby>, RegistryError> {
        self.inner.life.check_open()?;
        self.inner.nearby(cluster).await
    }
}

/// Deletes every node we created (close and drop); nodes another session owns are
/// left alone.
async fn delete_all(inner: &Inner) -> Result<(), RegistryError> {
    inner
        .registered
        .remove_all(KIND, |path, ()| async move {
            inner
                .delete_ours(&path, inner.settings.session_timeout)
                .await
        })
        .await
}

impl Drop for ZookeeperRegistry {
    /// Best effort: deletes our nodes now rather than after the session timeout.
    fn drop(&mut self) {
        self.inner
            .life
            .close_on_drop_with(&self.inner, |inner| async move { delete_all(&inner).await });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ensemble in `registry.zk.serverAddr`, as Seata's Java client takes it (comma
    /// separated, spaces allowed) reaches the client library as one connect string with
    /// every server, its chroot kept.
    #[test]
    fn every_server_of_an_ensemble_reaches_the_connect_string() {
        let settings = |addr: &str| {
            let config = meshline_testkit::config_of(&[("registry.zk.serverAddr", addr)], &[]);
            Settings::new(&ZkSettings::from_config(&config).unwrap(), "registry.zk")
                .unwrap()
                .connect_string
        };
        assert_eq!(
            settings("10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181"),
            "10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181"
        );
        assert_eq!(
            settings(" zk1:2181 , zk2:2181,zk3:2181/seata "),
            "zk1:2181,zk2:2181,zk3:2181/seata"
        );
        assert_eq!(settings("zk1:2181;zk2:2181"), "zk1:2181,zk2:2181");
    }
}
