//! Consul backend (`registry.type = consul`), Seata's layout.
//!
//! # Layout ([docs/seata-compat.md §1.6](https://github.com/meshline/meshline/blob/main/docs/seata-compat.md#16-consul))
//!
//! A cluster is a Consul **service named after the cluster**; each member is a service
//! instance with ID `<cluster>-<ip>:<port>` (Java's address form, IPv6 unbracketed),
//! tag `services`, `Address` and `Port`. That is what a Seata TC registers, so a Seata
//! cluster is discovered as is, and what we register is found by Seata clients, which
//! ask for `tag=services&passing`.
//!
//! # Reading
//!
//! `GET /v1/health/service/<cluster>?passing=true&tag=services` — only instances whose
//! every check passes. Watches are **blocking queries** in a loop (`index` + `wait`),
//! with the index rules of Consul's docs: the index is reset to 0 (a plain read) when
//! it goes backwards (the agent was restarted or lost its state), a blocking query
//! never uses index 0, and a query that returns at once without a new index is
//! rate-limited. After a failed query the next one is a plain read too: a restarted,
//! empty agent may have a lower index than ours, and a blocking query on it would only
//! return when `wait` (30 s) runs out. Every watch on a cluster shares one loop, which
//! ends (abandoning its query in flight) when the last [`Watch`] on the cluster is
//! dropped or the registry closes. Entries are parsed
//! one by one: a malformed entry (no address, port 0 or out of range, a bad host) is
//! skipped with a warning naming its service ID; a response that is not a JSON array
//! is an error (the last snapshot is kept and the watch goes stale).
//!
//! Weight: `Meta.weight` when it is a number, else `Weights.Passing`. Zone: `Meta.zone`.
//! All string `Meta` entries become instance metadata.
//!
//! # Registering
//!
//! `PUT /v1/agent/service/register` with a **TTL check** (`registry.consul.ttl`, default
//! 10 s) created passing, with `DeregisterCriticalServiceAfter`
//! (`registry.consul.deregisterCriticalServiceAfter`, default 20 s; real Consul treats
//! anything under 1 min as 1 min). A keeper task passes every check every TTL/3
//! (`PUT /v1/agent/check/pass/service:<id>`). When the agent answers 404 (it lost the
//! service: restarted without persistence, or reaped it), the keeper registers the
//! instance again at once; when the agent is unreachable it retries with jittered
//! backoff. `unregister` and `close` deregister
//! (`PUT /v1/agent/service/deregister/<id>`); the agent's 404 "Unknown service ID" (it
//! restarted without its data, or reaped the service) means already gone, and is
//! success. A failed `unregister` returns the error,
//! stops passing the check at once and retries the deregistration in the background
//! (200 ms doubling to 30 s) until the agent takes it, the instance is registered
//! again, or the client closes (`close` deregisters what is still pending). Dropping the registry does the same (best
//! effort, on the current tokio runtime) and ends its watches;
//! [`abandon`](ConsulRegistry::abandon) stops everything without deregistering, like a
//! crash: the check then expires and Consul reaps the service.
//!
//! Seata registers its TC with a TCP check instead of a TTL check; readers do not care
//! which check keeps an instance passing.
//!
//! # Why plain HTTP, not rs-consul
//!
//! rs-consul 0.15 has no agent API (no TTL checks), its `Service` type has no `Meta`
//! or `Weights` (so no weight or zone), and it decodes a health response into strict
//! typed structs, so a single odd entry fails the whole response instead of being
//! skipped. The health query is one GET; doing it with the same HTTP client as the
//! agent calls keeps every guarantee above.
//!
//! # Convergence (measured)
//!
//! Against the testkit Consul double on a 2-core machine, 200 registrations on one
//! client, each timed until another client's watch shows it: p50 3.65 ms, p99 8.33 ms.
//! A crashed (abandoned) registrant left the watch after 1.7 s with a 2 s TTL. Run it
//! with `cargo run --release -p meshline-registry-others --features consul,eureka
//! --example consul_eureka_convergence`; details in the crate's `CONVERGENCE.md`.
//!
//! # Settings
//!
//! `registry.consul.serverAddr` (`host:port` or a `http(s)://` URL; default
//! `127.0.0.1:8500`), `aclToken` (sent as `X-Consul-Token`), `ttl`,
//! `deregisterCriticalServiceAfter`, and `registry.empty-protection`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use meshline_registry_core::{
    Config, Instance, Lifecycle, Nearby, Registrations, RegistryError, RegistryService, Watch,
};
use serde_json::Value;

use crate::common::empty_policy;

mod agent;
mod centre;
mod follow;
mod keeper;
mod nearby;
mod parse;
mod settings;

pub use centre::ConsulCentre;
pub use settings::ConsulSettings;

use agent::Agent;
use follow::{BLOCKING_WAIT, next_index, watch_loop};
use keeper::{deregister_all, keeper};

const KIND: &str = "consul";

