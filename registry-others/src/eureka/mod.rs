//! Eureka backend (`registry.type = eureka`), Seata's layout.
//!
//! # Layout ([docs/seata-compat.md §1.7](https://github.com/meshline/meshline/blob/main/docs/seata-compat.md#17-eureka))
//!
//! A cluster is a Eureka **application named after the cluster, upper-cased** (Seata's
//! TC registers `registry.eureka.application`, default `default`, which Eureka shows as
//! `DEFAULT`; Seata clients ask for `getApplication(cluster.toUpperCase())`). Each member
//! is an instance with ID `<ip>:<cluster>:<port>`, `ipAddr`, `port.$` and metadata
//! `weight`. Readers keep **UP instances only**, with `0 < port < 65535`.
//!
//! # Registering
//!
//! `POST {serviceUrl}/apps/{APP}` with a JSON instance (lease `leaseDuration`, renewal
//! `renewalInterval`, from `registry.eureka.*`). A heartbeat task renews every
//! registration each `renewalInterval` (`PUT .../apps/{APP}/{id}`); a **404** (the
//! server does not know the instance: restarted, or the lease was evicted) makes it
//! register again at once; an unreachable server is retried with jittered backoff.
//! `unregister` and `close` cancel (`DELETE .../apps/{APP}/{id}`); a failed
//! `unregister` returns the error, stops the heartbeat of the instance at once and
//! retries the cancel in the background (200 ms doubling to 30 s) until the server
//! takes it, the instance is registered again, or the client closes (`close` cancels
//! what is still pending). Dropping the registry cancels too (best effort, on the
//! current tokio runtime), which also ends its watches.
//! [`abandon`](EurekaRegistry::abandon) stops everything without cancelling, like a
//! crash: the server evicts the instances when their lease runs out.
//!
//! # Reading
//!
//! `lookup` is one `GET .../apps/{APP}`. Watches share one fetcher per registry: a
//! **full fetch** (`GET .../apps`) builds a local copy of the whole registry, then every
//! `refreshInterval` a **delta fetch** (`GET .../apps/delta`) is merged into it
//! (`actionType` `ADDED` / `MODIFIED` / `DELETED`). The merged copy's reconcile hash
//! code (`UP_3_DOWN_1_`...) is compared with the server's `apps__hashcode`; on a
//! mismatch, or when delta is refused (403) or fails, the fetcher falls back to a full
//! fetch, as Netflix's `DiscoveryClient` does. Every watched cluster gets the UP members
//! of its application after each fetch (unchanged lists are not re-sent); when the last
//! [`Watch`] on a cluster is dropped it is no longer published and its snapshot is
//! forgotten (the fetcher runs until the registry closes). Malformed
//! instances (no ID, a bad `ipAddr`, a bad port) are skipped with a warning naming them.
//!
//! All requests send `Accept: application/json` (the server answers XML otherwise).
//! `serviceUrl` may list several servers separated by commas; requests go to the last
//! one that answered and fail over in order.
//!
//! # Convergence (measured)
//!
//! Watches poll, so register -> watch is bounded by `refreshInterval` (Seata's default
//! 5 s), plus a real server's response cache. Against the testkit Eureka double with a
//! 100 ms refresh, 200 registrations: p50 54 ms, p99 104 ms; a crashed registrant
//! (lease 3 s, renewal 1 s) left the watch after 2.8-3.0 s. Run it with `cargo run
//! --release -p meshline-registry-others --features consul,eureka --example
//! consul_eureka_convergence`; details in the crate's `CONVERGENCE.md`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use meshline_registry_core::{
    Config, Instance, Lifecycle, Nearby, Registrations, RegistryError, RegistryService, Watch,
};
use reqwest::{Method, StatusCode, Url};
use serde_json::Value;

use crate::common::{Call, empty_policy};

mod fetcher;
mod heartbeat;
mod http;
mod nearby;
mod parse;
mod settings;

pub use settings::EurekaSettings;

use crate::tls::tls_feature;
use fetcher::fetcher;
use heartbeat::{cancel_all, heartbeat};
use http::parse_urls;

