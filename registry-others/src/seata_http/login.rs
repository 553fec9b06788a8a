//! The console login of Seata's HTTP servers (a raft TC's control port, a
//! namingserver), as Seata's clients do it (`RaftRegistryServiceImpl.refreshToken`,
//! `NamingserverRegistryServiceImpl.refreshToken`; the server side is
//! `console/.../controller/AuthController.java`):
//!
//! - only when both a username and a password are configured;
//! - `POST /api/v1/auth/login`, JSON `{"username","password"}`: HTTP 200 and
//!   `{"code":"200","data":"Bearer <jwt>"}`; a wrong password is HTTP 200 too, with
//!   `code` `"401"` ("Login failed");
//! - the token goes, as it came (`Bearer ` included), in the `Authorization` header;
//! - renewed before it expires: at 90 % of `tokenValidityInMilliseconds` (Seata's
//!   clients wait for 100 %, and the server's own lifetime is 30 min against the
//!   client's 29 min default, a margin a slow request can eat), and again at once when
//!   a server refuses it (HTTP 401 or 403), which Seata's namingserver client does not.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use meshline_registry_core::config::Secret;
use reqwest::StatusCode;
use serde_json::Value;

use super::{Reply, Servers, lock, send};

/// Timeout of a login (Seata's clients use 1,000 ms; a loaded machine needs more).
const LOGIN_TIMEOUT: Duration = Duration::from_secs(3);

/// Why no token could be had, or no server answered.
#[derive(Debug)]
pub(crate) enum LoginError {
    /// The server did not answer.
    Unreachable(String),
    /// The login was refused (a wrong username or password): asking again will not help.
    Refused(String),
    /// The server answered something else than a login answer.
    Answer(String),
}

impl LoginError {
    /// What went wrong, as a message.
    pub(crate) fn into_message(self) -> String {
        match self {
            LoginError::Unreachable(m) | LoginError::Refused(m) | LoginError::Answer(m) => m,
        }
    }
}

/// The credentials of one registry client, the token they got, and the HTTP client its
/// calls go through.
pub(crate) struct Login {
    username: Option<String>,
    password: Option<Secret>,
    validity: Duration,
    /// The settings section the keys are in (`registry.raft`), named in errors.
    section: &'static str,
    token: Mutex<Option<(String, Instant)>>,
    http: reqwest::Client,
    /// The largest answer read.
    max_body: usize,
}

impl std::fmt::Debug for Login {
    /// The token is never printed (nor the password: a [`Secret`]).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("username", &self.username)
            .field("password", &self.password)
            .field("validity", &self.validity)
            .finish()
    }
}

impl Login {
    /// `username` and `password` of `section` (blank ones are absent), tokens valid
    /// for `validity`; calls through `http`, answers read up to `max_body` bytes.
    pub(crate) fn new(
        username: Option<String>,
        password: Option<Secret>,
        validity: Duration,
        section: &'static str,
        http: reqwest::Client,
        max_body: usize,
    ) -> Login {
        let present = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
        Login {
            username: present(username),
            password: password.filter(|p| !p.is_blank()),
            validity,
            section,
            token: Mutex::new(None),
            http,
            max_body,
        }
    }

    /// True when both a username and a password are set: then every call carries a token.
    pub(crate) fn configured(&self) -> bool {
        self.username.is_some() && self.password.is_some()
    }

    /// The error of a server that wants a login when none is configured.
    fn wanted(&self, base: &str, what: &str, status: StatusCode) -> String {
        format!(
            "{base}: {what}: HTTP {}: the server wants a login; set {}.username and {}.password",
            status.as_u16(),
            self.section,
            self.section
        )
    }

    /// The token to send to `base`: `None` without credentials; the one held while it
    /// is fresh (younger than 90 % of its validity) unless `renew`; else a new login.
    pub(crate) async fn token(
        &self,
        base: &str,
        renew: bool,
    ) -> Result<Option<String>, LoginError> {
        let (Some(user), Some(pass)) = (&self.username, &self.password) else {
            return Ok(None);
        };
        if !renew {
            let held = lock(&self.token);
            if let Some((t, at)) = &*held
                && at.elapsed() < self.validity.mul_f64(0.9)
            {
                return Ok(Some(t.clone()));
            }
        }
        let body = serde_json::json!({"username": user, "password": pass.expose()});
        let req = self
            .http
            .post(format!("{base}/api/v1/auth/login"))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        let reply = send(req, LOGIN_TIMEOUT, self.max_body)
            .await
            .map_err(|e| LoginError::Unreachable(format!("{base}: login: {e}")))?;
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
            return Err(LoginError::Refused(format!(
                "{base}: login as `{user}` refused (HTTP {}, code {}): {message}; check \
                 {}.username and {}.password",
                reply.status.as_u16(),
                code.as_deref().unwrap_or("none"),
                self.section,
                self.section,
            )));
        }
        let token = v
            .get("data")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| LoginError::Answer(format!("{base}: the login answer has no token")))?
            .to_string();
        *lock(&self.token) = Some((token.clone(), Instant::now()));
        tracing::debug!(section = self.section, server = base, "logged in");
        Ok(Some(token))
    }

    /// Sends the request `make` builds to `base`, with the token when a login is
    /// configured; a 401/403 logs in again and repeats the call once. A server that
    /// wants a login when none is configured is [`LoginError::Refused`]; one that does
    /// not answer, [`LoginError::Unreachable`].
    pub(crate) async fn send(
        &self,
        base: &str,
        what: &str,
        timeout: Duration,
        make: &impl Fn(&str) -> reqwest::RequestBuilder,
    ) -> Result<Reply, LoginError> {
        let mut renew = false;
        loop {
            let token = self.token(base, renew).await?;
            let mut req = make(base);
            if let Some(t) = &token {
                req = req.header(reqwest::header::AUTHORIZATION, t);
            }
            let r = send(req, timeout, self.max_body)
                .await
                .map_err(|e| LoginError::Unreachable(format!("{base}: {what}: {e}")))?;
            let refused = r.status == StatusCode::UNAUTHORIZED || r.status == StatusCode::FORBIDDEN;
            if !refused || renew {
                return Ok(r);
            }
            if !self.configured() {
                return Err(LoginError::Refused(self.wanted(base, what, r.status)));
            }
            tracing::debug!(section = self.section, server = %base, status = r.status.as_u16(), "token refused; logging in again");
            renew = true;
        }
    }

    /// [`send`](Self::send)s to each of `bases` in turn until one answers, which
    /// `servers` then asks first. A refused login ends the round at once (the servers of
    /// one cluster share their users); servers that did not answer, or answered the
    /// login with no token, are named together.
    pub(crate) async fn send_first(
        &self,
        servers: &Servers,
        bases: Vec<String>,
        what: &str,
        timeout: Duration,
        make: &impl Fn(&str) -> reqwest::RequestBuilder,
    ) -> Result<Reply, LoginError> {
        let mut failures = Vec::new();
        for base in bases {
            match self.send(&base, what, timeout, make).await {
                Ok(r) => {
                    servers.answered(&base);
                    return Ok(r);
                }
                Err(LoginError::Unreachable(m) | LoginError::Answer(m)) => failures.push(m),
                Err(refused) => return Err(refused),
            }
        }
        Err(LoginError::Unreachable(failures.join("; ")))
    }
}