/// A Consul registry client (see the [module docs](self) for layout and behaviour).
///
/// Cheap to share behind an `Arc`; all methods take `&self`. Background tasks (the TTL
/// keeper, one blocking-query loop per watched cluster) end on [`close`] and when this
/// value is dropped; a cluster's loop also ends when the last [`Watch`] on it is dropped.
///
/// [`close`]: RegistryService::close
pub struct ConsulRegistry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ConsulRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsulRegistry")
            .field("base", &self.inner.server())
            .field("ttl", &self.inner.ttl)
            .finish()
    }
}

/// What the registry, its keeper and its watches share.
struct Inner {
    /// The agent connection (base URL, TLS, token).
    agent: Agent,
    ttl: Duration,
    deregister_after: Duration,
    wait: Duration,
    /// Service ID -> its registration body (written again when the agent lost it).
    regs: Registrations<Value>,
    life: Lifecycle,
}
impl ConsulRegistry {
    /// Connects to the agent named by `registry.consul.serverAddr` (checked with
    /// `GET /v1/status/leader`) and starts the TTL keeper.
    pub async fn connect(config: &Config) -> Result<Self, RegistryError> {
        let c = ConsulSettings::from_config(config)?;
        if c.ttl.is_zero() {
            return Err(RegistryError::Config(
                "registry.consul.ttl must be greater than 0".into(),
            ));
        }
        let agent = Agent::connect(&c, "registry.consul").await?;
        let inner = Arc::new(Inner {
            agent,
            ttl: c.ttl,
            deregister_after: c.deregister_critical_after,
            wait: BLOCKING_WAIT,
            regs: Registrations::new(),
            life: Lifecycle::new(KIND, empty_policy(config)),
        });
        tokio::spawn(keeper(inner.clone()));
        Ok(ConsulRegistry { inner })
    }

    /// Stops every background task at once **without** deregistering, as if the process
    /// had crashed: the TTL checks expire and the agent reaps the services after
    /// `DeregisterCriticalServiceAfter`. Used by tests that measure how fast watchers
    /// notice a dead registrant.
    pub fn abandon(&self) {
        self.inner.life.abandon();
    }

    /// The agent's base URL.
    pub fn base_url(&self) -> &str {
        self.inner.agent.base.as_str()
    }
}

impl Drop for ConsulRegistry {
    /// Stops the background tasks and ends this registry's watches; unless
    /// [`abandon`](ConsulRegistry::abandon)ed, also deregisters our services right away
    /// (best effort, on the current tokio runtime if there is one) instead of leaving
    /// them to TTL expiry.
    fn drop(&mut self) {
        self.inner
            .life
            .close_on_drop_with(
                &self.inner,
                |inner| async move { deregister_all(&inner).await },
            );
    }
}
#[async_trait]
impl RegistryService for ConsulRegistry {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn register(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        let inner = &self.inner;
        inner.life.check_open()?;
        let id = parse::service_id(cluster, instance);
        let body = parse::register_body(cluster, instance, inner.ttl, inner.deregister_after);
        let mut regs = inner.regs.lock().await;
        inner
            .put_registration(&body)
            .await
            .map_err(|e| e.into_registry(KIND, inner.server(), "register"))?;
        // A registration again cancels a pending background deregistration.
        inner.regs.removal_done(&id);
        regs.insert(id, body);
        Ok(())
    }

    async fn unregister(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        let inner = &self.inner;
        inner.life.check_open()?;
        let id = parse::service_id(cluster, instance);
        // Not forgotten until the agent confirms: the keeper stops passing the check at
        // once, and a failed deregistration is retried (and done by close) instead of
        // leaving the service listed until its check expires.
        let delete = |inner: Arc<Inner>, id: String| async move {
            inner
                .deregister(&id)
                .await
                .map_err(|e| e.into_registry(KIND, inner.server(), "deregister"))
        };
        Registrations::unregister_with(inner, |i| (&i.life, &i.regs), &id, delete).await
    }

    async fn lookup(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        self.inner.life.check_open()?;
        self.inner
            .query(cluster, None)
            .await
            .map(|(l, _)| l)
            .map_err(|m| {
                RegistryError::unavailable(
                    KIND,
                    self.inner.server(),
                    format!("lookup `{cluster}`: {m}"),
                )
            })
    }

    async fn watch(&self, cluster: &str) -> Result<Watch, RegistryError> {
        let inner = &self.inner;
        let follower = inner.clone();
        let first_read = || async {
            inner.query(cluster, None).await.map_err(|m| {
                RegistryError::unavailable(KIND, inner.server(), format!("watch `{cluster}`: {m}"))
            })
        };
        inner
            .life
            .watch(cluster, first_read, move |index, scope| {
                watch_loop(follower, scope, next_index(0, index))
            })
            .await
    }

    async fn close(&self) -> Result<(), RegistryError> {
        self.inner.life.close(deregister_all(&self.inner)).await
    }

    /// The other services with Seata's tag `services` and passing members, from
    /// `/v1/catalog/services` (at most 100 read): each is selected by mapping the group
    /// to it.
    async fn nearby(&self, cluster: &str) -> Result<Vec<Nearby>, RegistryError> {
        self.inner.life.check_open()?;
        nearby::nearby(&self.inner, cluster).await
    }
}
