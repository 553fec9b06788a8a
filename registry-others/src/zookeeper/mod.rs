//! ZooKeeper backend ([`ZookeeperRegistry`]), Seata's `zk` layout.
//!
//! ## Layout
//!
//! A member of cluster `<cluster>` is the **ephemeral** node
//! `/registry/zk/<cluster>/<ip>:<port>` (Java's address form) with the data `true`; the
//! parents are persistent and created as needed. Lookup lists the children of
//! `/registry/zk/<cluster>` (a missing path is an empty cluster); child names that are
//! not addresses are skipped with a warning naming the node.
//!
//! ## Sessions and recovery
//!
//! - `server-addr` is a ZooKeeper connect string (`h1:2181,h2:2181,h3:2181`); the client
//!   fails over between the servers within one session.
//! - Disconnected: every watched cluster is marked stale (watchers keep the last
//!   snapshot); on reconnection the child watches fire if anything changed and the
//!   clusters are marked connected again.
//! - Session expired (by the server, or by the client after being cut off longer than
//!   the session timeout): a new session is built with jittered backoff, our ephemeral
//!   nodes are created again (a leftover node of our old session is deleted first) and
//!   every watch is re-armed and re-listed.
//! - Digest auth (`registry.zk.username` / `password`) is added to every session.
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
    Config, Instance, Lifecycle, Registrations, RegistryError, RegistryService, Watch,
};
use zookeeper_client as zk;

use crate::common::empty_policy;

mod follow;
mod layout;
mod session;
mod settings;

pub use layout::{cluster_path, instance_path};
pub use settings::ZkSettings;

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
    tls: Option<meshline_registry_core::tls::TlsMaterial>,
}

/// What the registry, its session loop and its watches share.
struct Inner {
    settings: Settings,
    client: RwLock<zk::Client>,
    /// Bumped each time a new session replaces an expired one.
    generation: tokio::sync::watch::Sender<u64>,
    /// Paths of our ephemeral nodes.
    registered: Registrations<()>,
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
        let c = &ZkSettings::from_config(config)?;
        let connect_string = crate::common::split_addrs(&c.server_addr).join(",");
        if connect_string.is_empty() {
            return Err(RegistryError::Config(
                "registry.zk.serverAddr is empty: give a connect string, e.g. 127.0.0.1:2181"
                    .into(),
            ));
        }
        let auth = c
            .username
            .as_ref()
            .map(|u| format!("{u}:{}", c.password.clone().unwrap_or_default()).into_bytes());
        let tls = crate::tls::prepare(
            &c.tls,
            KIND,
            "zk",
            cfg!(feature = "zookeeper-tls"),
            "zookeeper-tls",
        )?;
        let settings = Settings {
            connect_string,
            session_timeout: c.session_timeout,
            connect_timeout: c.connect_timeout,
            auth,
            tls,
        };
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

    fn client(&self) -> zk::Client {
        self.client
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Creates our ephemeral node at `path` (and its parents). A node left by an older
    /// session of ours is replaced.
    async fn create_ephemeral(&self, client: &zk::Client, path: &str) -> Result<(), RegistryError> {
        let parent = &path[..path.rfind('/').unwrap_or(0)];
        let dir = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        client
            .mkdir(parent, &dir)
            .await
            .map_err(|e| self.err("create parents", e))?;
        let eph = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
        for _ in 0..3 {
            match client.create(path, b"true", &eph).await {
                Ok(_) => return Ok(()),
                Err(zk::Error::NodeExists) => match client.check_stat(path).await {
                    Ok(Some(stat)) if stat.ephemeral_owner == client.session_id().0 => {
                        return Ok(());
                    }
                    Ok(Some(stat)) => {
                        tracing::info!(
                            registry = KIND,
                            path,
                            owner = stat.ephemeral_owner,
                            "replacing a node left by an older session"
                        );
                        match client.delete(path, Some(stat.version)).await {
                            Ok(()) | Err(zk::Error::NoNode) => {}
                            Err(zk::Error::BadVersion) => {}
                            Err(e) => return Err(self.err("delete stale node", e)),
                        }
                    }
                    Ok(None) => {}
                    Err(e) => return Err(self.err("stat", e)),
                },
                Err(zk::Error::NoNode) => {
                    client
                        .mkdir(parent, &dir)
                        .await
                        .map_err(|e| self.err("create parents", e))?;
                }
                Err(e) => return Err(self.err("create", e)),
            }
        }
        Err(RegistryError::unavailable(
            KIND,
            &self.settings.connect_string,
            format!("could not create {path}: it keeps changing under us"),
        ))
    }
}

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
        registered.insert(path.clone(), ());
        tracing::info!(registry = KIND, cluster, %instance, path, "registered");
        Ok(())
    }

    async fn unregister(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        self.inner.life.check_open()?;
        check_cluster(cluster)?;
        let path = instance_path(cluster, instance);
        let mut registered = self.inner.registered.lock().await;
        registered.remove(&path);
        match self.inner.client().delete(&path, None).await {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(self.inner.err("delete", e)),
        }
        tracing::info!(registry = KIND, cluster, %instance, path, "unregistered");
        Ok(())
    }

    async fn lookup(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        self.inner.life.check_open()?;
        check_cluster(cluster)?;
        let mut v = self.inner.list(cluster).await?;
        v.sort_by(|a, b| a.key().cmp(b.key()));
        v.dedup_by(|a, b| a.key() == b.key());
        Ok(v)
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
}

/// Deletes every node we created (close and drop).
async fn delete_all(inner: &Inner) -> Result<(), RegistryError> {
    let client = inner.client();
    let client = &client;
    let limit = inner.settings.session_timeout;
    inner
        .registered
        .remove_all(KIND, |path, ()| async move {
            match tokio::time::timeout(limit, client.delete(&path, None)).await {
                Ok(Ok(())) | Ok(Err(zk::Error::NoNode)) => Ok(()),
                Ok(Err(e)) => Err(inner.err("delete", e)),
                Err(_) => Err(RegistryError::timeout(
                    KIND,
                    &inner.settings.connect_string,
                    "delete",
                    limit,
                )),
            }
        })
        .await
}

impl Drop for ZookeeperRegistry {
    /// Best effort: deletes our nodes now rather than after the session timeout.
    fn drop(&mut self) {
        let inner = self.inner.clone();
        self.inner
            .life
            .close_on_drop(move || async move { delete_all(&inner).await });
    }
}
