//! Talking to the TCs' HTTP API: the token login ([`Login`](crate::seata_http::Login)), the metadata read and the watch long
//! poll, each tried on the known servers in turn (the last one that answered first,
//! then the control addresses of the nodes the metadata named, then the configured
//! `serverAddr` list), as `RaftRegistryServiceImpl.queryHttpAddress` picks a TC.

use std::time::Duration;

use meshline_registry_core::RegistryError;
use reqwest::StatusCode;

use super::metadata::Metadata;
use super::{Inner, KIND};
use crate::seata_http::{LoginError, Reply};

/// Timeout of the login and metadata calls (Seata's client uses 1,000 ms; a loaded
/// machine needs more).
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the TC holds a watch (`ClusterController.watch`'s default `timeout`,
/// 28,000 ms), plus Seata's client margin: its HTTP timeout is 30,000 ms.
pub(super) const WATCH_TIMEOUT: Duration = Duration::from_secs(30);

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

    /// Sends the request `make` builds for a base URL to each candidate in turn,
    /// with the token; a 401/403 logs in again once and repeats the call there.
    async fn call<F>(&self, what: &str, timeout: Duration, make: F) -> Result<Reply, CallError>
    where
        F: Fn(&str) -> reqwest::RequestBuilder,
    {
        self.login
            .send_first(&self.servers, self.candidates(), what, timeout, &make)
            .await
            .map_err(|e| match e {
                LoginError::Refused(m) => CallError::LoginRefused(m),
                other => CallError::Unreachable(other.into_message()),
            })
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
