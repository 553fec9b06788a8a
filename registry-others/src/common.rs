//! Small helpers shared by the backends of this crate.

use meshline_registry_core::{Config, EmptyProtection};

/// The empty-list policy configured by `registry.empty-protection`.
pub(crate) fn empty_policy(config: &Config) -> EmptyProtection {
    meshline_registry_core::EmptyProtection::of(&config.registry)
}

/// Splits a `host:port[,host:port...]` list (`;` accepted too), trimming blanks.
pub(crate) fn split_addrs(text: &str) -> Vec<String> {
    text.split([',', ';'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// What a failed HTTP call to Consul's agent or a Eureka server looked like.
#[cfg(any(feature = "consul", feature = "eureka"))]
pub(crate) enum CallError {
    /// The server answered with this status and text.
    Status(reqwest::StatusCode, String),
    /// No answer (connection refused, reset, timeout...).
    Transport(String),
}

#[cfg(any(feature = "consul", feature = "eureka"))]
impl CallError {
    /// The status and the server's text, truncated (the body is whatever the server
    /// chose to send), or why there was no answer.
    pub(crate) fn describe(&self) -> String {
        use meshline_registry_core::redact::{SHOWN_BYTES, truncate};
        match self {
            CallError::Status(s, t) => format!("HTTP {s}: {}", truncate(t.trim(), SHOWN_BYTES)),
            CallError::Transport(t) => t.clone(),
        }
    }

    /// The error of an answer with an unexpected `status`: the body is kept as text
    /// (lossily: a server's error page need not be UTF-8).
    pub(crate) fn status(status: reqwest::StatusCode, body: &[u8]) -> CallError {
        CallError::Status(status, String::from_utf8_lossy(body).into_owned())
    }

    /// The registry error of `op` against `server`, for the `kind` backend.
    pub(crate) fn into_registry(
        self,
        kind: &'static str,
        server: &str,
        op: &str,
    ) -> meshline_registry_core::RegistryError {
        meshline_registry_core::RegistryError::unavailable(
            kind,
            server,
            format!("{op}: {}", self.describe()),
        )
    }
}

/// One call to Consul's agent or a Eureka server: the method, the path segments below
/// the server's base URL, the query and the JSON body. One value, so the layers a call
/// goes through (status checks, failover, Consul's index) hand it on whole.
#[cfg(any(feature = "consul", feature = "eureka"))]
#[derive(Debug, Clone)]
pub(crate) struct Call<'a> {
    /// The HTTP method.
    pub(crate) method: reqwest::Method,
    segments: &'a [&'a str],
    query: &'a [(&'a str, String)],
    body: Option<&'a serde_json::Value>,
}

#[cfg(any(feature = "consul", feature = "eureka"))]
impl<'a> Call<'a> {
    /// `method` on `segments`, with no query and no body.
    pub(crate) fn new(method: reqwest::Method, segments: &'a [&'a str]) -> Self {
        Call {
            method,
            segments,
            query: &[],
            body: None,
        }
    }

    /// The same call with `query` as its query pairs.
    pub(crate) fn query(self, query: &'a [(&'a str, String)]) -> Self {
        Call { query, ..self }
    }

    /// The same call with `body` as its JSON content.
    pub(crate) fn body(self, body: &'a serde_json::Value) -> Self {
        Call {
            body: Some(body),
            ..self
        }
    }

    /// `base` with the segments appended to its path (each percent-encoded as one
    /// segment) and the query appended as pairs: the URL of the call on that server.
    pub(crate) fn url(&self, mut base: reqwest::Url) -> reqwest::Url {
        if let Ok(mut p) = base.path_segments_mut() {
            p.extend(self.segments);
        }
        if !self.query.is_empty() {
            let mut q = base.query_pairs_mut();
            for (k, v) in self.query {
                q.append_pair(k, v);
            }
        }
        base
    }

    /// `req` with the body, when there is one, as its JSON content.
    pub(crate) fn with_body(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self.body {
            Some(b) => req
                .header("Content-Type", "application/json")
                .body(b.to_string()),
            None => req,
        }
    }
}

/// The metadata a Consul service or a Eureka instance registered for `instance`
/// carries: its own entries, `weight` (a string, as Seata's Java clients write it) and
/// `zone` when it has one.
#[cfg(any(feature = "consul", feature = "eureka"))]
pub(crate) fn json_metadata(
    instance: &meshline_registry_core::Instance,
) -> serde_json::Map<String, serde_json::Value> {
    use serde_json::Value;
    let mut meta: serde_json::Map<String, Value> = instance
        .metadata()
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    meta.insert(
        "weight".into(),
        Value::String(instance.weight().to_string()),
    );
    if let Some(z) = instance.zone() {
        meta.insert("zone".into(), Value::String(z.to_string()));
    }
    meta
}

/// `inst` with the string entries of a JSON metadata map (`Meta` of a Consul
/// service, `metadata` of a Seata node) as its metadata; a non-empty `zone` entry is
/// also its zone. Entries of other JSON types carry nothing meshline reads.
#[cfg(any(feature = "consul", feature = "raft", feature = "namingserver"))]
pub(crate) fn with_json_metadata(
    mut inst: meshline_registry_core::Instance,
    map: &serde_json::Map<String, serde_json::Value>,
) -> meshline_registry_core::Instance {
    for (k, v) in map {
        if let Some(s) = v.as_str() {
            if k == "zone" && !s.is_empty() {
                inst = inst.with_zone(s);
            }
            inst = inst.with_metadata(k.clone(), s);
        }
    }
    inst
}

