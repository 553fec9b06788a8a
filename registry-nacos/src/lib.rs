//! # meshline-registry-nacos
//!
//! The Nacos registry, on a Nacos 2.x gRPC naming client of our own (`src/grpc/`),
//! laid out as Seata lays it out ([docs/seata-compat.md §1.2](https://github.com/meshline/meshline/blob/main/docs/seata-compat.md#12-nacos)):
//!
//! - A Seata TC registers an ephemeral instance of service `registry.nacos.application`
//!   (default `seata-server`) in group `registry.nacos.group` (default `DEFAULT_GROUP`:
//!   Seata's shipped files say `SEATA_GROUP`, but with the key unset both server and
//!   client end up on `DEFAULT_GROUP`), Nacos cluster = the Seata cluster name, in
//!   namespace `registry.nacos.namespace`.
//! - [`lookup`](RegistryService::lookup) and [`watch`](RegistryService::watch) take the
//!   Seata cluster name and list the instances of that Nacos cluster that are
//!   `healthy && enabled`, as Seata does. Weight (Nacos' float weight, rounded, at least
//!   1 unless it is 0) and the `zone` metadata key are carried into [`Instance`].
//!
//! ## Why a client of our own
//!
//! The registry ran on the official `nacos-sdk` 0.8.3 until it showed a fault that
//! cannot be fixed from outside it: nacos-sdk never closes a gRPC connection it
//! replaced (its stream task keeps answering the server on it), and Nacos ties an
//! ephemeral registration to the connection that made it. After a failover and the old
//! node's return, a TC stayed listed on every node after it unregistered, for as long
//! as its process lived, in one cut in five to one in two (docs/faults.md). Nacos 2's
//! naming protocol is small (two protobuf messages with JSON bodies), so the registry
//! now speaks it itself (`src/grpc/`): a connection it leaves is closed, and what it
//! registered there goes with it. The configuration centre ([`NacosCentre`]) still
//! runs on nacos-sdk's config client, which registers nothing.
//!
//! What the client does, and what we add on top:
//!
//! - **One connection, one TCP socket.** Registrations and subscriptions live on the
//!   connection; the client never lets its channel reconnect behind its back (a new
//!   socket would be a new, empty connection to Nacos). A dead connection is replaced,
//!   and everything registered and subscribed is redone on the new one.
//! - **Liveness.** A health check every [`HEALTH_PERIOD`], [`HEALTH_TRIES`] in a row
//!   unanswered within [`HEALTH_TIMEOUT`] each: a node that goes silent without a
//!   reset is left within 5 s (nacos-sdk: 14-20 s) for the next server of
//!   `serverAddr`, and one that stalls under 3 s (a GC pause) is kept. Measured on
//!   three rnacos nodes, a cut node is left 4.0-5.0 s after the cut, and the registration
//!   never leaves the other clients' view (`tests/nacos_node_cut.rs`, docs/faults.md).
//! - **What the server lists is checked.** Every [`VERIFY_PERIOD`] the client asks for
//!   each service it registered in and registers again whatever of its own the server
//!   no longer lists, with a `WARN`: a Nacos cluster can lose a live registration
//!   (rnacos did, after a cut node returned; `src/grpc/verify.rs`).
//! - Watches are full snapshots through a [`WatchHub`](meshline_registry_core::WatchHub) (dedup, revisions, empty-list
//!   protection per `registry.empty-protection`), fed by the subscription's pushes
//!   **and** by a resync query every [`RESYNC_PERIOD`]. A failing query marks watches
//!   [`Health::Stale`](meshline_registry_core::Health::Stale); a successful one marks
//!   them connected and repairs anything a lost push missed.
//! - One instance per service is registered with the single-instance call, which every
//!   Nacos 2.x server has; several instances of one service from one client go as one
//!   batch (`batchRegisterInstance`, Nacos 2.1.1 and later), since one Nacos connection
//!   keeps one registration per service. The rules are in `src/register.rs`.
//! - `registry.nacos.serverAddr` may be written as Seata's Java client takes it,
//!   `http://host:port` (or `https://host:port` in a build with `nacos-tls`).
//!   `registry.nacos.contextPath` has no effect on gRPC; the login is at
//!   `/nacos/v1/auth/login` (as nacos-sdk, which the centre uses, logs in), so another
//!   context path together with username/password is refused with an error saying so.
//! - [`close`](RegistryService::close) deregisters everything this client registered,
//!   and dropping the registry closes its connection (Nacos then drops the rest).
//! - A failed `unregister` returns the error and is retried in the background (200 ms
//!   doubling to 30 s) until the server takes it (the redo already forgot it, so a
//!   reconnect does not register it again).
//! - 2 s after a close, the registry asks once more and logs at `WARN` an instance of
//!   its own still listed (`src/after_close.rs`): another client registered the same
//!   address, or a node that was cut off still holds a connection this client left.
//!
//! ## Nacos 1.x: the v1 HTTP API
//!
//! Nacos 1.x servers serve HTTP only (no gRPC port). For them the registry speaks
//! Nacos 1.x's open API (`src/http/`): registrations kept alive by heartbeats as the
//! 1.x Java client keeps them, watches fed by the once-a-second resync (the 1.x
//! client's polling). `registry.nacos.protocol` chooses: `auto` (the default) asks the
//! server's version (`/<contextPath>/v1/console/server/state`) and speaks HTTP to a
//! 1.x server, gRPC to any other; `grpc` and `http` force one. 2.x servers serve the
//! v1 API too, so `http` also works with them (rnacos, in the tests). The
//! configuration centre ([`NacosCentre`]) runs on nacos-sdk and needs Nacos 2.x. When
//! a gRPC connect fails, the HTTP port is asked for its version and a 1.x answer is
//! named with the key to set.