const KIND: &str = "eureka";

/// A Eureka registry client (see the [module docs](self) for layout and behaviour).
///
/// Cheap to share behind an `Arc`; all methods take `&self`. Background tasks (the
/// heartbeat, the registry fetcher) end on [`close`] and when this value is dropped.
///
/// [`close`]: RegistryService::close
pub struct EurekaRegistry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EurekaRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EurekaRegistry")
            .field("service_urls", &self.inner.server())
            .finish()
    }
}

#[derive(Clone)]
struct Registration {
    app: String,
    body: Value,
}

/// What the registry, its heartbeat and its fetcher share.
struct Inner {
    urls: Vec<Url>,
    preferred: AtomicUsize,
    http: reqwest::Client,
    /// `maxBodyBytes`: the largest answer read.
    max_body: usize,
    renewal: Duration,
    lease: Duration,
    refresh: Duration,
    /// instance ID -> registration.
    regs: Registrations<Registration>,
    mirror: tokio::sync::Mutex<Option<parse::Mirror>>,
    fetcher_started: AtomicBool,
    life: Lifecycle,
}
fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}
impl EurekaRegistry {
    /// A client of the server(s) in `registry.eureka.serviceUrl` (required). Checks the
    /// first reachable one with `GET {serviceUrl}/apps` and starts the heartbeat task.
    pub async fn connect(config: &Config) -> Result<Self, RegistryError> {
        let c = EurekaSettings::from_config(config)?;
        let mut tls = c.tls.clone();
        if let Some(u) = crate::common::split_addrs(&c.service_url)
            .into_iter()
            .find(|u| u.starts_with("https://"))
        {
            tls.asked_by_url(&u);
        }
        let material = crate::tls::prepare(&tls, KIND, "eureka", tls_feature!("eureka-tls"))?;
        let with_scheme = crate::common::split_addrs(&c.service_url)
            .iter()
            .map(|u| crate::tls::http_scheme(u, tls.enabled, "registry.eureka.serviceUrl"))
            .collect::<Result<Vec<_>, _>>()?
            .join(",");
        let urls = parse_urls(&with_scheme)?;
        if c.renewal_interval.is_zero() || c.refresh_interval.is_zero() {
            return Err(RegistryError::Config(
                "registry.eureka.renewalInterval and refreshInterval must be greater than 0".into(),
            ));
        }
        let http = crate::common::http_client(
            material,
            KIND,
            "eureka",
            &meshline_registry_core::redact::redact_userinfo(&c.service_url),
        )?;
        let inner = Arc::new(Inner {
            urls,
            preferred: AtomicUsize::new(0),
            http,
            max_body: c.max_body_bytes,
            renewal: c.renewal_interval,
            lease: c.lease_duration,
            refresh: c.refresh_interval,
            regs: Registrations::new(),
            mirror: tokio::sync::Mutex::new(None),
            fetcher_started: AtomicBool::new(false),
            life: Lifecycle::new(KIND, empty_policy(config)),
        });
        // A server that answers but refuses us (401/403: wrong credentials) or fails is
        // an error here, as from_config promises, not at the first real call.
        inner
            .expect(Call::new(Method::GET, &["apps"]), &[StatusCode::OK])
            .await
            .map_err(|e| e.into_registry(KIND, &inner.server(), "connect"))?;
        tokio::spawn(heartbeat(inner.clone()));
        Ok(EurekaRegistry { inner })
    }

    /// Stops every background task at once **without** cancelling our instances, as if
    /// the process had crashed: the server evicts them when their lease runs out. Used
    /// by tests that measure how fast watchers notice a dead registrant.
    pub fn abandon(&self) {
        self.inner.life.abandon();
    }
}

