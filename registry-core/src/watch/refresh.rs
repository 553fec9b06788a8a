//! Asking a registry to read a cluster again now ([`Refresher`]).

use std::sync::Arc;

use tokio::sync::Notify;

/// Asks the registry to read one cluster again now. Cheap to clone; every clone asks
/// for the same cluster.
///
/// A registry client learns of changes as its registry tells them: a push, a long poll
/// answered, or its next poll. A server can know better first: a Seata raft follower
/// answers a request `NotRaftLeader` as soon as the leader changed, while the client's
/// listing still names it. A `Refresher` is how the client says so: the backend's
/// follow task reads the cluster at once instead of waiting for its registry. Backends
/// that are told every change (their registry pushes) have nothing to read sooner, and
/// ignore it.
#[derive(Debug, Clone, Default)]
pub struct Refresher(Arc<Notify>);

impl Refresher {
    /// Asks for a read. Asks made before the follow task looks (one, or many) make one
    /// read: a burst of requests refused at once asks once.
    pub fn request(&self) {
        self.0.notify_one();
    }

    /// Resolves once a read was asked for (for the backend's follow task; consumes
    /// the ask).
    pub async fn requested(&self) {
        self.0.notified().await
    }
}
