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
use meshline_registry_core::probe::{ConnectFailure, probe_targets};
use meshline_registry_core::{
    Backoff, Config, Instance, Lifecycle, Registrations, RegistryError, RegistryService, Watch,
    WatchScope,
};
use zookeeper_client as zk;

use crate::common::empty_policy;

mod settings;
pub use settings::ZkSettings;
const KIND: &str = "zk";
const ROOT: &str = "/registry/zk";

/// The path under which `cluster`'s members are ephemeral children.
pub fn cluster_path(cluster: &str) -> String {
    format!("{ROOT}/{cluster}")
}

/// The ephemeral node of `instance` in `cluster` (Seata's layout).
pub fn instance_path(cluster: &str, instance: &Instance) -> String {
    format!("{}/{}", cluster_path(cluster), instance.to_java_string())
}

fn check_cluster(cluster: &str) -> Result<(), RegistryError> {
    if cluster.is_empty() || cluster.contains('/') || cluster == "." || cluster == ".." {
        return Err(RegistryError::Config(format!(
            "cluster name `{cluster}` cannot be a ZooKeeper path segment"
        )));
    }
    Ok(())
}

fn zk_err(server: &str, op: &str, e: zk::Error) -> RegistryError {
    RegistryError::backend(KIND, server, op.to_string(), e)
}

/// Tries one TCP connection to each server of `connect_string` (without its chroot
/// suffix) and says what happened, e.g. `127.0.0.1:2181: Connection refused (os error
/// 111)`.
async fn probe_servers(connect_string: &str) -> String {
    // zookeeper-client reports a failed connect only as "no available hosts" or
    // "timeout" and keeps the I/O error ("Connection refused") to itself.
    let hosts = connect_string
        .split_once("://")
        .map_or(connect_string, |(_, rest)| rest);
    let hosts = hosts.split('/').next().unwrap_or_default();
    let targets = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|host| match Instance::parse(host) {
            Ok(_) => host.to_string(),
            // No port: ZooKeeper's default.
            Err(_) => format!("{host}:2181"),
        })
        .collect::<Vec<_>>();
    probe_targets(
        targets,
        "",
        "accepts TCP connections, but no ZooKeeper session was established",
    )
    .await
}

fn parse_children(cluster: &str, children: &[String]) -> Vec<Instance> {
    let mut out = Vec::with_capacity(children.len());
    for name in children {
        match Instance::parse(name) {
            Ok(i) => out.push(i),
            Err(e) => tracing::warn!(
                registry = KIND,
                cluster,
                node = %format!("{}/{name}", cluster_path(cluster)),
                "skipping malformed registry entry: {e}"
            ),
        }
    }
    out
}

struct Settings {
    connect_string: String,
    session_timeout: Duration,
    connect_timeout: Duration,
    auth: Option<Vec<u8>>,
}

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

async fn new_session(s: &Settings) -> Result<zk::Client, RegistryError> {
    let mut connector = zk::Client::connector()
        .with_session_timeout(s.session_timeout)
        .with_connection_timeout(s.connect_timeout)
        .with_detached();
    if let Some(auth) = &s.auth {
        connector = connector.with_auth("digest", auth);
    }
    let limit = s.session_timeout + s.connect_timeout;
    let (what, source) =
        match tokio::time::timeout(limit, connector.connect(&s.connect_string)).await {
            Ok(Ok(c)) => return Ok(c),
            Ok(Err(e)) => (e.to_string(), Some(Box::new(e) as _)),
            Err(_) => (format!("no session within {limit:?}"), None),
        };
    let probe = probe_servers(&s.connect_string).await;
    Err(RegistryError::backend(
        KIND,
        &s.connect_string,
        "connect",
        ConnectFailure {
            what,
            probe,
            source,
        },
    ))
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
        let settings = Settings {
            connect_string,
            session_timeout: c.session_timeout,
            connect_timeout: c.connect_timeout,
            auth,
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

    async fn list(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        match self.client().list_children(&cluster_path(cluster)).await {
            Ok(children) => Ok(parse_children(cluster, &children)),
            Err(zk::Error::NoNode) => Ok(Vec::new()),
            Err(e) => Err(self.err("list children", e)),
        }
    }
}

/// Follows the session state: marks clusters stale / connected, and replaces an
/// expired session (re-creating our nodes).
async fn session_loop(inner: Arc<Inner>) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        let client = inner.client();
        let mut states = client.state_watcher();
        loop {
            let state = tokio::select! {
                _ = inner.life.closed() => return,
                s = states.changed() => s,
            };
            match state {
                zk::SessionState::Disconnected => {
                    inner.life.hub().mark_all_stale("zookeeper connection lost");
                }
                zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                    inner.life.hub().mark_all_connected();
                }
                zk::SessionState::Expired
                | zk::SessionState::Closed
                | zk::SessionState::AuthFailed => {
                    tracing::warn!(
                        registry = KIND,
                        session = %client.session_id(),
                        ?state,
                        "zookeeper session ended; building a new one"
                    );
                    inner
                        .life
                        .hub()
                        .mark_all_stale(&format!("zookeeper session {state:?}"));
                    break;
                }
            }
        }
        // A new session, then our nodes again; watch loops re-arm on the generation bump.
        let fresh = loop {
            match new_session(&inner.settings).await {
                Ok(c) => break c,
                Err(e) => {
                    tracing::warn!(registry = KIND, error = %e, "cannot establish a zookeeper session; retrying");
                    let d = backoff.next_delay();
                    if !inner.life.sleep(d).await {
                        return;
                    }
                }
            }
        };
        backoff.reset();
        tracing::info!(registry = KIND, session = %fresh.session_id(), "new zookeeper session");
        *inner.client.write().unwrap_or_else(|p| p.into_inner()) = fresh.clone();
        inner.generation.send_modify(|g| *g += 1);
        for (path, ()) in inner.registered.snapshot().await {
            let mut attempt = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
            loop {
                if !inner.registered.contains(&path).await {
                    break;
                }
                match inner.create_ephemeral(&fresh, &path).await {
                    Ok(()) => {
                        tracing::info!(registry = KIND, path, "re-registered after session loss");
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(registry = KIND, path, error = %e, "re-registering failed; retrying");
                        if fresh.state().is_terminated() {
                            break;
                        }
                        let d = attempt.next_delay();
                        if !inner.life.sleep(d).await {
                            return;
                        }
                    }
                }
            }
        }
    }
}

