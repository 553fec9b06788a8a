//! What the two Seata-server backends (`raft`, `seata`/namingserver) share: a list of
//! HTTP servers tried in turn (the one that answered last first), one call with a
//! capped body, the console login ([`Login`]), and the reading of Seata's `Node` JSON
//! (`common/src/main/java/org/apache/seata/common/metadata/Node.java`) into an
//! [`Instance`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use meshline_registry_core::tls::TlsSettings;
use meshline_registry_core::{Instance, RegistryError};
use reqwest::StatusCode;
use serde_json::Value;

use crate::common::{error_chain, read_capped, split_addrs};
use crate::tls::TlsFeature;

pub(crate) mod follow;
mod login;

pub(crate) use login::{Login, LoginError};

/// An HTTP server list, `host:port` or `http(s)://host:port` each, tried in turn.
#[derive(Debug)]
pub(crate) struct Servers {
    /// Base URLs without a trailing `/`.
    bases: Vec<String>,
    /// The index of the server that answered last: asked first.
    current: AtomicUsize,
}

impl Servers {
    /// Parses `list` (comma / semicolon separated) of `key`, with `https://` in front
    /// of bare addresses when `tls` is on.
    pub(crate) fn parse(list: &str, tls: bool, key: &str) -> Result<Self, RegistryError> {
        let mut bases = Vec::new();
        for a in split_addrs(list) {
            let url = crate::tls::http_scheme(&a, tls, key)?;
            let parsed = reqwest::Url::parse(&url).map_err(|e| {
                RegistryError::Config(format!("{key} `{a}` is not host:port or a URL: {e}"))
            })?;
            if parsed.scheme() != "http" && parsed.scheme() != "https" {
                return Err(RegistryError::Config(format!(
                    "{key} `{a}`: the scheme must be http or https"
                )));
            }
            if parsed.host_str().is_none() {
                return Err(RegistryError::Config(format!("{key} `{a}` has no host")));
            }
            bases.push(url.trim_end_matches('/').to_string());
        }
        if bases.is_empty() {
            return Err(RegistryError::Config(format!("{key} is empty")));
        }
        Ok(Servers {
            bases,
            current: AtomicUsize::new(0),
        })
    }

    /// The base URLs in the order to try them: the last one that answered first.
    pub(crate) fn in_order(&self) -> Vec<String> {
        let start = self.current.load(Ordering::Relaxed) % self.bases.len();
        (0..self.bases.len())
            .map(|i| self.bases[(start + i) % self.bases.len()].clone())
            .collect()
    }

    /// Remembers that `base` answered: it is asked first from now on.
    pub(crate) fn answered(&self, base: &str) {
        if let Some(i) = self.bases.iter().position(|b| b == base) {
            self.current.store(i, Ordering::Relaxed);
        }
    }

    /// Every base URL, in configuration order.
    #[cfg_attr(not(feature = "namingserver"), allow(dead_code))]
    pub(crate) fn all(&self) -> &[String] {
        &self.bases
    }

    /// The list as messages show it (comma-separated, no password can be in it:
    /// these servers take none in the URL).
    pub(crate) fn shown(&self) -> String {
        meshline_registry_core::redact::redact_userinfo(&self.bases.join(","))
    }
}

/// Locks `m`, going on after a panic elsewhere (the data is plain state).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One HTTP answer: status and (capped) body.
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: StatusCode,
    pub body: Vec<u8>,
}

impl Reply {
    /// The body as text, cut to a length fit for a message.
    pub(crate) fn shown_body(&self) -> String {
        meshline_registry_core::redact::truncate(
            String::from_utf8_lossy(&self.body).trim(),
            meshline_registry_core::redact::SHOWN_BYTES,
        )
        .into_owned()
    }
}

/// Sends `req` with `timeout`, reading at most `cap` body bytes. `Err` is a transport
/// failure (refused, reset, timed out, body too large), its causes joined.
pub(crate) async fn send(
    req: reqwest::RequestBuilder,
    timeout: Duration,
    cap: usize,
) -> Result<Reply, String> {
    let resp = req
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| error_chain(&e))?;
    let status = resp.status();
    let body = read_capped(resp, cap).await?;
    Ok(Reply { status, body })
}

/// The server list of `key` (`server_addr`) and the HTTP client for it: TLS turns on
/// when `tls` asks for it or an address is `https://`. Returns the list, the client and
/// whether TLS is on.
pub(crate) fn connect_parts(
    server_addr: &str,
    tls: &TlsSettings,
    key: &str,
    kind: &'static str,
    section: &str,
    feature: TlsFeature,
) -> Result<(Servers, reqwest::Client, bool), RegistryError> {
    let mut tls = tls.clone();
    if server_addr.contains("https://") {
        tls.asked_by_url(server_addr);
    }
    let servers = Servers::parse(server_addr, tls.enabled, key)?;
    let http = client(&tls, kind, section, feature, &servers.shown())?;
    Ok((servers, http, tls.enabled))
}

/// The reqwest client of a backend: a 3 s connect timeout, and TLS from `tls` (refused,
/// naming `feature`, in a build without it).
pub(crate) fn client(
    tls: &TlsSettings,
    kind: &'static str,
    section: &str,
    feature: TlsFeature,
    shown: &str,
) -> Result<reqwest::Client, RegistryError> {
    let material = crate::tls::prepare(tls, kind, section, feature)?;
    crate::common::http_client(material, kind, section, shown)
}