/// `e` and its sources, `: `-separated (reqwest hides the cause, e.g. "Connection
/// refused", in its sources).
#[cfg(feature = "_http")]
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// The default of `maxBodyBytes` (consul, eureka): 16 MiB, above what a healthy
/// registry sends (an Eureka instance or a Consul health entry is about 1 KB of JSON,
/// so 10,000 members are about 10 MB), while a broken or hostile registry can no
/// longer make us buffer without bound.
#[cfg(feature = "_http")]
pub(crate) const DEFAULT_MAX_BODY: usize = 16 << 20;

/// Reads `section`'s `maxBodyBytes` (a size: `16MiB`, `1048576`), default
/// [`DEFAULT_MAX_BODY`].
#[cfg(feature = "_http")]
pub(crate) fn max_body_bytes(
    r: &meshline_registry_core::config::SectionReader<'_>,
    section: &str,
) -> Result<usize, meshline_registry_core::RegistryError> {
    match r.optional("maxBodyBytes") {
        None => Ok(DEFAULT_MAX_BODY),
        Some(v) => meshline_registry_core::config::parse_bytes(&v).map_err(|e| {
            meshline_registry_core::RegistryError::Config(format!(
                "registry.{section}.maxBodyBytes: {e}"
            ))
        }),
    }
}

/// The reqwest client of an HTTP backend: a 3 s connect timeout, and TLS with
/// `material` (from [`crate::tls::prepare`], which refuses TLS in a build without it
/// for the backend, so there is material only where its TLS feature is on). `shown`
/// names the server in the error.
#[cfg(feature = "_http")]
pub(crate) fn http_client(
    material: Option<meshline_registry_core::tls::TlsMaterial>,
    kind: &'static str,
    section: &str,
    shown: &str,
) -> Result<reqwest::Client, meshline_registry_core::RegistryError> {
    #[allow(unused_mut)]
    let mut builder = reqwest::Client::builder().connect_timeout(std::time::Duration::from_secs(3));
    #[cfg(feature = "_http-tls")]
    if let Some(m) = &material {
        builder = crate::tls::http_client(builder, m, section)?;
    }
    #[cfg(not(feature = "_http-tls"))]
    let _ = (material, section);
    builder.build().map_err(|e| {
        meshline_registry_core::RegistryError::backend(
            kind,
            shown,
            "cannot build the HTTP client",
            e,
        )
    })
}

/// Reads a response body chunk by chunk, failing as soon as it would exceed `cap`
/// bytes (or at once when its `Content-Length` says so): a registry that answers
/// with an endless or huge body costs at most `cap` bytes of memory.
#[cfg(feature = "_http")]
pub(crate) async fn read_capped(
    mut resp: reqwest::Response,
    cap: usize,
) -> Result<Vec<u8>, String> {
    if let Some(len) = resp.content_length()
        && len > cap as u64
    {
        return Err(format!(
            "response body of {len} bytes is larger than maxBodyBytes ({cap} bytes); not read"
        ));
    }
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| error_chain(&e))? {
        if out.len() + chunk.len() > cap {
            return Err(format!(
                "response body is larger than maxBodyBytes ({cap} bytes); stopped reading"
            ));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// Secrets and bounded work against a hostile HTTP server: an endless body, an error
/// body of a megabyte, and a `serviceUrl` with a password.
#[cfg(all(test, feature = "consul", feature = "eureka"))]
mod hostile_http;

/// Proves that a backend's follow task for `cluster` ends with the last [`Watch`] on
/// it: opens two watches, drops them one by one, and checks that the name stays
/// followed while one is left, then leaves both the lifecycle and the hub. `refs`
/// counts the references to the backend's shared state; the follow task holds
/// `follow_refs` of them (its `Arc<Inner>`), which must be released when it ends.
///
/// [`Watch`]: meshline_registry_core::Watch
#[cfg(test)]
pub(crate) async fn assert_follow_ends_with_last_watch<R>(
    registry: &R,
    life: &meshline_registry_core::Lifecycle,
    cluster: &str,
    follow_refs: usize,
    refs: impl Fn() -> usize,
) where
    R: meshline_registry_core::RegistryService,
{
    use std::time::Duration;
    const WITHIN: Duration = Duration::from_secs(10);
    let mut a = registry.watch(cluster).await.expect("first watch");
    let b = registry.watch(cluster).await.expect("second watch");
    a.next().await.expect("first snapshot");
    assert_eq!(life.watched().await, vec![cluster.to_string()]);
    let during = refs();
    drop(a);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(life.watched().await.len(), 1, "one watch is left");
    assert_eq!(refs(), during, "the follow task runs while a watch is left");
    drop(b);
    meshline_testkit::watch::eventually(WITHIN, "the follow task to end", || async {
        life.watched().await.is_empty() && refs() + follow_refs == during
    })
    .await;
    assert!(life.hub().clusters().is_empty(), "the hub forgot {cluster}");
}
