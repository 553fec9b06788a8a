//! [`ConnectionId`]: how a connection is told from every other in the process.

use std::sync::atomic::{AtomicU64, Ordering};

/// A connection's identity: unique in this process, stable for the connection's life.
///
/// Use it as a map key for per-connection bookkeeping (a gateway's session table, a
/// server's subscriber list); [`Server::connection`](crate::Server::connection) finds the
/// connection again by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionId(u64);

impl ConnectionId {
    pub(super) fn next() -> ConnectionId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ConnectionId(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The number behind the id.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for ConnectionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "conn-{}", self.0)
    }
}
