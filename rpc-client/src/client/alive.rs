//! The alive set (connected, handshaken endpoints: what the balancer picks from) and
//! the state of every endpoint the client follows.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use meshline_registry_core::{Instance, InstanceKey};

use crate::connection::Connection;

/// One endpoint of the alive set: connected and handshaken.
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
}

impl AliveEndpoint {
    pub(crate) fn new(instance: Arc<Instance>, connection: Connection) -> Self {
        AliveEndpoint {
            instance,
            connection,
            failures: Arc::default(),
        }
    }

    /// A call succeeded: the failures in a row are over.
    #[inline]
    pub(crate) fn succeeded(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// A call failed: the failures in a row, this one included.
    pub(crate) fn failed(&self) -> u32 {
        self.failures.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// The alive set at one moment: every connected, handshaken endpoint.
#[derive(Debug, Default)]
pub struct AliveSet {
    pub(super) entries: Vec<AliveEndpoint>,
    pub(super) index: HashMap<InstanceKey, usize>,
}

impl AliveSet {
    /// The endpoints, sorted by identity.
    pub fn endpoints(&self) -> &[AliveEndpoint] {
        &self.entries
    }

    /// The entry for `key`, if alive.
    pub fn get(&self, key: &InstanceKey) -> Option<&AliveEndpoint> {
        self.index.get(key).map(|&i| &self.entries[i])
    }

    /// Number of alive endpoints.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is alive.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The alive instances.
    pub fn instances(&self) -> Vec<Arc<Instance>> {
        self.entries.iter().map(|e| e.instance.clone()).collect()
    }
}

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
