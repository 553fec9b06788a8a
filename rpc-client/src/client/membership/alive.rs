//! The alive set (connected, handshaken endpoints: what the balancer picks from) and
//! the state of every endpoint the client follows.
//!
//! The alive set is not a second table beside the balancer: it *is* the balancer's
//! membership. Each balancer endpoint carries its [`AliveEndpoint`] (connection and
//! failure count) as its payload, so a pick hands back the connection to send on, and
//! an [`AliveSet`] is a view of one balancer snapshot.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use meshline_loadbalance::{Endpoint, Snapshot};
use meshline_registry_core::{Instance, InstanceKey};

use crate::connection::Connection;
use crate::limits::ConcurrencyLimit;

/// One endpoint of the alive set: connected and handshaken. It is the payload of the
/// client's balancer endpoint (`Balancer<AliveEndpoint>`): what a pick returns to send
/// on.
#[derive(Debug, Clone)]
pub struct AliveEndpoint {
    /// What the registry says about it.
    pub instance: Arc<Instance>,
    /// Its connection.
    pub connection: Connection,
    /// Failed calls in a row on this connection (failure accrual, see `ejection`);
    /// kept while the endpoint is ejected, so one more failure after its return
    /// ejects it again.
    pub(crate) failures: Arc<AtomicU32>,
    /// This connection's cap on calls in flight
    /// ([`CallLimits::max_in_flight_per_endpoint`](crate::limits::CallLimits::max_in_flight_per_endpoint)).
    pub(crate) limit: Option<Arc<ConcurrencyLimit>>,
    /// When this connection's slow-start ramp began (`None`: it takes its full share;
    /// see `Membership::ramp_from`).
    pub(crate) ramp_from: Option<tokio::time::Instant>,
}

impl AliveEndpoint {
    pub(crate) fn new(
        instance: Arc<Instance>,
        connection: Connection,
        limit: Option<Arc<ConcurrencyLimit>>,
        ramp_from: Option<tokio::time::Instant>,
    ) -> Self {
        AliveEndpoint {
            instance,
            connection,
            failures: Arc::default(),
            limit,
            ramp_from,
        }
    }

    /// The same connection and failure count, described by `instance` (the registry
    /// changed its weight, zone or metadata).
    pub(crate) fn described_by(&self, instance: Arc<Instance>) -> Self {
        AliveEndpoint {
            instance,
            connection: self.connection.clone(),
            failures: self.failures.clone(),
            limit: self.limit.clone(),
            ramp_from: self.ramp_from,
        }
    }

    /// A call succeeded: the failures in a row are over. True when this success ended
    /// a row (there were failures before it).
    ///
    /// Read first (no write on the common path, a success with no row), then ended with
    /// one swap: a failure counted between a read and a store would be wiped out
    /// unseen, and its recheck would find no row to recheck. Acquire: a success that
    /// ends a row sees everything the failures did before they were counted (their
    /// price, which the caller then restarts).
    #[inline]
    pub(crate) fn succeeded(&self) -> bool {
        self.failures.load(Ordering::Relaxed) != 0 && self.failures.swap(0, Ordering::AcqRel) != 0
    }

    /// Failed calls in a row on this connection, now.
    pub(crate) fn failures_in_a_row(&self) -> u32 {
        self.failures.load(Ordering::Relaxed)
    }

    /// A call failed: the failures in a row, this one included.
    pub(crate) fn failed(&self) -> u32 {
        self.failures.fetch_add(1, Ordering::AcqRel) + 1
    }
}

/// The alive endpoint a balancer endpoint of the client carries. Every endpoint of the
/// client's balancer joined with one (`Edit::Insert(instance, AliveEndpoint)`).
#[inline]
pub(crate) fn alive_of(endpoint: &Endpoint) -> &AliveEndpoint {
    endpoint
        .payload::<AliveEndpoint>()
        .expect("every endpoint of the client's balancer carries its AliveEndpoint")
}

/// The alive set at one moment: every connected, handshaken endpoint. A view of the
/// balancer's snapshot at that moment (nothing is copied to make it).
#[derive(Debug, Clone)]
pub struct AliveSet {
    snapshot: Arc<Snapshot>,
}

