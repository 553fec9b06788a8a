//! The per-connection handshake: what must succeed on a new connection before the
//! endpoint is offered to the load balancer.
//!
//! Seata's Java client registers on **every** new channel (RegisterTM or RegisterRM,
//! sent as a sync request) and uses the channel only when the TC answers
//! `identified == 1` (Seata's `AbstractNettyRemotingClient` / `RegisterTMRequest`). [`SeataRegistration`] does
//! exactly that. Any other check (a game backend's version gate, an auth exchange) is a
//! closure `Fn(Connection) -> impl Future<Output = Result<(), String>>`.
//!
//! A refused or failed handshake closes that connection, logs the reason (and keeps it
//! in the endpoint's status), and the endpoint is retried later with backoff; it is
//! never picked in the meantime.

use std::future::Future;
use std::time::Duration;

use crate::connection::Connection;
use crate::inbound::BoxFuture;
use crate::message::{RegisterRmRequest, RegisterTmRequest, SeataMessage};
use crate::outcome::Classifier;
use crate::payload::Payload;

/// A check run on every new connection before it joins the alive set. `Err` carries
/// the reason the endpoint is not used.
pub trait Handshake: Send + Sync + 'static {
    /// Runs the handshake on `conn`.
    fn handshake<'a>(&'a self, conn: &'a Connection) -> BoxFuture<'a, Result<(), String>>;

    /// How long this handshake allows itself, if it says. The client waits at least this
    /// long (plus a second, so the handshake's own error is the one reported), even when
    /// [`ClientOptions::handshake_timeout`](crate::ClientOptions::handshake_timeout) is
    /// shorter.
    fn timeout(&self) -> Option<Duration> {
        None
    }

    /// How the answers of the protocol this handshake opens are read
    /// ([`Classifier`]): a client whose
    /// [`ClientOptions::classifier`](crate::ClientOptions::classifier) is not set takes
    /// this one. `None` (the default): every answer is a success.
    fn classifier(&self) -> Option<Classifier> {
        None
    }
}

impl<F, Fut> Handshake for F
where
    F: Fn(Connection) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    fn handshake<'a>(&'a self, conn: &'a Connection) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(self(conn.clone()))
    }
}

/// Seata registration as a handshake: sends RegisterTM (or RegisterRM) as a sync
/// request on the new connection and requires `identified == 1`.
#[derive(Debug, Clone)]
pub struct SeataRegistration {
    message: SeataMessage,
    timeout: Duration,
}

/// The version a TC gave when it accepted a registration, kept on the connection
/// ([`Connection::state`]): it says which requests the TC knows (Seata's RM keeps it per
/// server for the same reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcVersion(pub String);

impl TcVersion {
    /// The version as Seata compares them (`Version.convertVersion`): up to four
    /// dot-separated numbers, each part's `-suffix` dropped, missing parts 0. `None`
    /// when a part is not a number.
    pub fn number(&self) -> Option<u64> {
        let mut n = 0u64;
        let mut parts = self.0.trim().split('.');
        for _ in 0..4 {
            let part = parts.next().unwrap_or("0");
            let digits = part.split('-').next().unwrap_or("");
            let v: u64 = digits.parse().ok()?;
            n = n.checked_mul(100)?.checked_add(v.min(99))?;
        }
        Some(n)
    }

    /// True when this version is `major.minor.patch` or later.
    pub fn at_least(&self, major: u64, minor: u64, patch: u64) -> bool {
        let wanted = ((major * 100 + minor) * 100 + patch) * 100;
        self.number().is_some_and(|n| n >= wanted)
    }
}

impl SeataRegistration {
    /// Register as a TM (Java's timeout: 30 s).
    pub fn tm(request: RegisterTmRequest) -> Self {
        SeataRegistration {
            message: SeataMessage::RegisterTm(request),
            timeout: Duration::from_secs(30),
        }
    }

    /// Register as an RM (Java's timeout: 15 s).
    pub fn rm(request: RegisterRmRequest) -> Self {
        SeataRegistration {
            message: SeataMessage::RegisterRm(request),
            timeout: Duration::from_secs(15),
        }
    }

    /// Sets how long to wait for the TC's answer.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    async fn run(&self, conn: &Connection) -> Result<(), String> {
        let payload = Payload::seata(&self.message).map_err(|e| e.to_string())?;
        let resp = conn
            .call(payload, self.timeout)
            .await
            .map_err(|e| format!("registration request failed: {e}"))?;
        let msg = resp
            .decode_seata()
            .map_err(|e| format!("bad registration response: {e}"))?;
        let (want, got) = match (&self.message, &msg) {
            (SeataMessage::RegisterTm(_), SeataMessage::RegisterTmResponse(r)) => ("TM", r),
            (SeataMessage::RegisterRm(_), SeataMessage::RegisterRmResponse(r)) => ("RM", r),
            _ => {
                return Err(format!(
                    "unexpected answer to registration: message type {}",
                    msg.type_code()
                ));
            }
        };
        if got.identified {
            tracing::debug!(role = want, server_version = ?got.version, "registered with TC");
            if let Some(v) = &got.version {
                conn.set_state(TcVersion(v.clone()));
            }
            Ok(())
        } else {
            Err(format!(
                "TC refused {want} registration (identified=0, server version {})",
                got.version.as_deref().unwrap_or("unknown")
            ))
        }
    }
}

impl Handshake for SeataRegistration {
    fn handshake<'a>(&'a self, conn: &'a Connection) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(self.run(conn))
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    /// Seata's table ([`Classifier::seata`]): a TC whose store failed is a failing
    /// endpoint, a lock conflict is the caller's.
    fn classifier(&self) -> Option<Classifier> {
        Some(Classifier::seata())
    }
}
