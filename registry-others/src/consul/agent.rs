//! Talking to the Consul agent: the [`Agent`] connection (the `serverAddr` base URL,
//! TLS, the ACL token), one HTTP call (with `X-Consul-Index`), and the agent calls built
//! on it (register, deregister). Separate because the keeper, the watches, the registry
//! operations and the config centre (`config.consul.*`) all go through it.

use std::time::Duration;

use meshline_registry_core::RegistryError;
use reqwest::{Method, StatusCode, Url};
use serde_json::Value;

use super::{ConsulSettings, Inner, KIND};
pub(super) use crate::common::CallError;
use crate::common::{Call, error_chain, read_capped, split_addrs};
use crate::tls::tls_feature;

/// Timeout of every non-blocking request.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The base URL of `addr` (the first of a list; `host:port` means `http://`); `key`
/// names the setting in messages (`registry.consul.serverAddr`).
pub(super) fn parse_base(addr: &str, key: &str) -> Result<Url, RegistryError> {
    let first = split_addrs(addr)
        .into_iter()
        .next()
        .ok_or_else(|| RegistryError::Config(format!("{key} is empty")))?;
    let with_scheme = if first.contains("://") {
        first.to_string()
    } else {
        format!("http://{first}")
    };
    let url = Url::parse(&with_scheme).map_err(|e| {
        RegistryError::Config(format!("{key} `{addr}` is not host:port or a URL: {e}"))
    })?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(RegistryError::Config(format!(
            "{key} `{addr}`: scheme must be http or https"
        )));
    }
    Ok(url)
}
/// A connection to one Consul agent: what every call needs.
pub(super) struct Agent {
    pub(super) base: Url,
    token: Option<meshline_registry_core::config::Secret>,
    http: reqwest::Client,
    /// `maxBodyBytes`: the largest answer read.
    max_body: usize,
    /// The base URL as messages show it: `user:pass@` redacted.
    shown: String,
}

impl Agent {
    /// The HTTP client and base URL for settings `c` (`registry.consul.*`, or
    /// `config.consul.*`; `prefix` names the section in messages), checked with
    /// `GET /v1/status/leader`.
    pub(super) async fn connect(c: &ConsulSettings, prefix: &str) -> Result<Agent, RegistryError> {
        let mut tls = c.tls.clone();
        if c.server_addr.trim_start().starts_with("https://") {
            tls.asked_by_url(&c.server_addr);
        }
        let material = crate::tls::prepare(&tls, KIND, "consul", tls_feature!("consul-tls"))?;
        let key = format!("{prefix}.serverAddr");
        let base = parse_base(
            &crate::tls::http_scheme(&c.server_addr, tls.enabled, &key)?,
            &key,
        )?;
        let http = crate::common::http_client(material, KIND, "consul", &c.server_addr)?;
        let agent = Agent {
            base,
            token: c.acl_token.clone(),
            max_body: c.max_body_bytes,
            shown: meshline_registry_core::redact::redact_userinfo(
                c.server_addr.trim().trim_end_matches('/'),
            ),
            http,
        };
        agent
            .call(
                Call::new(Method::GET, &["v1", "status", "leader"]),
                REQUEST_TIMEOUT,
            )
            .await
            .map_err(|e| e.into_registry(KIND, agent.server(), "connect"))?;
        Ok(agent)
    }

    /// The agent's address for messages and logs, without a password.
    pub(super) fn server(&self) -> &str {
        &self.shown
    }

    fn url(&self, call: &Call<'_>) -> Url {
        let mut url = self.base.clone();
        // A base with a trailing slash (`http://host:8500/consul/`) ends in an empty
        // segment: the call's path replaces it rather than following it.
        if let Ok(mut p) = url.path_segments_mut() {
            p.pop_if_empty();
        }
        call.url(url)
    }

    /// One HTTP call; `Ok` carries the body and the `X-Consul-Index` (0 when absent).
    pub(super) async fn call(
        &self,
        call: Call<'_>,
        timeout: Duration,
    ) -> Result<(Vec<u8>, u64), CallError> {
        let (status, bytes, index) = self.send(call, timeout).await?;
        if status != StatusCode::OK {
            return Err(CallError::status(status, &bytes));
        }
        Ok((bytes, index))
    }

    /// One HTTP call, whatever its status: the status, the body and the
    /// `X-Consul-Index` (0 when absent). Only transport failures are errors (a KV read
    /// of a missing key is a 404 that still carries an index).
    pub(super) async fn send(
        &self,
        call: Call<'_>,
        timeout: Duration,
    ) -> Result<(StatusCode, Vec<u8>, u64), CallError> {
        let mut req = self
            .http
            .request(call.method.clone(), self.url(&call))
            .timeout(timeout);
        if let Some(t) = &self.token {
            req = req.header("X-Consul-Token", t.expose());
        }
        let resp = call
            .with_body(req)
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
        Ok((status, bytes, index))
    }
}

impl Inner {
    /// The agent's address for messages and logs, without a password.
    pub(super) fn server(&self) -> &str {
        self.agent.server()
    }

    pub(super) async fn put_registration(&self, body: &Value) -> Result<(), CallError> {
        self.agent
            .call(
                Call::new(Method::PUT, &["v1", "agent", "service", "register"]).body(body),
                REQUEST_TIMEOUT,
            )
            .await
            .map(|_| ())
    }

    /// `PUT /v1/agent/service/deregister/<id>`. The agent's 404 "Unknown service ID"
    /// (it restarted without its data, or reaped the service) means the service is
    /// already gone: that is success, not a removal to retry.
    pub(super) async fn deregister(&self, id: &str) -> Result<(), CallError> {
        match self
            .agent
            .call(
                Call::new(Method::PUT, &["v1", "agent", "service", "deregister", id]),
                REQUEST_TIMEOUT,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(CallError::Status(StatusCode::NOT_FOUND, text)) if is_unknown_service(&text) => {
                tracing::info!(
                    registry = KIND,
                    id,
                    "the agent no longer holds the service: already deregistered"
                );
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// Whether a 404's `text` is the agent's "Unknown service ID ..." (the text Consul's
/// own anti-entropy relies on), not some other 404 (a proxy's, a wrong path's).
fn is_unknown_service(text: &str) -> bool {
    text.contains("Unknown service")
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: &str = "registry.consul.serverAddr";

    #[test]
    fn server_addr_forms() {
        assert_eq!(
            parse_base("127.0.0.1:8500", K).unwrap().as_str(),
            "http://127.0.0.1:8500/"
        );
        assert_eq!(
            parse_base(" https://consul.example:8501 ", K)
                .unwrap()
                .as_str(),
            "https://consul.example:8501/"
        );
        assert_eq!(
            parse_base("10.0.0.1:8500,10.0.0.2:8500", K)
                .unwrap()
                .as_str(),
            "http://10.0.0.1:8500/"
        );
        assert!(parse_base("", K).is_err());
        assert!(parse_base("ftp://x:1", K).is_err());
    }

    #[test]
    fn only_consuls_unknown_service_404_is_already_gone() {
        assert!(is_unknown_service(
            "Unknown service ID \"c-10.0.0.1:8091\". Ensure that the service ID is passed, not the service name."
        ));
        // Consul before the "ID" wording.
        assert!(is_unknown_service("Unknown service \"c-10.0.0.1:8091\""));
        assert!(!is_unknown_service("404 page not found\n"));
    }
}
