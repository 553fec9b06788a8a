//! Seata namingserver backend (`registry.type = seata`, alias `namingserver`).
//!
//! # The protocol
//!
//! Read from Seata's sources (2.3.0-SNAPSHOT, `0b9d7c9a`): the client
//! `discovery/seata-discovery-namingserver/src/main/java/org/apache/seata/discovery/registry/namingserver/NamingserverRegistryServiceImpl.java`,
//! the server `namingserver/src/main/java/org/apache/seata/namingserver/controller/{NamingController,HealthController}.java`,
//! `namingserver/.../manager/{NamingManager,ClusterWatcherManager}.java`,
//! `namingserver/.../entity/{pojo/ClusterData,bo/NamespaceBO,bo/ClusterBO}.java`, the
//! JSON types `common/.../metadata/{Node,Cluster}.java` and
//! `common/.../metadata/namingserver/{Instance,NamingServerNode,Unit,MetaResponse}.java`,
//! and the TC side `server/.../instance/ServerInstance.java`.
//!
//! - A TC registers with `POST /naming/v1/register?namespace=&clusterName=&unit=` and a
//!   JSON `Instance` (`control` and `transaction` endpoints, `weight`, `healthy`,
//!   `term`, `timestamp`, `role`, `metadata`), again every heartbeat period; its
//!   `metadata.vGroup` map (`vGroup -> unit`) says which transaction groups it serves.
//!   The namingserver evicts an instance not heard from for 90 s (checked every 60 s).
//! - Clients discover **by vGroup**: `GET /naming/v1/discovery?vGroup=&namespace=`
//!   answers `{clusterList:[{clusterName, unitData:[{unitName, namingInstanceList:[..]}]}], term}`
//!   and `POST /naming/v1/watch?vGroup=&clientTerm=&timeout=&clientAddr=` is held until
//!   the vGroup changes (200) or `timeout` passes (304).
//!
//! # What meshline does
//!
//! - **Names are vGroups.** [`RegistryService::resolves_groups`] is true, so
//!   `Discovery` looks up the transaction service group itself, unmapped, as Seata's
//!   client does; `lookup`/`watch` take a vGroup.
//! - **Registering like a TC.** `register(cluster, instance)` registers `instance` in
//!   namingserver cluster `cluster`, unit = a fresh random id per instance (a TC's
//!   unit is a UUID; one unit per node, as in Seata's non-raft mode, so removing one
//!   instance never drops another's unit from a vGroup), `term` = the time of the first
//!   registration (kept, so heartbeats are not changes), and `metadata.vGroup` = the
//!   cluster name itself plus every tx group that `service.vgroupMapping` maps to that
//!   cluster, each to our unit. So a lookup by the cluster name or by a mapped tx group
//!   finds the instance. `control` is the transaction endpoint too (meshline servers
//!   have no Seata control port; the namingserver only calls it to move vGroups).
//!   Registrations go to every healthy namingserver (they do not share state) and are
//!   sent again every heartbeat period; `unregister`, `close` and drop send
//!   `/naming/v1/unregister`.
//! - **Fail-over**: reads go to the namingserver that answered last, healthy ones
//!   first; every namingserver is health-checked (`GET /naming/v1/health`) each
//!   heartbeat period.
//! - **A restarted namingserver** (it keeps nothing) gets our registrations back with
//!   the next heartbeat; watches that lost their connection go stale, keep their list,
//!   and resume with a fresh discovery once a namingserver answers.
//! - **Terms per vGroup**: each followed vGroup keeps the term of its own last
//!   discovery (Seata's client keeps one for all).
//! - **Raft clusters** (Seata 2.4+): a discovery lists the `MEMBER`s and the `LEADER`
//!   of the vGroup's current term, never a `FOLLOWER` or a `LEARNER` (Seata's
//!   `handleMetadata`): only the leader of a raft cluster serves transactions. A leader
//!   change moves the vGroup's term, which answers the watches at once.
//! - **Login** (Seata 2.4+) when `username` and `password` are set: at connect (a wrong
//!   password is an error naming the keys), then before a call once the token is at
//!   90 % of `tokenValidityInMilliseconds`, and at once when a namingserver refuses it
//!   (HTTP 401/403; the call is repeated once). The token goes on every call but the
//!   health check, as `Authorization`.
//!
//! # Settings
//!
//! `registry.seata.server-addr` (comma list; default `127.0.0.1:8081`), `namespace`
//! (`public`), `cluster` (Seata's TC key, accepted), `username`, `password`,
//! `tokenValidityInMilliseconds`, `maxBodyBytes`, `tls.*` (cargo
//! feature `namingserver-tls`), and `registry.empty-protection`. The heartbeat period
//! is Seata's 5 s; see [`NamingserverSettings::heartbeat_period`].

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use meshline_registry_core::{
    Config, Instance, Lifecycle, Registrations, RegistryError, RegistryService, Watch,
};
use serde_json::{Map, Value, json};