impl Drop for EurekaRegistry {
    /// Stops the background tasks and ends this registry's watches; unless
    /// [`abandon`](EurekaRegistry::abandon)ed, also cancels our instances right away
    /// (best effort, on the current tokio runtime if there is one) instead of leaving
    /// them to lease expiry.
    fn drop(&mut self) {
        self.inner
            .life
            .close_on_drop_with(&self.inner, |inner| async move { cancel_all(&inner).await });
    }
}
#[async_trait]
impl RegistryService for EurekaRegistry {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn register(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        let inner = &self.inner;
        inner.life.check_open()?;
        let app = parse::app_name(cluster);
        let id = parse::instance_id(cluster, instance);
        let body = parse::register_body(cluster, instance, inner.renewal, inner.lease, now_ms());
        let mut regs = inner.regs.lock().await;
        inner
            .post_registration(&app, &body)
            .await
            .map_err(|e| e.into_registry(KIND, &inner.server(), "register"))?;
        // A registration again cancels a pending background cancel.
        inner.regs.removal_done(&id);
        regs.insert(id, Registration { app, body });
        Ok(())
    }

    async fn unregister(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        let inner = &self.inner;
        inner.life.check_open()?;
        let app = parse::app_name(cluster);
        let id = parse::instance_id(cluster, instance);
        // Not forgotten until the server confirms: the heartbeat stops renewing the
        // lease at once, and a failed cancel is retried (and done by close) instead of
        // leaving the instance listed until its lease runs out.
        let delete = move |inner: Arc<Inner>, id: String| {
            let app = app.clone();
            async move {
                inner
                    .cancel(&app, &id)
                    .await
                    .map_err(|e| e.into_registry(KIND, &inner.server(), "cancel"))
            }
        };
        Registrations::unregister_with(inner, |i| (&i.life, &i.regs), &id, delete).await
    }

    async fn lookup(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        let inner = &self.inner;
        inner.life.check_open()?;
        let app = parse::app_name(cluster);
        let (status, bytes) = inner
            .expect(
                Call::new(Method::GET, &["apps", &app]),
                &[StatusCode::OK, StatusCode::NOT_FOUND],
            )
            .await
            .map_err(|e| e.into_registry(KIND, &inner.server(), &format!("lookup `{cluster}`")))?;
        if status == StatusCode::NOT_FOUND {
            return Ok(Vec::new());
        }
        let doc: Value = serde_json::from_slice(&bytes).map_err(|e| {
            RegistryError::unavailable(
                KIND,
                inner.server(),
                format!("lookup `{cluster}`: response is not JSON: {e}"),
            )
        })?;
        parse::parse_application(cluster, &doc).map_err(|e| {
            RegistryError::unavailable(KIND, inner.server(), format!("lookup `{cluster}`: {e}"))
        })
    }

    async fn watch(&self, cluster: &str) -> Result<Watch, RegistryError> {
        let inner = &self.inner;
        // The first watch fetches the whole registry; later ones (of any cluster) read
        // the mirror, which the shared fetcher keeps fresh.
        let first_read = || async {
            let mut mirror = inner.mirror.lock().await;
            if mirror.is_none() {
                inner.full_fetch(&mut mirror).await.map_err(|m| {
                    RegistryError::unavailable(
                        KIND,
                        inner.server(),
                        format!("watch `{cluster}`: {m}"),
                    )
                })?;
            }
            let members = mirror.as_ref().map(|m| m.members(cluster));
            Ok((members.unwrap_or_default(), ()))
        };
        // The fetcher publishes the names the lifecycle follows; a name's own task
        // only marks it followed until its last watch is dropped.
        let watch = inner
            .life
            .watch(cluster, first_read, |(), scope| async move {
                scope.stopped().await
            })
            .await?;
        if !inner.fetcher_started.swap(true, Ordering::SeqCst) {
            tokio::spawn(fetcher(inner.clone()));
        }
        Ok(watch)
    }

    async fn close(&self) -> Result<(), RegistryError> {
        self.inner.life.close(cancel_all(&self.inner)).await
    }

    /// The other applications with UP members, from one `GET {serviceUrl}/apps`: each
    /// is selected by mapping the group to its name (Seata upper-cases it).
    async fn nearby(&self, cluster: &str) -> Result<Vec<Nearby>, RegistryError> {
        self.inner.life.check_open()?;
        self.inner.nearby(cluster).await
    }
}
