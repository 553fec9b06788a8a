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
//! `unregister` and `close` cancel (`DELETE .../apps/{APP}/{id}`); so does dropping the
//! registry (best effort, on the current tokio runtime), which also ends its watches.
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

mod parse;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use meshline_registry_core::{
    Backoff, Config, Instance, Lifecycle, Registrations, RegistryError, RegistryService, Watch,
};
use reqwest::{Method, StatusCode, Url};
use serde_json::Value;

use crate::common::{empty_policy, error_chain, split_addrs};

mod settings;
pub use settings::EurekaSettings;
const KIND: &str = "eureka";

/// Timeout of every request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

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
            .field(
                "service_urls",
                &self.inner.urls.iter().map(Url::as_str).collect::<Vec<_>>(),
            )
            .finish()
    }
}

#[derive(Clone)]
struct Registration {
    app: String,
    body: Value,
}

struct Inner {
    urls: Vec<Url>,
    preferred: AtomicUsize,
    http: reqwest::Client,
    renewal: Duration,
    lease: Duration,
    refresh: Duration,
    /// instance ID -> registration.
    regs: Registrations<Registration>,
    mirror: tokio::sync::Mutex<Option<parse::Mirror>>,
    fetcher_started: AtomicBool,
    life: Lifecycle,
}

enum CallError {
    Status(StatusCode, String),
    Transport(String),
}

impl CallError {
    fn describe(&self) -> String {
        match self {
            CallError::Status(s, t) => format!("server answered {s}: {}", t.trim()),
            CallError::Transport(t) => t.clone(),
        }
    }

    /// The registry error of `op` against the server(s) at `server`.
    fn into_registry(self, server: &str, op: &str) -> RegistryError {
        RegistryError::unavailable(KIND, server, format!("{op}: {}", self.describe()))
    }
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn parse_urls(text: &str) -> Result<Vec<Url>, RegistryError> {
    let mut out = Vec::new();
    for part in split_addrs(text) {
        let part = part.as_str();
        let with_scheme = if part.contains("://") {
            part.to_string()
        } else {
            format!("http://{part}")
        };
        let mut url = Url::parse(&with_scheme).map_err(|e| {
            RegistryError::Config(format!(
                "registry.eureka.serviceUrl: `{part}` is not a URL: {e}"
            ))
        })?;
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(RegistryError::Config(format!(
                "registry.eureka.serviceUrl: `{part}`: scheme must be http or https"
            )));
        }
        if url.cannot_be_a_base() {
            return Err(RegistryError::Config(format!(
                "registry.eureka.serviceUrl: `{part}` cannot be a base URL"
            )));
        }
        if let Ok(mut p) = url.path_segments_mut() {
            p.pop_if_empty();
        }
        out.push(url);
    }
    if out.is_empty() {
        return Err(RegistryError::Config(
            "registry.eureka.serviceUrl is required for the eureka registry \
             (e.g. http://localhost:8761/eureka)"
                .into(),
        ));
    }
    Ok(out)
}

impl EurekaRegistry {
    /// A client of the server(s) in `registry.eureka.serviceUrl` (required). Checks the
    /// first reachable one with `GET {serviceUrl}/apps` and starts the heartbeat task.
    pub async fn connect(config: &Config) -> Result<Self, RegistryError> {
        let c = EurekaSettings::from_config(config)?;
        let urls = parse_urls(&c.service_url)?;
        if c.renewal_interval.is_zero() || c.refresh_interval.is_zero() {
            return Err(RegistryError::Config(
                "registry.eureka.renewalInterval and refreshInterval must be greater than 0".into(),
            ));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(3))
            .build()
            .map_err(|e| {
                RegistryError::backend(KIND, &c.service_url, "cannot build the HTTP client", e)
            })?;
        let inner = Arc::new(Inner {
            urls,
            preferred: AtomicUsize::new(0),
            http,
            renewal: c.renewal_interval,
            lease: c.lease_duration,
            refresh: c.refresh_interval,
            regs: Registrations::new(),
            mirror: tokio::sync::Mutex::new(None),
            fetcher_started: AtomicBool::new(false),
            life: Lifecycle::new(KIND, empty_policy(config)),
        });
        inner
            .call(Method::GET, &["apps"], &[], None)
            .await
            .map_err(|e| e.into_registry(&inner.server(), "connect"))?;
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
        let inner = self.inner.clone();
        self.inner
            .life
            .close_on_drop(move || async move { cancel_all(&inner).await });
    }
}

