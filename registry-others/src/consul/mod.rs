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
//! (`PUT /v1/agent/service/deregister/<id>`). Dropping the registry does the same (best
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

mod parse;

use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use async_trait::async_trait;
use meshline_registry_core::{
    Backoff, Config, Instance, Lifecycle, Registrations, RegistryError, RegistryService, Watch,
    WatchScope,
};
use reqwest::{Method, StatusCode, Url};
use serde_json::Value;

use crate::common::{empty_policy, error_chain, split_addrs};

mod settings;
pub use settings::ConsulSettings;
const KIND: &str = "consul";

/// How long one blocking query waits on the agent before it returns unchanged.
const BLOCKING_WAIT: Duration = Duration::from_secs(30);

/// Extra time on top of `wait` (Consul adds up to wait/16 of jitter) before our HTTP
/// client gives up on a blocking query.
const BLOCKING_MARGIN: Duration = Duration::from_secs(5);

/// Timeout of every non-blocking request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

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
            .field("base", &self.inner.base.as_str())
            .field("ttl", &self.inner.ttl)
            .finish()
    }
}

struct Inner {
    base: Url,
    token: Option<String>,
    http: reqwest::Client,
    ttl: Duration,
    deregister_after: Duration,
    wait: Duration,
    /// Service ID -> its registration body (written again when the agent lost it).
    regs: Registrations<Value>,
    life: Lifecycle,
}

/// What a failed agent call looked like.
enum CallError {
    /// The agent answered with this status and text.
    Status(StatusCode, String),
    /// No answer (connection refused, reset, timeout...).
    Transport(String),
}

impl CallError {
    /// The registry error of `op` against the agent at `server`.
    fn into_registry(self, server: &str, op: &str) -> RegistryError {
        RegistryError::unavailable(KIND, server, format!("{op}: {}", self.describe()))
    }

    fn describe(&self) -> String {
        match self {
            CallError::Status(s, t) => format!("agent answered {s}: {}", t.trim()),
            CallError::Transport(t) => t.clone(),
        }
    }
}

impl ConsulRegistry {
    /// Connects to the agent named by `registry.consul.serverAddr` (checked with
    /// `GET /v1/status/leader`) and starts the TTL keeper.
    pub async fn connect(config: &Config) -> Result<Self, RegistryError> {
        let c = ConsulSettings::from_config(config)?;
        let base = parse_base(&c.server_addr)?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(3))
            .build()
            .map_err(|e| {
                RegistryError::backend(KIND, &c.server_addr, "cannot build the HTTP client", e)
            })?;
        if c.ttl.is_zero() {
            return Err(RegistryError::Config(
                "registry.consul.ttl must be greater than 0".into(),
            ));
        }
        let inner = Arc::new(Inner {
            base,
            token: c.acl_token.clone(),
            http,
            ttl: c.ttl,
            deregister_after: c.deregister_critical_after,
            wait: BLOCKING_WAIT,
            regs: Registrations::new(),
            life: Lifecycle::new(KIND, empty_policy(config)),
        });
        inner
            .call(
                Method::GET,
                &["v1", "status", "leader"],
                &[],
                None,
                REQUEST_TIMEOUT,
            )
            .await
            .map_err(|e| e.into_registry(inner.server(), "connect"))?;
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
        self.inner.base.as_str()
    }
}

impl Drop for ConsulRegistry {
    /// Stops the background tasks and ends this registry's watches; unless
    /// [`abandon`](ConsulRegistry::abandon)ed, also deregisters our services right away
    /// (best effort, on the current tokio runtime if there is one) instead of leaving
    /// them to TTL expiry.
    fn drop(&mut self) {
        let inner = self.inner.clone();
        self.inner
            .life
            .close_on_drop(move || async move { deregister_all(&inner).await });
    }
}

fn parse_base(addr: &str) -> Result<Url, RegistryError> {
    let first = split_addrs(addr)
        .into_iter()
        .next()
        .ok_or_else(|| RegistryError::Config("registry.consul.serverAddr is empty".into()))?;
    let with_scheme = if first.contains("://") {
        first.to_string()
    } else {
        format!("http://{first}")
    };
    let url = Url::parse(&with_scheme).map_err(|e| {
        RegistryError::Config(format!(
            "registry.consul.serverAddr `{addr}` is not host:port or a URL: {e}"
        ))
    })?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(RegistryError::Config(format!(
            "registry.consul.serverAddr `{addr}`: scheme must be http or https"
        )));
    }
    Ok(url)
}

