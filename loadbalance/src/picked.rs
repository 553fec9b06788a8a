//! What a pick hands back: the chosen endpoint, the guard that counts the request in
//! flight on it until the request ends, and (through the endpoint) its payload.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use crate::{Endpoint, EndpointStats};

/// The result of [`crate::Balancer::pick`]: the chosen endpoint, with its payload
/// (what a [`crate::Balancer<T>`] attached to it: the connection to send on), and the
/// guard that keeps it counted as busy until the request ends.
///
/// The guard holds the endpoint, and the endpoint its payload (one reference count for
/// all three), so picking and dropping the result costs one reference-count increment
/// and decrement besides the in-flight bookkeeping, and nothing needs looking up after
/// the pick: [`payload`](Self::payload) is the sendable thing itself.
pub struct Picked<T = ()> {
    guard: InFlightGuard,
    index: usize,
    _payload: PhantomData<fn() -> T>,
}

impl<T> Picked<T> {
    #[inline]
    pub(crate) fn new(guard: InFlightGuard, index: usize) -> Self {
        Picked {
            guard,
            index,
            _payload: PhantomData,
        }
    }

    /// The chosen endpoint.
    #[inline]
    pub fn endpoint(&self) -> &Endpoint {
        &self.guard.endpoint
    }

    /// Its position in the snapshot it was picked from (for index exclusions; prefer
    /// key exclusions, which survive membership changes).
    #[inline]
    pub fn index(&self) -> usize {
        self.index
    }

    /// The in-flight guard.
    #[inline]
    pub fn guard(&self) -> &InFlightGuard {
        &self.guard
    }

    /// Splits into the endpoint and the guard (to move the guard into a future). The
    /// endpoint is a clone (one reference-count increment); to keep only the guard, use
    /// [`into_guard`](Self::into_guard), whose [`InFlightGuard::endpoint`] is the same.
    #[inline]
    pub fn into_parts(self) -> (Endpoint, InFlightGuard) {
        (self.guard.endpoint.clone(), self.guard)
    }

    /// The guard alone (it still knows its endpoint: [`InFlightGuard::endpoint`]).
    #[inline]
    pub fn into_guard(self) -> InFlightGuard {
        self.guard
    }

    /// Records a success with its latency and ends the request.
    #[inline]
    pub fn success(self, latency: Duration) {
        self.guard.success(latency);
    }

    /// Records a failure (error or timeout) and ends the request.
    #[inline]
    pub fn failure(self) {
        self.guard.failure();
    }

    /// Records a failure that costs as an answer taking `cost` would (a server that
    /// answered that it cannot work: see
    /// [`EndpointStats::record_failure_costing`]) and ends the request.
    #[inline]
    pub fn failure_costing(self, cost: Duration) {
        self.guard.failure_costing(cost);
    }
}

impl<T: Any> Picked<T> {
    /// The chosen endpoint's payload: what the balancer's owner attached to it when it
    /// joined ([`crate::Edit::Insert`]), typically the connection to send on. Borrowed
    /// from the endpoint the guard holds, so it stays valid while the request runs,
    /// whatever membership changes happen meanwhile.
    #[inline]
    pub fn payload(&self) -> &T {
        match self.guard.endpoint.payload::<T>() {
            Some(p) => p,
            // A `Balancer<()>` attaches nothing (no allocation per endpoint); every
            // other `Balancer<T>` attaches a `T` to each endpoint it makes, and only its
            // own endpoints are ever picked from it, so this is `()`.
            None => (&() as &dyn Any)
                .downcast_ref::<T>()
                .expect("every endpoint of a Balancer<T> carries a T"),
        }
    }
}

impl<T> fmt::Debug for Picked<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Picked")
            .field("guard", &self.guard)
            .field("index", &self.index)
            .finish()
    }
}

/// Counts one request in flight on an endpoint; dropping it ends the count, whatever
/// happened: success, error, timeout, or a future dropped mid-call (cancellation).
/// (A balancer whose algorithm reads no load counts nothing:
/// [`crate::LoadBalance::reads_in_flight`].)
///
/// [`success`](Self::success) and [`failure`](Self::failure) also feed the latency
/// estimate and failure counters; a plain drop records nothing but the end. The guard
/// keeps its endpoint (and so the endpoint's stats and payload) alive until it ends,
/// even when the endpoint has left the membership meanwhile.
#[must_use = "dropping the guard at once ends the request's in-flight count"]
pub struct InFlightGuard {
    endpoint: Endpoint,
}

impl InFlightGuard {
    /// Counts a request on `endpoint` and keeps a clone of it.
    #[inline]
    pub(crate) fn begin(endpoint: &Endpoint) -> Self {
        endpoint.stats().begin();
        InFlightGuard {
            endpoint: endpoint.clone(),
        }
    }

    /// The endpoint's stats.
    #[inline]
    pub fn stats(&self) -> &EndpointStats {
        self.endpoint.stats()
    }

    /// The endpoint this request is counted on.
    #[inline]
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Records a success taking `latency` and ends the request.
    pub fn success(self, latency: Duration) {
        self.stats().record_success(latency);
    }

    /// Records a failure (an error or a timeout) and ends the request.
    pub fn failure(self) {
        self.stats().record_failure();
    }

    /// Records a failure priced as an answer taking `cost`
    /// ([`EndpointStats::record_failure_costing`]) and ends the request.
    pub fn failure_costing(self, cost: Duration) {
        self.stats().record_failure_costing(cost);
    }

    /// Ends the request recording nothing (same as dropping the guard).
    #[inline]
    pub fn cancel(self) {}
}

impl Drop for InFlightGuard {
    #[inline]
    fn drop(&mut self) {
        self.endpoint.stats().end();
    }
}

impl fmt::Debug for InFlightGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlightGuard")
            .field("endpoint", &format_args!("{}", self.endpoint))
            .field("in_flight", &self.stats().in_flight())
            .finish()
    }
}
