//! The error type of calls, connections and the client.
//!
//! The variants that matter most are about delivery: [`RpcError::NotWritten`] means
//! the request never left this process (safe to retry anywhere; `RpcClient` already
//! retried it on other endpoints), while [`RpcError::MaybeDelivered`] and
//! [`RpcError::Timeout`] mean it was written and the server may have acted on it, so a
//! retry must be idempotent or checked first.

use std::time::Duration;

use meshline_registry_core::RegistryError;

use crate::codec::FrameError;
use crate::message::MessageError;
use crate::transport::CloseReason;

/// Why a call (or building a client) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RpcError {
    /// No connected, handshaken endpoint is available (after excluding ones that failed
    /// during this call).
    #[error(
        "no connected endpoint for `{target}`: none is alive (check the registry, the servers, and handshake refusals in the log)"
    )]
    NoEndpoint {
        /// The group, cluster or watch the client follows.
        target: String,
    },

    /// [`RpcClient::wait_alive`](crate::RpcClient::wait_alive) ran out of time: fewer
    /// endpoints than wanted are connected and handshaken. Each followed endpoint's state
    /// says why (refused registration, connection refused, ...).
    #[error(
        "no connected endpoint for `{target}`: waited {waited:?} for {wanted} alive, have {alive}{}",
        describe_states(states)
    )]
    NotEnoughAlive {
        /// The group, cluster or watch the client follows.
        target: String,
        /// Endpoints wanted.
        wanted: usize,
        /// Endpoints alive when the wait ended.
        alive: usize,
        /// How long it waited.
        waited: Duration,
        /// `endpoint: state` for every endpoint the client follows.
        states: Vec<String>,
    },

    /// The request was written to the connection, which then failed before a response
    /// came: the server may or may not have processed it.
    #[error(
        "request to {endpoint} may have been delivered: it was written, then the connection failed ({reason}); retry only if the operation is idempotent"
    )]
    MaybeDelivered {
        /// The endpoint it was written to.
        endpoint: String,
        /// Why the connection failed (with the I/O error as its source, when there is one).
        #[source]
        reason: CloseReason,
    },

    /// The request was not written: its connection failed or closed first. Nothing was
    /// delivered. `RpcClient` retries these on other endpoints; you only see this from
    /// a direct [`crate::Connection`] call or after the retry budget is spent.
    #[error(
        "request to {endpoint} was not sent ({reason}); it was not delivered and is safe to retry"
    )]
    NotWritten {
        /// The endpoint it was meant for.
        endpoint: String,
        /// Why it was not written (with the I/O error as its source, when there is one).
        #[source]
        reason: CloseReason,
    },

    /// The request was not written: the connection's request queue had no room (a
    /// `try_*` send, or the call's deadline passed while waiting for room). Nothing was
    /// delivered. `RpcClient` first tries other endpoints with room.
    #[error(
        "request to {endpoint} was not sent: its write queue is full ({queued_bytes} bytes queued{}); it was not delivered and is safe to retry",
        waited.map(|w| format!(", waited {w:?} for room")).unwrap_or_default()
    )]
    Overloaded {
        /// The endpoint whose queue was full.
        endpoint: String,
        /// Bytes queued on that connection when the call gave up.
        queued_bytes: usize,
        /// How long the call waited for room (`None`: it did not wait).
        waited: Option<Duration>,
    },

    /// The request was not sent: the client, or every endpoint it could go to, had its
    /// limit of calls in flight (see [`CallLimits`](crate::limits::CallLimits)).
    /// Nothing was delivered.
    #[error(
        "request to `{target}` was not sent: {scope} has {limit} calls in flight already (its limit); it was not delivered"
    )]
    LimitReached {
        /// The group, cluster or watch the client follows.
        target: String,
        /// Which limit refused it.
        scope: crate::limits::LimitScope,
        /// That limit.
        limit: usize,
    },

    /// The request was not sent: the client's circuit breaker is open (most of its
    /// recent calls failed; see [`Breaker`](crate::limits::Breaker)), or half-open with
    /// its probes out. Nothing was delivered; calls pass again after the cool-down.
    #[error(
        "request to `{target}` was not sent: the circuit is open (too many recent calls failed); it was not delivered"
    )]
    CircuitOpen {
        /// The group, cluster or watch the client follows.
        target: String,
    },

    /// No response within the call's timeout. The request may have been delivered.
    #[error("no response within {after:?}{}; the request may have been delivered", endpoint.as_ref().map(|e| format!(" from {e}")).unwrap_or_default())]
    Timeout {
        /// The timeout in force.
        after: Duration,
        /// The endpoint last tried, if one was picked.
        endpoint: Option<String>,
    },

    /// Every attempt hit an endpoint that failed before the request was written.
    #[error("request not sent after {attempts} attempts (last: {last}); it was not delivered")]
    RetriesExhausted {
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },

    /// The client is shutting down and takes no new calls.
    #[error("the rpc client is shut down; create a new one")]
    Shutdown,

    /// The payload cannot be framed (too long, head entry too long).
    #[error("cannot frame the request: {0}")]
    Frame(#[from] FrameError),

    /// A Seata body could not be encoded or decoded.
    #[error(transparent)]
    Message(#[from] MessageError),

    /// The registry failed (watch, lookup, group mapping).
    #[error(transparent)]
    Registry(#[from] RegistryError),

    /// The client was built with an invalid setting.
    #[error("rpc client configuration: {0}")]
    Config(String),

    /// A server could not bind or accept.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

impl RpcError {
    /// True when the request certainly did not reach any server (safe to retry).
    pub fn is_not_delivered(&self) -> bool {
        matches!(
            self,
            RpcError::NotWritten { .. }
                | RpcError::Overloaded { .. }
                | RpcError::LimitReached { .. }
                | RpcError::CircuitOpen { .. }
                | RpcError::RetriesExhausted { .. }
                | RpcError::NoEndpoint { .. }
                | RpcError::Shutdown
                | RpcError::Frame(_)
        )
    }
}

fn describe_states(states: &[String]) -> String {
    if states.is_empty() {
        "; the registry lists no endpoint (check the group mapping and the registry)".into()
    } else {
        format!("; endpoints: {}", states.join("; "))
    }
}