impl Inner {
    /// The agent's address, for error messages.
    fn server(&self) -> &str {
        self.base.as_str().trim_end_matches('/')
    }

    fn url(&self, segments: &[&str], query: &[(&str, String)]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut p) = url.path_segments_mut() {
            p.pop_if_empty();
            p.extend(segments);
        }
        if !query.is_empty() {
            let mut q = url.query_pairs_mut();
            for (k, v) in query {
                q.append_pair(k, v);
            }
        }
        url
    }

    /// One HTTP call; `Ok` carries the body and the `X-Consul-Index` (0 when absent).
    async fn call(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<(Vec<u8>, u64), CallError> {
        let mut req = self
            .http
            .request(method, self.url(segments, query))
            .timeout(timeout);
        if let Some(t) = &self.token {
            req = req.header("X-Consul-Token", t);
        }
        if let Some(b) = body {
            req = req
                .header("Content-Type", "application/json")
                .body(b.to_string());
        }
        let resp = req
            .send()
            .await
            .map_err(|e| CallError::Transport(error_chain(&e)))?;
        let status = resp.status();
        let index = resp
            .headers()
            .get("x-consul-index")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| CallError::Transport(error_chain(&e)))?
            .to_vec();
        if status != StatusCode::OK {
            return Err(CallError::Status(
                status,
                String::from_utf8_lossy(&bytes).into_owned(),
            ));
        }
        Ok((bytes, index))
    }

    async fn put_registration(&self, body: &Value) -> Result<(), CallError> {
        self.call(
            Method::PUT,
            &["v1", "agent", "service", "register"],
            &[],
            Some(body),
            REQUEST_TIMEOUT,
        )
        .await
        .map(|_| ())
    }

    /// `PUT /v1/agent/service/deregister/<id>`.
    async fn deregister(&self, id: &str) -> Result<(), CallError> {
        self.call(
            Method::PUT,
            &["v1", "agent", "service", "deregister", id],
            &[],
            None,
            REQUEST_TIMEOUT,
        )
        .await
        .map(|_| ())
    }

    /// `GET /v1/health/service/<cluster>?passing=true&tag=services[&index&wait]`.
    async fn query(
        &self,
        cluster: &str,
        block: Option<u64>,
    ) -> Result<(Vec<Instance>, u64), String> {
        let mut q = vec![
            ("passing", "true".to_string()),
            ("tag", "services".to_string()),
        ];
        let mut timeout = REQUEST_TIMEOUT;
        if let Some(index) = block {
            q.push(("index", index.to_string()));
            q.push(("wait", format!("{}s", self.wait.as_secs().max(1))));
            timeout = self.wait + self.wait / 16 + BLOCKING_MARGIN;
        }
        let (body, index) = self
            .call(
                Method::GET,
                &["v1", "health", "service", cluster],
                &q,
                None,
                timeout,
            )
            .await
            .map_err(|e| e.describe())?;
        let list = parse::parse_health(cluster, &body)?;
        Ok((list, index))
    }
}