impl Inner {
    /// The service URL(s), comma-separated, for error messages.
    fn server(&self) -> String {
        self.urls
            .iter()
            .map(|u| u.as_str().trim_end_matches('/'))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// One request, failing over across the service URLs on transport errors. `Ok`
    /// carries the status and body of whichever server answered.
    async fn call(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Option<&Value>,
    ) -> Result<(StatusCode, Vec<u8>), CallError> {
        let n = self.urls.len();
        let first = self.preferred.load(Ordering::Relaxed) % n;
        let mut last = String::new();
        for k in 0..n {
            let i = (first + k) % n;
            let mut url = self.urls[i].clone();
            if let Ok(mut p) = url.path_segments_mut() {
                p.extend(segments);
            }
            if !query.is_empty() {
                let mut q = url.query_pairs_mut();
                for (k, v) in query {
                    q.append_pair(k, v);
                }
            }
            let mut req = self
                .http
                .request(method.clone(), url)
                .timeout(REQUEST_TIMEOUT)
                .header("Accept", "application/json");
            if let Some(b) = body {
                req = req
                    .header("Content-Type", "application/json")
                    .body(b.to_string());
            }
            let resp = match req.send().await {
                Ok(r) => r,
                Err(e) => {
                    last = self.failure(i, &e);
                    continue;
                }
            };
            let status = resp.status();
            match resp.bytes().await {
                Ok(b) => {
                    self.preferred.store(i, Ordering::Relaxed);
                    return Ok((status, b.to_vec()));
                }
                Err(e) => last = self.failure(i, &e),
            }
        }
        Err(CallError::Transport(last))
    }

    /// What went wrong talking to service URL `i` (named when there are several: the
    /// error names them all as its server).
    fn failure(&self, i: usize, e: &reqwest::Error) -> String {
        if self.urls.len() > 1 {
            format!("{}: {}", self.urls[i], error_chain(e))
        } else {
            error_chain(e)
        }
    }

    /// A call that must answer one of `ok`.
    async fn expect(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Option<&Value>,
        ok: &[StatusCode],
    ) -> Result<(StatusCode, Vec<u8>), CallError> {
        let (status, bytes) = self.call(method, segments, query, body).await?;
        if ok.contains(&status) {
            Ok((status, bytes))
        } else {
            Err(CallError::Status(
                status,
                String::from_utf8_lossy(&bytes).into_owned(),
            ))
        }
    }

    async fn post_registration(&self, app: &str, body: &Value) -> Result<(), CallError> {
        self.expect(
            Method::POST,
            &["apps", app],
            &[],
            Some(body),
            &[StatusCode::NO_CONTENT, StatusCode::OK],
        )
        .await
        .map(|_| ())
    }

    /// `DELETE .../apps/{APP}/{id}`. A 404 (the server no longer has it: evicted or
    /// restarted) is what we want.
    async fn cancel(&self, app: &str, id: &str) -> Result<(), CallError> {
        self.expect(
            Method::DELETE,
            &["apps", app, id],
            &[],
            None,
            &[StatusCode::OK, StatusCode::NOT_FOUND],
        )
        .await
        .map(|_| ())
    }

    async fn get_json(&self, segments: &[&str]) -> Result<Value, CallError> {
        let (_, bytes) = self
            .expect(Method::GET, segments, &[], None, &[StatusCode::OK])
            .await?;
        serde_json::from_slice(&bytes)
            .map_err(|e| CallError::Transport(format!("response is not JSON: {e}")))
    }

    /// A full fetch, replacing the mirror.
    async fn full_fetch(&self, mirror: &mut Option<parse::Mirror>) -> Result<(), String> {
        let doc = self.get_json(&["apps"]).await.map_err(|e| e.describe())?;
        *mirror = Some(parse::Mirror::from_full(&doc)?);
        Ok(())
    }

    /// A delta fetch merged into the mirror, with the hash-code check and the fallback
    /// to a full fetch.
    async fn refresh(&self, mirror: &mut Option<parse::Mirror>) -> Result<(), String> {
        let Some(m) = mirror.as_mut() else {
            return self.full_fetch(mirror).await;
        };
        let doc = match self.get_json(&["apps", "delta"]).await {
            Ok(d) => d,
            Err(CallError::Status(s, _)) => {
                tracing::debug!(registry = KIND, status = %s, "delta refused; full fetch");
                return self.full_fetch(mirror).await;
            }
            Err(e) => return Err(e.describe()),
        };
        let server_hash = match m.apply_delta(&doc) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(registry = KIND, error = e, "unusable delta; full fetch");
                return self.full_fetch(mirror).await;
            }
        };
        let local = m.hashcode();
        if server_hash.as_deref() != Some(local.as_str()) {
            tracing::debug!(
                registry = KIND,
                server = server_hash.as_deref().unwrap_or("<none>"),
                local,
                "reconcile hash codes differ; full fetch"
            );
            return self.full_fetch(mirror).await;
        }
        Ok(())
    }
}

