//! Talking to the TCs' HTTP API: the token login, the metadata read and the watch long
//! poll, each tried on the known servers in turn (the last one that answered first,
//! then the control addresses of the nodes the metadata named, then the configured
//! `serverAddr` list), as `RaftRegistryServiceImpl.queryHttpAddress` picks a TC.

use std::time::{Duration, Instant};

use meshline_registry_core::RegistryError;
use reqwest::StatusCode;
use serde_json::Value;

use super::metadata::Metadata;
use super::{Inner, KIND};
use crate::seata_http::{Reply, send};

/// Timeout of the login and metadata calls (Seata's client uses 1,000 ms; a loaded
/// machine needs more).
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the TC holds a watch (`ClusterController.watch`'s default `timeout`,
/// 28,000 ms), plus Seata's client margin: its HTTP timeout is 30,000 ms.
pub(super) const WATCH_TIMEOUT: Duration = Duration::from_secs(30);

/// The login token and when it was issued.
#[derive(Default)]
pub(super) struct Token {
    value: Option<String>,
    issued: Option<Instant>,
}

/// What a failed call looked like.
#[derive(Debug)]
pub(super) enum CallError {
    /// Every server failed to answer; the last failure of each.
    Unreachable(String),
    /// The login was refused (wrong username or password): retrying will not help.
    LoginRefused(String),
    /// A server answered something else than expected.
    Answer(String),
}

impl CallError {
    pub(super) fn describe(&self) -> &str {
        match self {
            CallError::Unreachable(m) | CallError::LoginRefused(m) | CallError::Answer(m) => m,
        }
    }

    pub(super) fn into_registry(self, server: &str, op: &str) -> RegistryError {
        RegistryError::unavailable(KIND, server, format!("{op}: {}", self.describe()))
    }
}

impl Inner {
    /// The servers to try, in order, without repeats.
    fn candidates(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut push = |b: String| {
            if !out.contains(&b) {
                out.push(b);
            }
        };
        let ordered = self.servers.in_order();
        if let Some(first) = ordered.first() {
            push(first.clone());
        }
        for b in crate::seata_http::lock(&self.learned).iter() {
            push(b.clone());
        }
        for b in ordered {
            push(b);
        }
        out
    }

    /// The token to send, logging in first when there is none or it is due for renewal
    /// (90 % of `tokenValidityInMilliseconds`).
    async fn token_for(&self, base: &str, force: bool) -> Result<Option<String>, CallError> {
        let (Some(user), Some(pass)) = (&self.username, &self.password) else {
            return Ok(None);
        };
        {
            let t = crate::seata_http::lock(&self.token);
            let fresh = t
                .issued
                .is_some_and(|at| at.elapsed() < self.token_validity.mul_f64(0.9));
            if !force && fresh && t.value.is_some() {
                return Ok(t.value.clone());
            }
        }
        let body = serde_json::json!({"username": user, "password": pass});
        let req = self
            .http
            .post(format!("{base}/api/v1/auth/login"))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        let reply = send(req, REQUEST_TIMEOUT, self.max_body)
            .await
            .map_err(|e| CallError::Unreachable(format!("{base}: login: {e}")))?;
        // AuthController: HTTP 200 with `code` "200" and the token in `data`; a wrong
        // password is HTTP 200 with `code` "401" ("Login failed").
        let v: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
        let code = v.get("code").map(|c| match c {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
        if reply.status != StatusCode::OK || code.as_deref() != Some("200") {
            let message = v
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| reply.shown_body());
            return Err(CallError::LoginRefused(format!(
                "{base}: login as `{user}` refused (HTTP {}, code {}): {message}; check \
                 registry.raft.username and registry.raft.password",
                reply.status.as_u16(),
                code.as_deref().unwrap_or("none"),
            )));
        }
        let token = v
            .get("data")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| CallError::Answer(format!("{base}: login answer has no token")))?
            .to_string();
        let mut t = crate::seata_http::lock(&self.token);
        t.value = Some(token.clone());
        t.issued = Some(Instant::now());
        tracing::debug!(registry = KIND, server = base, "logged in");
        Ok(Some(token))
    }

    /// Sends the request `make` builds for a base URL to each candidate in turn,
    /// with the token; a 401/403 logs in again once and repeats the call there.
    async fn call<F>(&self, what: &str, timeout: Duration, make: F) -> Result<Reply, CallError>
    where
        F: Fn(&str) -> reqwest::RequestBuilder,
    {
        let mut failures = Vec::new();
        for base in self.candidates() {
            let mut relogged = false;
            loop {
                let token = match self.token_for(&base, relogged).await {
                    Ok(t) => t,
                    Err(CallError::Unreachable(m)) => {
                        failures.push(m);
                        break;
                    }
                    Err(e) => return Err(e),
                };
                let mut req = make(&base);
                if let Some(t) = &token {
                    req = req.header("Authorization", t);
                }
                match send(req, timeout, self.max_body).await {
                    Err(e) => {
                        failures.push(format!("{base}: {what}: {e}"));
                        break;
                    }
                    Ok(r)
                        if (r.status == StatusCode::UNAUTHORIZED
                            || r.status == StatusCode::FORBIDDEN)
                            && !relogged =>
                    {
                        if self.username.is_none() || self.password.is_none() {
                            return Err(CallError::LoginRefused(format!(
                                "{base}: {what}: HTTP {}: the TC wants a login; set \
                                 registry.raft.username and registry.raft.password",
                                r.status.as_u16()
                            )));
                        }
                        tracing::debug!(registry = KIND, server = %base, status = r.status.as_u16(), "token refused; logging in again");
                        relogged = true;
                    }
                    Ok(r) => {
                        self.servers.answered(&base);
                        return Ok(r);
                    }
                }
            }
        }
        Err(CallError::Unreachable(failures.join("; ")))
    }

    /// `GET /metadata/v1/cluster?group=<group>`: the raft group's nodes, term and store
    /// mode. Remembers the nodes' control addresses as servers to ask.
    pub(super) async fn metadata(&self, group: &str) -> Result<Metadata, CallError> {
        let reply = self
            .call("read the cluster metadata", REQUEST_TIMEOUT, |base| {
                self.http
                    .get(format!("{base}/metadata/v1/cluster"))
                    .query(&[("group", group)])
            })
            .await?;
        if reply.status != StatusCode::OK {
            return Err(CallError::Answer(format!(
                "metadata of `{group}`: HTTP {}: {}",
                reply.status.as_u16(),
                reply.shown_body()
            )));
        }
        let m = Metadata::parse(group, &reply.body).map_err(CallError::Answer)?;
        let learned = m.control_bases(self.tls);
        if !learned.is_empty() {
            *crate::seata_http::lock(&self.learned) = learned;
        }
        Ok(m)
    }

    /// `POST /metadata/v1/watch` with the form `<group>=<term>`: true when the TC
    /// answered 200 (the group's term moved past ours), false on 304 (nothing changed
    /// within the TC's hold time).
    pub(super) async fn watch(&self, group: &str, term: i64) -> Result<bool, CallError> {
        let reply = self
            .call("watch the cluster", WATCH_TIMEOUT, |base| {
                self.http
                    .post(format!("{base}/metadata/v1/watch"))
                    .form(&[(group, term.to_string())])
            })
            .await?;
        match reply.status {
            StatusCode::OK => Ok(true),
            StatusCode::NOT_MODIFIED => Ok(false),
            s => Err(CallError::Answer(format!(
                "watch of `{group}`: HTTP {}: {}",
                s.as_u16(),
                reply.shown_body()
            ))),
        }
    }
}
