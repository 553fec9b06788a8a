//! What a failed forward says about its backend cluster: which failures count against
//! the breaker, which are labelled how in `gateway_backend_errors_total`, and which
//! requests may be held and sent again.
//!
//! An answer from a backend is never a failure here, whatever it says: an application
//! error reply (the backend's [`ERROR`](crate::gateway::wire::ERROR) head) proves the
//! backend is up and answering.

use meshline::rpc::RpcError;

use crate::gateway::route::RouteError;

/// A backend failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No answer within `backend-timeout`.
    Timeout,
    /// The connection failed (before or after the request was written).
    Connection,
    /// No alive endpoint in the cluster (immediately, or still none when a held
    /// request's time or the hold's room ran out).
    NoEndpoint,
    /// Every candidate connection's write queue stayed full: the backends do not read.
    Overloaded,
}

impl Failure {
    /// What `e` was, if it was a backend failure (`None`: a local or request problem,
    /// such as a shut-down client or a payload that cannot be framed).
    pub fn of(e: &RouteError) -> Option<Failure> {
        Some(match e {
            RouteError::Rpc(e) => match e {
                RpcError::Timeout { .. } => Failure::Timeout,
                RpcError::MaybeDelivered { .. }
                | RpcError::NotWritten { .. }
                | RpcError::RetriesExhausted { .. } => Failure::Connection,
                RpcError::NoEndpoint { .. } => Failure::NoEndpoint,
                RpcError::Overloaded { .. } => Failure::Overloaded,
                _ => return None,
            },
            RouteError::UnknownModule(_) => return None,
        })
    }

    /// The `kind` label of `gateway_backend_errors_total`.
    pub fn kind(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Connection => "connection",
            Failure::NoEndpoint => "no_endpoint",
            Failure::Overloaded => "overloaded",
        }
    }
}

/// Whether a request that failed with `e` may be held and sent again: always when it
/// certainly reached no backend; when it was written to a connection that then died
/// only if `replay_written` (the module's `replay`).
pub fn may_resend(e: &RouteError, replay_written: bool) -> bool {
    match e {
        RouteError::Rpc(
            RpcError::NoEndpoint { .. }
            | RpcError::NotWritten { .. }
            | RpcError::RetriesExhausted { .. },
        ) => true,
        RouteError::Rpc(RpcError::MaybeDelivered { .. }) => replay_written,
        _ => false,
    }
}