/// Renews every registration each renewal interval; registers again on 404.
async fn heartbeat(inner: Arc<Inner>) {
    let period = inner.renewal.max(Duration::from_millis(50));
    let mut backoff = Backoff::new(Duration::from_millis(100), period);
    let mut delay = period;
    loop {
        if !inner.life.sleep(delay).await {
            return;
        }
        let mut failed = false;
        for (id, Registration { app, body }) in inner.regs.snapshot().await {
            let r = inner
                .call(
                    Method::PUT,
                    &["apps", &app, &id],
                    &[("status", "UP".to_string())],
                    None,
                )
                .await;
            match r {
                Ok((StatusCode::OK, _)) => {}
                Ok((StatusCode::NOT_FOUND, _)) => {
                    if !inner.regs.contains(&id).await {
                        continue;
                    }
                    match inner.post_registration(&app, &body).await {
                        Ok(()) => tracing::info!(
                            registry = KIND,
                            instance = id,
                            "the server did not know our instance (404); registered it again"
                        ),
                        Err(e) => {
                            failed = true;
                            tracing::warn!(
                                registry = KIND,
                                instance = id,
                                error = e.describe(),
                                "re-registration failed; retrying"
                            );
                        }
                    }
                }
                Ok((s, b)) => {
                    failed = true;
                    tracing::warn!(registry = KIND, instance = id, status = %s, body = %String::from_utf8_lossy(&b), "heartbeat refused; retrying");
                }
                Err(e) => {
                    failed = true;
                    tracing::warn!(
                        registry = KIND,
                        instance = id,
                        error = e.describe(),
                        "heartbeat failed; retrying"
                    );
                }
            }
        }
        delay = if failed {
            backoff.next_delay()
        } else {
            backoff.reset();
            period
        };
    }
}

/// Refreshes the mirror every refresh interval and publishes every watched cluster.
async fn fetcher(inner: Arc<Inner>) {
    let mut backoff = Backoff::new(Duration::from_millis(100), inner.refresh);
    let mut delay = inner.refresh;
    loop {
        if !inner.life.sleep(delay).await {
            return;
        }
        let r = tokio::select! {
            _ = inner.life.closed() => return,
            r = async { inner.refresh(&mut *inner.mirror.lock().await).await } => r,
        };
        let hub = inner.life.hub();
        match r {
            Ok(()) => {
                // The watched names are read without the mirror locked: a first watch
                // holds the lifecycle's lock while it reads the mirror.
                let watched = inner.life.watched().await;
                if let Some(m) = inner.mirror.lock().await.as_ref() {
                    for cluster in watched {
                        hub.publish(&cluster, m.members(&cluster));
                    }
                }
                hub.mark_all_connected();
                backoff.reset();
                delay = inner.refresh;
            }
            Err(reason) => {
                hub.mark_all_stale(&reason);
                delay = backoff.next_delay();
            }
        }
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
        inner
            .post_registration(&app, &body)
            .await
            .map_err(|e| e.into_registry(&inner.server(), "register"))?;
        inner.regs.insert(id, Registration { app, body }).await;
        Ok(())
    }

    async fn unregister(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        let inner = &self.inner;
        inner.life.check_open()?;
        let app = parse::app_name(cluster);
        let id = parse::instance_id(cluster, instance);
        inner.regs.remove(&id).await;
        inner
            .cancel(&app, &id)
            .await
            .map_err(|e| e.into_registry(&inner.server(), "unregister"))
    }

    async fn lookup(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        let inner = &self.inner;
        inner.life.check_open()?;
        let app = parse::app_name(cluster);
        let (status, bytes) = inner
            .expect(
                Method::GET,
                &["apps", &app],
                &[],
                None,
                &[StatusCode::OK, StatusCode::NOT_FOUND],
            )
            .await
            .map_err(|e| e.into_registry(&inner.server(), &format!("lookup `{cluster}`")))?;
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
}

/// Cancels every instance we registered (close and drop); every failure is logged, the
/// first is returned after trying them all. A 404 (already gone) is fine.
async fn cancel_all(inner: &Inner) -> Result<(), RegistryError> {
    inner
        .regs
        .remove_all(KIND, |id, Registration { app, .. }| async move {
            inner
                .cancel(&app, &id)
                .await
                .map_err(|e| e.into_registry(&inner.server(), "cancel"))
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cluster_is_no_longer_published_after_its_last_watch() {
        let server = meshline_testkit::EurekaDouble::start(Default::default()).unwrap();
        let mut config = Config::default();
        let eureka = config.registry.section_mut("eureka");
        eureka.set("serviceUrl", server.service_url());
        eureka.set("refreshInterval", "50ms");
        let reg = EurekaRegistry::connect(&config).await.unwrap();
        let life = &reg.inner.life;
        // The fetcher is shared and outlives the watch: its reference stays.
        let refs = || Arc::strong_count(&reg.inner);
        crate::common::assert_follow_ends_with_last_watch(&reg, life, "c", 0, refs).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            life.hub().clusters().is_empty(),
            "the fetcher published a cluster nobody watches"
        );
        reg.close().await.unwrap();
    }

    #[test]
    fn service_url_forms() {
        let u = parse_urls("http://127.0.0.1:8761/eureka/").unwrap();
        assert_eq!(u[0].as_str(), "http://127.0.0.1:8761/eureka");
        let u = parse_urls("a:1/eureka, http://b:2/eureka").unwrap();
        assert_eq!(u.len(), 2);
        assert_eq!(u[0].as_str(), "http://a:1/eureka");
        assert!(
            parse_urls(" ")
                .unwrap_err()
                .to_string()
                .contains("serviceUrl is required")
        );
        assert!(parse_urls("ftp://x/eureka").is_err());
    }
}