/// Follows one cluster with one-shot child watches (existence watch while the path
/// is missing), publishing the full child list after every change, until `scope` stops
/// (the client closed or the last watch on the cluster was dropped).
async fn watch_loop(inner: Arc<Inner>, scope: WatchScope) {
    let cluster = scope.cluster();
    let path = cluster_path(cluster);
    let mut generations = inner.generation.subscribe();
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    loop {
        let client = inner.client();
        let result = client.list_and_watch_children(&path).await;
        let watcher = match result {
            Ok((children, watcher)) => {
                scope.publish(parse_children(cluster, &children));
                scope.mark_connected();
                backoff.reset();
                Some(watcher)
            }
            Err(zk::Error::NoNode) => match client.check_and_watch_stat(&path).await {
                Ok((None, w)) => {
                    scope.publish(Vec::new());
                    scope.mark_connected();
                    backoff.reset();
                    Some(w)
                }
                // Created meanwhile: list again.
                Ok((Some(_), _)) => continue,
                Err(e) => {
                    scope.mark_stale(&format!("cannot watch {path}: {e}"));
                    None
                }
            },
            Err(e) => {
                scope.mark_stale(&format!("cannot list {path}: {e}"));
                None
            }
        };
        match watcher {
            Some(w) => {
                let ev = tokio::select! {
                    _ = scope.stopped() => return,
                    ev = w.changed() => ev,
                };
                if ev.session_state.is_terminated() {
                    // Wait for the session loop to install a new session.
                    tokio::select! {
                        _ = scope.stopped() => return,
                        _ = generations.changed() => {}
                    }
                }
            }
            None => {
                let session_over = client.state().is_terminated();
                tokio::select! {
                    _ = scope.stopped() => return,
                    _ = generations.changed(), if session_over => {}
                    _ = backoff.wait(), if !session_over => {}
                }
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seata_paths() {
        let i = Instance::parse("[2000::1:2345:6789:abcd]:8091").unwrap();
        assert_eq!(
            instance_path("default", &i),
            "/registry/zk/default/2000:0:0:0:1:2345:6789:abcd:8091"
        );
        assert_eq!(cluster_path("prod"), "/registry/zk/prod");
    }

    #[test]
    fn bad_children_are_skipped() {
        let got = parse_children(
            "c",
            &[
                "10.0.0.1:80".into(),
                "junk".into(),
                "10.0.0.2:0".into(),
                "2000:0:0:0:0:0:0:1:81".into(),
            ],
        );
        let shown: Vec<String> = got.iter().map(|i| i.to_string()).collect();
        assert_eq!(shown, vec!["10.0.0.1:80", "[2000::1]:81"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_child_watch_loop_ends_with_the_last_watch() {
        let zk = meshline_testkit::ZooKeeper::start().expect("zookeeper");
        let mut config = Config::default();
        let zk_section = config.registry.section_mut("zk");
        zk_section.set("serverAddr", zk.connect_string());
        zk_section.set("sessionTimeout", "4s");
        let reg = ZookeeperRegistry::connect(&config).await.unwrap();
        let refs = || Arc::strong_count(&reg.inner);
        crate::common::assert_follow_ends_with_last_watch(&reg, &reg.inner.life, "c", 1, refs)
            .await;
        reg.close().await.unwrap();
    }

    #[test]
    fn cluster_names_must_be_path_segments() {
        assert!(check_cluster("a/b").is_err());
        assert!(check_cluster("").is_err());
        assert!(check_cluster("default").is_ok());
    }
}