use crate::common::empty_policy;
use crate::seata_http::follow::{Source, follow};
use crate::seata_http::{Login, Servers};
use crate::tls::tls_feature;

mod follow;
mod http;
mod keeper;
mod settings;

pub use settings::NamingserverSettings;

const KIND: &str = "seata";

/// A namingserver client (see the [module docs](self)).
///
/// Cheap to share behind an `Arc`; every method takes `&self`. Background tasks (the
/// heartbeat keeper, one follow task per watched vGroup) end on
/// [`close`](RegistryService::close) and on drop.
pub struct NamingserverRegistry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for NamingserverRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamingserverRegistry")
            .field("servers", &self.inner.servers.shown())
            .field("namespace", &self.inner.namespace)
            .field("heartbeat", &self.inner.heartbeat)
            .field("login", &self.inner.login)
            .finish()
    }
}

/// One registration: where it goes and what is sent.
#[derive(Debug, Clone)]
pub(crate) struct Reg {
    cluster: String,
    unit: String,
    body: Value,
}

/// What the registry, its keeper and its follow tasks share.
struct Inner {
    servers: Servers,
    /// Base URLs that failed their last health check.
    unhealthy: Mutex<Vec<String>>,
    http: reqwest::Client,
    namespace: String,
    heartbeat: Duration,
    /// `service.vgroupMapping`: tx group -> cluster, for the vGroups we announce.
    mapping: Vec<(String, String)>,
    /// Sent as `clientAddr` of watches (the namingserver lists watchers by it).
    client_addr: String,
    max_body: usize,
    /// The console login (`username`/`password`), when configured.
    login: Login,
    regs: Registrations<Reg>,
    life: Lifecycle,
}

impl Inner {
    /// The namingservers that passed their last health check, or all when none did.
    fn healthy_servers(&self) -> Vec<String> {
        let down = crate::seata_http::lock(&self.unhealthy).clone();
        let up: Vec<String> = self
            .servers
            .all()
            .iter()
            .filter(|b| !down.contains(b))
            .cloned()
            .collect();
        if up.is_empty() {
            self.servers.all().to_vec()
        } else {
            up
        }
    }

    /// The vGroups an instance of `cluster` serves: the cluster name and every tx group
    /// mapped to it.
    fn vgroups_of(&self, cluster: &str) -> Vec<String> {
        let mut v = vec![cluster.to_string()];
        for (g, c) in &self.mapping {
            if c == cluster && !v.contains(g) {
                v.push(g.clone());
            }
        }
        v
    }