impl AliveSet {
    pub(crate) fn new(snapshot: Arc<Snapshot>) -> Self {
        AliveSet { snapshot }
    }

    /// The endpoints, sorted by identity.
    pub fn endpoints(&self) -> AliveEndpoints<'_> {
        AliveEndpoints {
            endpoints: self.snapshot.endpoints(),
        }
    }

    /// The entry for `key`, if alive. O(1).
    pub fn get(&self, key: &InstanceKey) -> Option<&AliveEndpoint> {
        self.snapshot.endpoint(key).map(alive_of)
    }

    /// The balancer endpoints, in the alive set's order.
    pub(crate) fn balanced(&self) -> &[Endpoint] {
        self.snapshot.endpoints()
    }

    /// Number of alive endpoints.
    pub fn len(&self) -> usize {
        self.snapshot.len()
    }

    /// True when nothing is alive.
    pub fn is_empty(&self) -> bool {
        self.snapshot.is_empty()
    }

    /// The alive instances.
    pub fn instances(&self) -> Vec<Arc<Instance>> {
        self.endpoints()
            .iter()
            .map(|e| e.instance.clone())
            .collect()
    }
}

/// The endpoints of an [`AliveSet`], in identity order: indexable and iterable like a
/// slice of [`AliveEndpoint`]s.
#[derive(Debug, Clone, Copy)]
pub struct AliveEndpoints<'a> {
    endpoints: &'a [Endpoint],
}

impl<'a> AliveEndpoints<'a> {
    /// Iterates over the endpoints.
    pub fn iter(&self) -> AliveIter<'a> {
        AliveIter {
            inner: self.endpoints.iter(),
        }
    }

    /// The `i`-th endpoint, if there are more than `i`.
    pub fn get(&self, i: usize) -> Option<&'a AliveEndpoint> {
        self.endpoints.get(i).map(alive_of)
    }

    /// Number of endpoints.
    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }
}

impl std::ops::Index<usize> for AliveEndpoints<'_> {
    type Output = AliveEndpoint;

    fn index(&self, i: usize) -> &AliveEndpoint {
        alive_of(&self.endpoints[i])
    }
}

impl<'a> IntoIterator for AliveEndpoints<'a> {
    type Item = &'a AliveEndpoint;
    type IntoIter = AliveIter<'a>;

    fn into_iter(self) -> AliveIter<'a> {
        self.iter()
    }
}

/// Iterator over [`AliveEndpoints`].
#[derive(Debug, Clone)]
pub struct AliveIter<'a> {
    inner: std::slice::Iter<'a, Endpoint>,
}

impl<'a> Iterator for AliveIter<'a> {
    type Item = &'a AliveEndpoint;

    fn next(&mut self) -> Option<&'a AliveEndpoint> {
        self.inner.next().map(alive_of)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl DoubleEndedIterator for AliveIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.inner.next_back().map(alive_of)
    }
}

impl ExactSizeIterator for AliveIter<'_> {}

/// Where an endpoint stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointState {
    /// Connecting (or handshaking) for the first time, or again.
    Connecting,
    /// Connected and handshaken: in the alive set.
    Alive,
    /// The handshake was refused or failed; retried with backoff.
    Refused(String),
    /// The connection failed or could not be made; retried with backoff.
    Down(String),
    /// Connected, but out of the picks after failures in a row, until a PING says it
    /// answers again (see [`ClientOptions::eject_after_failures`](crate::ClientOptions::eject_after_failures)).
    Ejected(String),
    /// Removed from the registry; finishing in-flight calls.
    Draining,
}

impl std::fmt::Display for EndpointState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EndpointState::Connecting => f.write_str("connecting"),
            EndpointState::Alive => f.write_str("alive"),
            EndpointState::Refused(r) => write!(f, "handshake refused: {r}"),
            EndpointState::Down(r) => write!(f, "down: {r}"),
            EndpointState::Ejected(r) => write!(f, "ejected: {r}"),
            EndpointState::Draining => f.write_str("draining"),
        }
    }
}

/// An endpoint the client follows, with its state.
#[derive(Debug, Clone)]
pub struct EndpointStatus {
    /// The instance.
    pub instance: Arc<Instance>,
    /// Its state.
    pub state: EndpointState,
    /// Successful connections made to it so far.
    pub connects: u64,
}
