//! Talking to the Consul agent: the `serverAddr` base URL, one HTTP call (with the ACL
//! token and `X-Consul-Index`), and the agent calls built on it (register, deregister).
//! Separate because the keeper, the watches and the registry operations all go through
//! it.

use std::time::Duration;

use meshline_registry_core::RegistryError;
use meshline_registry_core::redact::{SHOWN_BYTES, truncate};
use reqwest::{Method, StatusCode, Url};
use serde_json::Value;

use super::{Inner, KIND};
use crate::common::{error_chain, read_capped, split_addrs};

/// Timeout of every non-blocking request.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// What a failed agent call looked like.
pub(super) enum CallError {
    /// The agent answered with this status and text.
    Status(StatusCode, String),
    /// No answer (connection refused, reset, timeout...).
    Transport(String),
}

impl CallError {
    /// The registry error of `op` against the agent at `server`.
    pub(super) fn into_registry(self, server: &str, op: &str) -> RegistryError {
        RegistryError::unavailable(KIND, server, format!("{op}: {}", self.describe()))
    }

    pub(super) fn describe(&self) -> String {
        match self {
            // Truncated: the body is whatever the server chose to send.
            CallError::Status(s, t) => {
                format!("agent answered {s}: {}", truncate(t.trim(), SHOWN_BYTES))
            }
            CallError::Transport(t) => t.clone(),
        }
    }
}
pub(super) fn parse_base(addr: &str) -> Result<Url, RegistryError> {
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
    /// The agent's address for messages and logs, without a password.
    pub(super) fn server(&self) -> &str {
        &self.shown
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
    pub(super) async fn call(
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
        let bytes = read_capped(resp, self.max_body)
            .await
            .map_err(CallError::Transport)?;
        if status != StatusCode::OK {
            return Err(CallError::Status(
                status,
                String::from_utf8_lossy(&bytes).into_owned(),
            ));
        }
        Ok((bytes, index))
    }

    pub(super) async fn put_registration(&self, body: &Value) -> Result<(), CallError> {
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
    pub(super) async fn deregister(&self, id: &str) -> Result<(), CallError> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