    /// The `Instance` JSON a TC sends for `instance` in `cluster` with `unit`.
    fn body(&self, cluster: &str, unit: &str, instance: &Instance) -> Value {
        let endpoint = json!({"host": instance.java_host(), "port": instance.port()});
        let vgroups: Map<String, Value> = self
            .vgroups_of(cluster)
            .into_iter()
            .map(|g| (g, Value::String(unit.to_string())))
            .collect();
        let mut metadata: Map<String, Value> = instance
            .metadata()
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        if let Some(z) = instance.zone() {
            metadata.insert("zone".into(), Value::String(z.to_string()));
        }
        metadata.insert("cluster-type".into(), Value::String("default".into()));
        metadata.insert("vGroup".into(), Value::Object(vgroups));
        let now = next_term();
        json!({
            "namespace": self.namespace,
            "clusterName": cluster,
            "unit": unit,
            "control": endpoint,
            "transaction": endpoint,
            "weight": f64::from(instance.weight()),
            "healthy": true,
            "term": now,
            "timestamp": now,
            "role": "MEMBER",
            "metadata": metadata,
        })
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The `term` of a registration or unregistration we send: the time in milliseconds,
/// as Seata's TC sends, but strictly above every term this process sent before. A
/// namingserver answers a watch at once only when the client's term is behind the
/// vGroup's last change; two changes in the same millisecond had the same term, so a
/// watcher that had read the first was left waiting for the 30 s pull to see the
/// second.
fn next_term() -> i64 {
    static LAST: AtomicI64 = AtomicI64::new(0);
    let now = now_ms();
    let prev = LAST
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
            Some(now.max(last.saturating_add(1)))
        })
        .unwrap_or_else(|last| last);
    now.max(prev.saturating_add(1))
}