/// Keeps every registration's TTL check passing; re-registers on 404.
async fn keeper(inner: Arc<Inner>) {
    let period = (inner.ttl / 3).max(Duration::from_millis(50));
    let mut backoff = Backoff::new(Duration::from_millis(100), period);
    let mut delay = period;
    loop {
        if !inner.life.sleep(delay).await {
            return;
        }
        let mut failed = false;
        for (id, body) in inner.regs.snapshot().await {
            let cid = parse::check_id(&id);
            let r = inner
                .call(
                    Method::PUT,
                    &["v1", "agent", "check", "pass", &cid],
                    &[],
                    None,
                    REQUEST_TIMEOUT,
                )
                .await;
            match r {
                Ok(_) => {}
                Err(CallError::Status(StatusCode::NOT_FOUND, _)) => {
                    // Still ours? unregister may have raced with this round.
                    if !inner.regs.contains(&id).await {
                        continue;
                    }
                    match inner.put_registration(&body).await {
                        Ok(()) => tracing::info!(
                            registry = KIND,
                            service_id = id,
                            "the agent had lost our service; registered it again"
                        ),
                        Err(e) => {
                            failed = true;
                            tracing::warn!(
                                registry = KIND,
                                service_id = id,
                                error = e.describe(),
                                "re-registration failed; retrying"
                            );
                        }
                    }
                }
                Err(e) => {
                    failed = true;
                    tracing::warn!(
                        registry = KIND,
                        service_id = id,
                        error = e.describe(),
                        "TTL pass failed; retrying"
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

/// The index of the next query, after one made with `prev` (0: a plain read) answered
/// `new` (Consul's rules, docs/registry-wire.md §2.5): reset to 0 (a plain read) when the index went
/// backwards, otherwise follow it, but never block with index 0.
fn next_index(prev: u64, new: u64) -> u64 {
    if new < prev { 0 } else { new.max(1) }
}

/// The blocking-query loop of one cluster, until `scope` stops (the client closed or
/// the last watch on the cluster was dropped: the query in flight is abandoned). `index`
/// 0 means "read without blocking".
async fn watch_loop(inner: Arc<Inner>, scope: WatchScope, mut index: u64) {
    let cluster = scope.cluster();
    let mut backoff = Backoff::default();
    loop {
        let started = StdInstant::now();
        let block = (index > 0).then_some(index);
        let res = tokio::select! {
            _ = scope.stopped() => return,
            r = inner.query(cluster, block) => r,
        };
        match res {
            Ok((list, new_index)) => {
                backoff.reset();
                scope.mark_connected();
                scope.publish(list);
                let prev = index;
                index = next_index(prev, new_index);
                if index == 0 {
                    tracing::info!(
                        registry = KIND,
                        cluster,
                        prev,
                        new_index,
                        "Consul index went backwards (agent restarted?); reading afresh"
                    );
                }
                // Rate-limit a query that came back at once without a newer index.
                if new_index <= prev
                    && started.elapsed() < Duration::from_millis(50)
                    && !scope.sleep(Duration::from_millis(50)).await
                {
                    return;
                }
            }
            Err(reason) => {
                scope.mark_stale(&reason);
                // After a failure we know nothing of the agent's state (it may have
                // restarted empty, with a lower index that a blocking query would sit
                // on until `wait` ran out): the next query is a plain read.
                index = 0;
                if !scope.sleep(backoff.next_delay()).await {
                    return;
                }
            }
        }
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
        inner
            .put_registration(&body)
            .await
            .map_err(|e| e.into_registry(inner.server(), "register"))?;
        inner.regs.insert(id, body).await;
        Ok(())
    }

    async fn unregister(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        let inner = &self.inner;
        inner.life.check_open()?;
        let id = parse::service_id(cluster, instance);
        inner.regs.remove(&id).await;
        inner
            .deregister(&id)
            .await
            .map_err(|e| e.into_registry(inner.server(), "unregister"))
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
}

/// Deregisters every service we registered (close and drop); every failure is logged,
/// the first is returned after trying them all.
async fn deregister_all(inner: &Inner) -> Result<(), RegistryError> {
    inner
        .regs
        .remove_all(KIND, |id, _| async move {
            inner
                .deregister(&id)
                .await
                .map_err(|e| e.into_registry(inner.server(), "deregister"))
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_rules() {
        assert_eq!(next_index(10, 12), 12);
        assert_eq!(next_index(10, 10), 10, "a wait timeout keeps the index");
        assert_eq!(next_index(10, 3), 0, "backwards: read afresh");
        assert_eq!(next_index(0, 3), 3);
        assert_eq!(next_index(0, 0), 1, "never block with index 0");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_blocking_query_loop_ends_with_the_last_watch() {
        let agent = meshline_testkit::ConsulDouble::start(Default::default()).unwrap();
        let mut config = Config::default();
        config
            .registry
            .section_mut("consul")
            .set("serverAddr", agent.server_addr());
        let reg = ConsulRegistry::connect(&config).await.unwrap();
        let refs = || Arc::strong_count(&reg.inner);
        crate::common::assert_follow_ends_with_last_watch(&reg, &reg.inner.life, "c", 1, refs)
            .await;
        reg.close().await.unwrap();
    }

    #[test]
    fn server_addr_forms() {
        assert_eq!(
            parse_base("127.0.0.1:8500").unwrap().as_str(),
            "http://127.0.0.1:8500/"
        );
        assert_eq!(
            parse_base(" https://consul.example:8501 ")
                .unwrap()
                .as_str(),
            "https://consul.example:8501/"
        );
        assert_eq!(
            parse_base("10.0.0.1:8500,10.0.0.2:8500").unwrap().as_str(),
            "http://10.0.0.1:8500/"
        );
        assert!(parse_base("").is_err());
        assert!(parse_base("ftp://x:1").is_err());
    }
}
