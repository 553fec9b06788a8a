//! Talking to the Eureka servers: the `serviceUrl` list, one request with failover
//! across it ([`Inner::call`]), status checks, and the REST calls built on them
//! (register, cancel, JSON gets). Separate because every other part (registration,
//! heartbeat, fetcher, lookup) goes through it.

use std::sync::atomic::Ordering;
use std::time::Duration;

use meshline_registry_core::RegistryError;
use reqwest::{Method, StatusCode, Url};
use serde_json::Value;

use super::Inner;
pub(super) use crate::common::CallError;
use crate::common::{Call, error_chain, read_capped, split_addrs};
use meshline_registry_core::redact::redact_userinfo;

/// Timeout of every request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
pub(super) fn parse_urls(text: &str) -> Result<Vec<Url>, RegistryError> {
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
impl Inner {
    /// The service URL(s), comma-separated, for error messages, stale reasons and
    /// logs: a `user:pass@` shows no password.
    pub(super) fn server(&self) -> String {
        self.urls
            .iter()
            .map(|u| redact_userinfo(u.as_str().trim_end_matches('/')))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// One request, failing over across the service URLs on transport errors. `Ok`
    /// carries the status and body of whichever server answered.
    pub(super) async fn call(&self, call: Call<'_>) -> Result<(StatusCode, Vec<u8>), CallError> {
        let n = self.urls.len();
        let first = self.preferred.load(Ordering::Relaxed) % n;
        let mut last = String::new();
        for k in 0..n {
            let i = (first + k) % n;
            let url = call.url(self.urls[i].clone());
            let req = self
                .http
                .request(call.method.clone(), url)
                .timeout(REQUEST_TIMEOUT)
                .header("Accept", "application/json");
            let resp = match call.with_body(req).send().await {
                Ok(r) => r,
                Err(e) => {
                    last = self.failure(i, &e);
                    continue;
                }
            };
            let status = resp.status();
            match read_capped(resp, self.max_body).await {
                Ok(b) => {
                    self.preferred.store(i, Ordering::Relaxed);
                    return Ok((status, b));
                }
                Err(e) if self.urls.len() > 1 => {
                    last = format!("{}: {e}", redact_userinfo(self.urls[i].as_str()))
                }
                Err(e) => last = e,
            }
        }
        Err(CallError::Transport(last))
    }

    /// What went wrong talking to service URL `i` (named when there are several: the
    /// error names them all as its server).
    fn failure(&self, i: usize, e: &reqwest::Error) -> String {
        if self.urls.len() > 1 {
            format!(
                "{}: {}",
                redact_userinfo(self.urls[i].as_str()),
                error_chain(e)
            )
        } else {
            error_chain(e)
        }
    }

    /// A call that must answer one of `ok`.
    pub(super) async fn expect(
        &self,
        call: Call<'_>,
        ok: &[StatusCode],
    ) -> Result<(StatusCode, Vec<u8>), CallError> {
        let (status, bytes) = self.call(call).await?;
        if ok.contains(&status) {
            Ok((status, bytes))
        } else {
            Err(CallError::status(status, &bytes))
        }
    }

    pub(super) async fn post_registration(&self, app: &str, body: &Value) -> Result<(), CallError> {
        self.expect(
            Call::new(Method::POST, &["apps", app]).body(body),
            &[StatusCode::NO_CONTENT, StatusCode::OK],
        )
        .await
        .map(|_| ())
    }

    /// `DELETE .../apps/{APP}/{id}`. A 404 (the server no longer has it: evicted or
    /// restarted) is what we want.
    pub(super) async fn cancel(&self, app: &str, id: &str) -> Result<(), CallError> {
        self.expect(
            Call::new(Method::DELETE, &["apps", app, id]),
            &[StatusCode::OK, StatusCode::NOT_FOUND],
        )
        .await
        .map(|_| ())
    }

    pub(super) async fn get_json(&self, segments: &[&str]) -> Result<Value, CallError> {
        let (_, bytes) = self
            .expect(Call::new(Method::GET, segments), &[StatusCode::OK])
            .await?;
        serde_json::from_slice(&bytes)
            .map_err(|e| CallError::Transport(format!("response is not JSON: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