/// A random unit id in the UUID text form (Seata's TC uses `UUID.randomUUID()`).
fn new_unit() -> String {
    let a = fastrand::u64(..);
    let b = fastrand::u64(..);
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0x0fff,
        ((b >> 48) & 0x3fff) | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

fn reg_key(cluster: &str, instance: &Instance) -> String {
    format!("{cluster}/{instance}")
}

impl NamingserverRegistry {
    /// Reads `registry.seata.*` and connects; see [`NamingserverRegistry::connect_with`].
    pub async fn connect(config: &Config) -> Result<Self, RegistryError> {
        Self::connect_with(config, NamingserverSettings::from_config(config)?).await
    }

    /// Connects with `settings` (read with [`NamingserverSettings::from_config`], then
    /// changed, e.g. the heartbeat period): health-checks every namingserver and
    /// fails when none answers; starts the heartbeat keeper.
    pub async fn connect_with(
        config: &Config,
        settings: NamingserverSettings,
    ) -> Result<Self, RegistryError> {
        let s = settings;
        if s.heartbeat_period.is_zero() {
            return Err(RegistryError::Config(
                "the namingserver heartbeat period must be greater than 0".into(),
            ));
        }
        let (servers, http, _) = crate::seata_http::connect_parts(
            &s.server_addr,
            &s.tls,
            "registry.seata.server-addr",
            KIND,
            "seata",
            tls_feature!("namingserver-tls"),
        )?;
        let inner = Arc::new(Inner {
            servers,
            unhealthy: Mutex::new(Vec::new()),
            http: http.clone(),
            namespace: s.namespace.clone(),
            heartbeat: s.heartbeat_period,
            mapping: config
                .service
                .vgroup_mapping
                .iter()
                .map(|(g, c)| (g.clone(), c.clone()))
                .collect(),
            client_addr: "meshline".into(),
            max_body: s.max_body_bytes,
            login: Login::new(
                s.username.clone(),
                s.password.clone(),
                s.token_validity,
                "registry.seata",
                http,
                s.max_body_bytes,
            ),
            regs: Registrations::new(),
            life: Lifecycle::new(KIND, empty_policy(config)),
        });
        keeper::check_health(&inner).await;
        if crate::seata_http::lock(&inner.unhealthy).len() == inner.servers.all().len() {
            return Err(RegistryError::unavailable(
                KIND,
                inner.servers.shown(),
                "connect: no namingserver answered GET /naming/v1/health",
            ));
        }
        // A wrong password fails here, not at the first lookup.
        if inner.login.configured() {
            inner.log_in().await.map_err(|m| {
                RegistryError::unavailable(KIND, inner.servers.shown(), format!("connect: {m}"))
            })?;
        }
        tokio::spawn(keeper::keeper(inner.clone()));
        Ok(NamingserverRegistry { inner })
    }

    /// Stops every background task at once **without** unregistering, as a crash: the
    /// namingserver evicts our instances once their heartbeats are overdue.
    pub fn abandon(&self) {
        self.inner.life.abandon();
    }
}

impl Drop for NamingserverRegistry {
    /// Ends the background tasks and this registry's watches; unless
    /// [`abandon`](NamingserverRegistry::abandon)ed, also unregisters (best effort, on
    /// the current tokio runtime).
    fn drop(&mut self) {
        self.inner
            .life
            .close_on_drop_with(&self.inner, |inner| async move {
                keeper::unregister_all(&inner).await
            });
    }
}

#[async_trait]
impl RegistryService for NamingserverRegistry {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn register(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        let inner = &self.inner;
        inner.life.check_open()?;
        let key = reg_key(cluster, instance);
        let existing = inner.regs.lock().await.get(&key).cloned();
        let reg = match existing {
            Some(r) => r,
            None => {
                let unit = new_unit();
                let body = inner.body(cluster, &unit, instance);
                Reg {
                    cluster: cluster.to_string(),
                    unit,
                    body,
                }
            }
        };
        keeper::to_all(inner, "register", &reg).await?;
        inner.regs.insert(key, reg).await;
        Ok(())
    }

    async fn unregister(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        let inner = &self.inner;
        inner.life.check_open()?;
        match inner.regs.remove(&reg_key(cluster, instance)).await {
            Some(reg) => keeper::to_all(inner, "unregister", &reg).await,
            None => Ok(()),
        }
    }

    async fn lookup(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        self.inner.life.check_open()?;
        self.inner
            .discover(cluster)
            .await
            .map(|d| d.members)
            .map_err(|m| {
                RegistryError::unavailable(
                    KIND,
                    self.inner.servers.shown(),
                    format!("lookup `{cluster}`: {m}"),
                )
            })
    }

    async fn watch(&self, cluster: &str) -> Result<Watch, RegistryError> {
        let inner = &self.inner;
        let follower = inner.clone();
        let first_read = || async {
            inner.read(cluster).await.map_err(|m| {
                RegistryError::unavailable(
                    KIND,
                    inner.servers.shown(),
                    format!("watch `{cluster}`: {m}"),
                )
            })
        };
        inner
            .life
            .watch(cluster, first_read, move |term, scope| {
                follow(follower, scope, term)
            })
            .await
    }

    async fn close(&self) -> Result<(), RegistryError> {
        self.inner
            .life
            .close(keeper::unregister_all(&self.inner))
            .await
    }

    fn resolves_groups(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Thousands of terms within a few milliseconds, from several threads: each is
    /// distinct, each thread's are increasing, and none is behind the clock.
    #[test]
    fn terms_strictly_increase_within_a_millisecond() {
        let before = now_ms();
        let per_thread: Vec<Vec<i64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..2000).map(|_| next_term()).collect::<Vec<_>>()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut all: Vec<i64> = per_thread.concat();
        for terms in &per_thread {
            assert!(terms.windows(2).all(|w| w[0] < w[1]), "not increasing");
        }
        assert!(all.iter().all(|&t| t >= before), "a term behind the clock");
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 8000, "two changes shared a term");
    }

    #[test]
    fn units_look_like_uuids_and_differ() {
        let a = new_unit();
        assert_eq!(a.len(), 36, "{a}");
        assert_eq!(a.matches('-').count(), 4);
        assert_ne!(a, new_unit());
    }
}
