//! Limits a client puts on its own calls: how many may be in flight (for the client,
//! for each endpoint), and a circuit breaker that stops calling a cluster that keeps
//! failing. All off by default: Seata's client has none of them, and a TM whose calls
//! are refused must be told so by its owner's choice.
//!
//! What each one is for, beside the per-endpoint rules the client always applies
//! (failure accrual and outlier detection eject one bad endpoint; the retry budget caps
//! what is sent again):
//!
//! - **[`CallLimits::max_in_flight`]**: the client's calls in flight at most. A caller
//!   that floods a client (a burst of requests, a slow cluster that holds every call)
//!   gets [`RpcError::LimitReached`](crate::RpcError::LimitReached) at once instead of
//!   queueing behind the flood; the other callers of the process keep their slots.
//! - **[`CallLimits::max_in_flight_per_endpoint`]**: each endpoint's calls in flight at
//!   most. An endpoint at its cap is skipped as a full one is, so a slow endpoint
//!   cannot hold more than its share; when every candidate is at its cap the call is
//!   refused.
//! - **[`CallLimits::breaker`]**: one [`Breaker`] for the client. When most of the
//!   recent calls failed (the whole cluster is down or failing, so no ejection can
//!   help), calls are refused at once with
//!   [`RpcError::CircuitOpen`](crate::RpcError::CircuitOpen) for a cool-down, then a
//!   few probes decide (see [`breaker`]). A caller gets its answer in microseconds
//!   rather than after a timeout, and the cluster is not kept busy while it recovers.
//!
//! The same types serve an application's own units: [`ConcurrencyLimit`] and
//! [`Breaker`] are plain values (the example gateway keeps one limit per game module and
//! one breaker per backend cluster).
//!
//! The `transport.*` keys (meshline's): `maxInFlight`, `maxInFlightPerEndpoint` (0 or
//! absent: no cap), `breaker` (`true` turns it on), `breakerWindow`,
//! `breakerMinRequests`, `breakerFailureRatio`, `breakerCoolDown`, `breakerProbes`.

pub mod breaker;
mod concurrency;
mod window;

pub use breaker::{Admission, Breaker, BreakerSettings, BreakerState, Transition};
pub use concurrency::{ConcurrencyLimit, OwnedPermit, Permit};

/// A client's limits on its own calls (see the module docs). All off by default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallLimits {
    /// The client's calls (and one-way sends) in flight at most
    /// (`transport.maxInFlight`); `None`: no cap.
    pub max_in_flight: Option<usize>,
    /// Each endpoint's calls in flight at most (`transport.maxInFlightPerEndpoint`);
    /// `None`: no cap.
    pub max_in_flight_per_endpoint: Option<usize>,
    /// The client's circuit breaker (`transport.breaker=true` and the
    /// `transport.breaker*` settings); `None`: no breaker.
    pub breaker: Option<BreakerSettings>,
}

impl CallLimits {
    /// The per-endpoint cap a new connection starts with (`None`: no cap).
    pub(crate) fn endpoint_limit(&self) -> Option<std::sync::Arc<ConcurrencyLimit>> {
        self.max_in_flight_per_endpoint
            .map(|cap| std::sync::Arc::new(ConcurrencyLimit::new(cap)))
    }
}

/// Which limit refused a call ([`RpcError::LimitReached`](crate::RpcError::LimitReached)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitScope {
    /// The client's own cap ([`CallLimits::max_in_flight`]).
    Client,
    /// Every candidate endpoint was at its cap
    /// ([`CallLimits::max_in_flight_per_endpoint`]).
    Endpoint,
}

impl std::fmt::Display for LimitScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LimitScope::Client => "the client",
            LimitScope::Endpoint => "every candidate endpoint",
        })
    }
}