//! ## Credentials in nacos-sdk's logs (the configuration centre)
//!
//! The registry's client never logs a credential. nacos-sdk 0.8, which the
//! configuration centre runs on, logs its login with the password in clear (`Http login with
//! username=...,password=...` at debug level, the login answer with the access token
//! at debug level) and a failed login as the HTTP error's `Debug`, whose URL carries
//! `password=` in its query, at **error** level. Our subscribers (the CLI, the
//! examples) add [`meshline_registry_core::redact::LOG_DIRECTIVES`]
//! (`nacos_sdk::api::plugin::auth=off`), which turns that one target off; a library
//! user with their own subscriber should add the same directive to their `EnvFilter`
//! (`tracing-subscriber` with its `env-filter` feature):
//!
//! ```ignore
//! let mut filter = tracing_subscriber::EnvFilter::new("debug");
//! for d in meshline_registry_core::redact::LOG_DIRECTIVES {
//!     filter = filter.add_directive(d.parse().unwrap());
//! }
//! ```
//!
//! A failed login still shows up, as this crate's own error (the client cannot
//! connect), without the password.
//!
//! ## Convergence (measured)
//!
//! See the crate's tests (`tests/suite/nacos.rs`, `convergence`): figures are printed by
//! `cargo test -p meshline-registry-nacos --test suite nacos::convergence -- --nocapture`.

#![warn(missing_docs)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use meshline_registry_core::{
    Config, Instance, Lifecycle, Nearby, RegistryError, RegistryService, Watch, WatchScope,
};
use tokio_util::sync::CancellationToken;

use crate::grpc::shared::Listener;
use crate::grpc::wire::ServiceInfo;
pub use crate::grpc::{
    Error as NacosError, HEALTH_PERIOD, HEALTH_TIMEOUT, HEALTH_TRIES, ServiceInstance,
    VERIFY_PERIOD,
};

mod address;
mod after_close;
mod catalog;
mod centre;
mod connect;
mod grpc;
mod http;
mod naming;
mod nearby;
mod probe;
mod register;
mod settings;
mod tls;
pub use centre::NacosCentre;
pub use settings::{NacosSettings, Protocol};

const KIND: &str = "nacos";

/// How often each watched cluster is re-queried (resync and health probe).
pub const RESYNC_PERIOD: Duration = Duration::from_secs(1);

/// How long one Nacos request may take before we call it failed.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// How long [`NacosRegistry::connect`] waits for the client to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The Nacos registry. See the [crate docs](crate).
pub struct NacosRegistry {
    inner: Arc<Inner>,
}

struct Inner {
    naming: naming::Naming,
    /// `registry.nacos.serverAddr` (and the gRPC port when set): the address in errors.
    server: String,
    service: String,
    group: String,
    life: Lifecycle,
    /// Our own instances.
    own: register::Registrations,
    /// The settings the client was built from: `nearby` reads the server's catalog
    /// with them.
    settings: NacosSettings,
}