/// An `Endpoint` (`{host, port}`) of a Seata `Node`, checked.
pub(crate) fn endpoint(node: &Value, field: &str) -> Result<(String, u16), String> {
    let e = node
        .get(field)
        .filter(|e| e.is_object())
        .ok_or_else(|| format!("no `{field}` endpoint"))?;
    let host = e
        .get("host")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .ok_or_else(|| format!("`{field}.host` is missing or empty"))?;
    let port = e
        .get("port")
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("`{field}.port` is not a number"))?;
    let port = u16::try_from(port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("`{field}.port` {port} is not in 1..=65535"))?;
    Ok((host.to_string(), port))
}

/// A Seata `Node` (raft metadata) or `NamingServerNode` (namingserver) as an instance:
/// the **transaction** endpoint (the TC's RPC port, what clients connect to), the
/// weight (Seata's `double`, default 1.0, rounded; at least 1 when positive), and the
/// string entries of `metadata` plus `role` and `group` when present. `zone` in the
/// metadata becomes the instance's zone.
pub(crate) fn node_instance(node: &Value) -> Result<Instance, String> {
    if !node.is_object() {
        return Err("a node is not a JSON object".into());
    }
    let (host, port) = endpoint(node, "transaction")?;
    let mut inst = Instance::new(&host, port).map_err(|e| e.to_string())?;
    if let Some(w) = node.get("weight").and_then(Value::as_f64)
        && w.is_finite()
        && w > 0.0
    {
        inst = inst.with_weight((w.round().min(f64::from(u32::MAX)) as u32).max(1));
    }
    for key in ["role", "group"] {
        if let Some(v) = node.get(key).and_then(Value::as_str) {
            inst = inst.with_metadata(key, v);
        }
    }
    if let Some(m) = node.get("metadata").and_then(Value::as_object) {
        inst = crate::common::with_json_metadata(inst, m);
    }
    Ok(inst)
}

/// Parses `nodes` (a JSON array of Seata nodes), skipping malformed ones through the
/// shared, rate-limited report (naming `kind`, `cluster` and the node).
pub(crate) fn nodes_of(kind: &str, cluster: &str, nodes: &[Value]) -> Vec<(Instance, Value)> {
    let mut out = Vec::new();
    for n in nodes {
        match node_instance(n) {
            Ok(i) => out.push((i, n.clone())),
            Err(reason) => {
                let text = n.to_string();
                meshline_registry_core::redact::malformed_entry(
                    kind,
                    cluster,
                    b"node",
                    text.as_bytes(),
                    &reason,
                );
            }
        }
    }
    out
}

/// Parses `body`, the answer about `name` (`what` says which: `discovery`,
/// `metadata`), as the JSON object both Seata servers send, with its `term` (0 when
/// absent).
pub(crate) fn parse_answer(
    what: &str,
    name: &str,
    body: &[u8],
) -> Result<(serde_json::Map<String, Value>, i64), String> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| format!("{what} of `{name}` is not JSON: {e}"))?;
    let Value::Object(obj) = v else {
        return Err(format!("{what} of `{name}` is not a JSON object"));
    };
    let term = obj.get("term").and_then(Value::as_i64).unwrap_or(0);
    Ok((obj, term))
}

/// Checks that each of Seata's shipped client files, with `registry.<section>.serverAddr`
/// set to `server_addr` (some ship it empty, an error once the backend is used), reads
/// into a backend's settings with no warning: `warnings` reads the settings and
/// returns their warnings.
#[cfg(test)]
pub(crate) fn assert_shipped_files_read_without_warnings(
    section: &str,
    server_addr: &str,
    warnings: impl Fn(&meshline_registry_core::Config) -> Vec<String>,
) {
    for &name in meshline_testkit::SEATA_CLIENT_FILES {
        let mut c = meshline_testkit::seata_shipped(name);
        c.registry
            .section_mut(section)
            .set("serverAddr", server_addr);
        let w = warnings(&c);
        assert!(w.is_empty(), "{name}: {w:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nodes_parse_and_garbage_is_refused() {
        let ok = json!({"control":{"host":"10.0.0.1","port":7091},
            "transaction":{"host":"10.0.0.1","port":8091},"weight":2.0,
            "role":"LEADER","group":"default","metadata":{"zone":"z1","n":3}});
        let i = node_instance(&ok).unwrap();
        assert_eq!(i.to_string(), "10.0.0.1:8091");
        assert_eq!(i.weight(), 2);
        assert_eq!(i.zone(), Some("z1"));
        assert_eq!(i.metadata().get("role").map(String::as_str), Some("LEADER"));
        assert!(!i.metadata().contains_key("n"));
        for bad in [
            json!(1),
            json!({"transaction":{"host":"10.0.0.1","port":0}}),
            json!({"transaction":{"host":"","port":8091}}),
            json!({"transaction":{"host":"10.0.0.1","port":70000}}),
            json!({"transaction":{"host":"bad host!","port":8091}}),
            json!({"control":{"host":"10.0.0.1","port":7091}}),
        ] {
            assert!(node_instance(&bad).is_err(), "{bad}");
        }
        let w = node_instance(&json!({"transaction":{"host":"h","port":1},"weight":0.2})).unwrap();
        assert_eq!(w.weight(), 1);
    }

    #[test]
    fn server_lists() {
        let s = Servers::parse("a:1, b:2;http://c:3/", false, "k").unwrap();
        assert_eq!(s.in_order(), ["http://a:1", "http://b:2", "http://c:3"]);
        s.answered("http://b:2");
        assert_eq!(s.in_order(), ["http://b:2", "http://c:3", "http://a:1"]);
        assert!(Servers::parse(" , ", false, "k").is_err());
        assert!(Servers::parse("ftp://x:1", false, "k").is_err());
        let t = Servers::parse("a:1", true, "k").unwrap();
        assert_eq!(t.all(), ["https://a:1"]);
        assert!(Servers::parse("http://a:1", true, "k").is_err());
    }
}