impl std::fmt::Debug for NacosRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NacosRegistry")
            .field("service", &self.inner.service)
            .field("group", &self.inner.group)
            .field("protocol", &self.inner.naming.protocol())
            .finish_non_exhaustive()
    }
}

/// True for Nacos' refusal by its auth (error code 403), from our naming client or from
/// nacos-sdk (the config centre).
fn refused_by_auth(e: &(dyn std::error::Error + 'static)) -> bool {
    if let Some(NacosError::Refused { code: 403, .. }) = e.downcast_ref::<NacosError>() {
        return true;
    }
    matches!(
        e.downcast_ref::<nacos_sdk::api::error::Error>(),
        Some(nacos_sdk::api::error::Error::ErrResponse(_, _, 403, _))
    )
}

fn nacos_err<E>(server: &str, op: &str, e: E) -> RegistryError
where
    E: std::error::Error + Send + Sync + 'static,
{
    // Nacos answers a request without a valid login with error code 403 and a message
    // of its own ("unknown user!" from rnacos for a wrong password too, "user not
    // found!" from Java Nacos): say which keys to look at.
    if refused_by_auth(&e) {
        return RegistryError::backend(
            KIND,
            server,
            format!(
                "{op}: refused by the server's auth (403): the credentials in \
                 registry.nacos.username and registry.nacos.password (or accessKey and \
                 secretKey) are missing or wrong"
            ),
            e,
        );
    }
    RegistryError::backend(KIND, server, op.to_string(), e)
}

/// Runs one request to the Nacos server(s) at `server` with [`REQUEST_TIMEOUT`].
async fn timed<T, E>(
    server: &str,
    op: &'static str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, RegistryError>
where
    E: std::error::Error + Send + Sync + 'static,
{
    match tokio::time::timeout(REQUEST_TIMEOUT, f).await {
        Ok(r) => r.map_err(|e| nacos_err(server, op, e)),
        Err(_) => Err(RegistryError::timeout(KIND, server, op, REQUEST_TIMEOUT)),
    }
}

/// Converts a Nacos instance, or says why it cannot be used.
fn to_instance(s: &ServiceInstance) -> Result<Instance, RegistryError> {
    let port = u16::try_from(s.port).map_err(|_| {
        RegistryError::invalid_address(format!("{}:{}", s.ip, s.port), "port out of range")
    })?;
    let mut i = Instance::new(&s.ip, port)?;
    let w = s.weight;
    let weight = if !w.is_finite() || w <= 0.0 {
        0
    } else {
        (w.round() as u32).max(1)
    };
    i = i.with_weight(weight);
    for (k, v) in &s.metadata {
        i = i.with_metadata(k.clone(), v.clone());
    }
    if let Some(z) = s.metadata.get("zone") {
        i = i.with_zone(z.clone());
    }
    Ok(i)
}

/// Healthy + enabled instances of `cluster`, bad entries skipped with a warning.
fn usable(cluster: &str, list: &[ServiceInstance]) -> Vec<Instance> {
    list.iter()
        .filter(|s| s.healthy && s.enabled)
        .filter(|s| {
            s.cluster_name
                .as_deref()
                .map(|c| c == cluster)
                .unwrap_or(true)
        })
        .filter_map(|s| match to_instance(s) {
            Ok(i) => Some(i),
            Err(e) => {
                tracing::warn!(registry = KIND, cluster, error = %e, "skipping bad instance");
                None
            }
        })
        .collect()
}

/// The push callback for one cluster; silent once its watch stopped.
fn listener(cluster: &str, inner: std::sync::Weak<Inner>, stopped: CancellationToken) -> Listener {
    let cluster = cluster.to_string();
    Arc::new(move |info: &ServiceInfo| {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if stopped.is_cancelled() {
            return;
        }
        inner
            .life
            .hub()
            .publish(&cluster, usable(&cluster, &info.hosts));
    })
}

impl NacosRegistry {
    /// Connects with `registry.nacos.*` ([`NacosSettings`]: server list, namespace,
    /// group, application, auth) and `registry.empty-protection`.
    ///
    /// Fails when no server takes a connection within 10 s (or every server refused
    /// once); the error names the server and
    /// what a TCP connect to its gRPC port said (e.g. "Connection refused").
    pub async fn connect(config: &Config) -> Result<Self, RegistryError> {
        let n = NacosSettings::from_config(config)?;
        let p = connect::prepare(&n, &config.application_id)?;
        let naming = p.naming(&p.server).await?;
        Ok(Self::new(naming, p.server.clone(), &n, config))
    }

    fn new(naming: naming::Naming, server: String, n: &NacosSettings, config: &Config) -> Self {
        let policy = meshline_registry_core::EmptyProtection::of(&config.registry);
        NacosRegistry {
            inner: Arc::new(Inner {
                naming,
                server,
                service: n.application.clone(),
                group: n.group.clone(),
                life: Lifecycle::new(KIND, policy),
                own: register::Registrations::default(),
                settings: n.clone(),
            }),
        }
    }

    /// The Nacos service name instances are registered under.
    pub fn service_name(&self) -> &str {
        &self.inner.service
    }

    /// The Nacos group.
    pub fn group(&self) -> &str {
        &self.inner.group
    }

    /// The protocol the client speaks: [`Protocol::Grpc`] or [`Protocol::Http`] (what
    /// `registry.nacos.protocol` named, or what `auto` chose for the server).
    pub fn protocol(&self) -> Protocol {
        self.inner.naming.protocol()
    }
}

impl Inner {
    fn check_open(&self) -> Result<(), RegistryError> {
        self.life.check_open()
    }

    /// Where our registrations go.
    fn target(&self) -> register::Target<'_> {
        register::Target {
            naming: &self.naming,
            server: &self.server,
            service: &self.service,
            group: &self.group,
        }
    }

    /// Deregisters every instance we registered (close and drop); the first error is
    /// returned. What was deregistered is asked for again a little later, and an
    /// instance still listed is logged ([`after_close`]).
    async fn deregister_all(self: &Arc<Self>) -> Result<(), RegistryError> {
        let (result, removed) = self.own.remove_all(&self.target()).await;
        after_close::check(self.clone(), removed);
        result
    }

    /// Subscribes to `cluster`'s pushes; the listener is silent once `stopped`.
    async fn subscribe(
        self: &Arc<Self>,
        cluster: &str,
    ) -> Result<(u64, CancellationToken), RegistryError> {
        let stopped = CancellationToken::new();
        let listener = listener(cluster, Arc::downgrade(self), stopped.clone());
        let id = timed(
            &self.server,
            "subscribe",
            self.naming
                .subscribe(&self.group, &self.service, cluster, listener),
        )
        .await?;
        Ok((id, stopped))
    }

    async fn query(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        let list = timed(
            &self.server,
            "query instances",
            self.naming.query(None, &self.group, &self.service, cluster),
        )
        .await?;
        Ok(usable(cluster, &list))
    }
}

/// Re-queries `cluster` every [`RESYNC_PERIOD`] until its watch stops (the client
/// closed, or the last `Watch` on it was dropped); then unsubscribes.
async fn resync(
    weak: std::sync::Weak<Inner>,
    scope: WatchScope,
    subscription: u64,
    stopped: CancellationToken,
) {
    while scope.sleep(RESYNC_PERIOD).await {
        let Some(inner) = weak.upgrade() else { return };
        match inner.query(scope.cluster()).await {
            Ok(list) => {
                scope.publish_read(list);
            }
            Err(e) => scope.mark_stale(&e.to_string()),
        }
    }
    stopped.cancel();
    let Some(inner) = weak.upgrade() else { return };
    let gone = timed(
        &inner.server,
        "unsubscribe",
        inner.naming.unsubscribe(subscription),
    )
    .await;
    if let Err(e) = gone {
        tracing::debug!(registry = KIND, cluster = scope.cluster(), error = %e, "unsubscribe failed");
    }
}

#[async_trait]
impl RegistryService for NacosRegistry {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn register(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        self.inner.check_open()?;
        let mut metadata: HashMap<String, String> = instance
            .metadata()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if let Some(z) = instance.zone() {
            metadata.insert("zone".into(), z.to_string());
        }
        let si = ServiceInstance {
            ip: instance.java_host(),
            port: i32::from(instance.port()),
            weight: f64::from(instance.weight()),
            healthy: true,
            enabled: true,
            ephemeral: true,
            cluster_name: Some(cluster.to_string()),
            service_name: Some(self.inner.service.clone()),
            metadata,
            ..Default::default()
        };
        let inner = &self.inner;
        inner
            .own
            .add(&inner.target(), instance.key().clone(), si)
            .await
    }

    async fn unregister(&self, _cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        self.inner.check_open()?;
        let inner = &self.inner;
        let result = inner.own.remove(&inner.target(), instance.key()).await;
        if let Err(e) = &result
            && inner.own.is_removing(instance.key()).await
        {
            tracing::warn!(registry = KIND, %instance, error = %e, "unregister failed; retrying in the background");
            retry_deregister(&self.inner, instance);
        }
        result
    }

    async fn lookup(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        self.inner.check_open()?;
        self.inner.query(cluster).await
    }

    async fn watch(&self, cluster: &str) -> Result<Watch, RegistryError> {
        let inner = &self.inner;
        let weak = Arc::downgrade(inner);
        inner
            .life
            .watch(
                cluster,
                || async {
                    let first = inner.query(cluster).await?;
                    let subscription = inner.subscribe(cluster).await?;
                    Ok((first, subscription))
                },
                move |(subscription, stopped), scope| resync(weak, scope, subscription, stopped),
            )
            .await
    }

    async fn close(&self) -> Result<(), RegistryError> {
        self.inner.life.close(self.inner.deregister_all()).await
    }

    /// Where else Seata TCs are likely registered: other Nacos clusters of the service,
    /// the groups `DEFAULT_GROUP` / `SEATA_GROUP`, the public namespace, the services
    /// `seata-server` / `seata` and those the group lists; each with the
    /// `registry.nacos.*` keys that select it. See `src/nearby.rs`.
    async fn nearby(&self, cluster: &str) -> Result<Vec<Nearby>, RegistryError> {
        self.inner.check_open()?;
        self.inner.nearby(cluster).await
    }
}

/// Deregisters `instance` in the background until the server confirms, unless it was
/// registered again meanwhile or the client closed (close deregisters what is still
/// pending, once more). The client's redo forgot the instance when the
/// deregistration was asked for, so only the server's copy is left to remove.
fn retry_deregister(inner: &Arc<Inner>, instance: &Instance) {
    let weak = Arc::downgrade(inner);
    let key = instance.key().clone();
    inner.life.retry_removal(instance.to_string(), move || {
        let (weak, key) = (weak.clone(), key.clone());
        async move {
            let Some(inner) = weak.upgrade() else {
                return Ok(true);
            };
            inner.own.retry_removal(&inner.target(), &key).await
        }
    });
}

impl Drop for NacosRegistry {
    /// Unless closed, deregisters our instances in the background (best effort; the
    /// server also drops them when the client's connection goes) and ends the watches.
    fn drop(&mut self) {
        self.inner
            .life
            .close_on_drop_with(
                &self.inner,
                |inner| async move { inner.deregister_all().await },
            );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An instance at `ip:port` in Nacos cluster `cluster`, the rest defaulted.
    fn in_cluster(ip: &str, port: i32, cluster: &str) -> ServiceInstance {
        ServiceInstance {
            ip: ip.into(),
            port,
            cluster_name: Some(cluster.into()),
            ..Default::default()
        }
    }

    #[test]
    fn conversion_skips_bad_and_maps_weight_zone() {
        let good = ServiceInstance {
            ip: "10.0.0.1".into(),
            port: 8091,
            weight: 2.4,
            cluster_name: Some("default".into()),
            metadata: [("zone".to_string(), "az1".to_string())]
                .into_iter()
                .collect(),
            ..Default::default()
        };
        let bad_port = in_cluster("10.0.0.2", 70000, "default");
        let bad_ip = in_cluster("not an ip", 1, "default");
        let unhealthy = ServiceInstance {
            healthy: false,
            ..in_cluster("10.0.0.3", 1, "default")
        };
        let other_cluster = in_cluster("10.0.0.4", 1, "other");
        let zero = ServiceInstance {
            weight: 0.0,
            ..in_cluster("10.0.0.5", 1, "default")
        };
        let list = usable(
            "default",
            &[good, bad_port, bad_ip, unhealthy, other_cluster, zero],
        );
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].weight(), 2);
        assert_eq!(list[0].zone(), Some("az1"));
        assert_eq!(list[1].weight(), 0);
    }
}
