//! Following one name (a raft group, a namingserver vGroup) the way both Seata HTTP
//! backends do, as Seata's clients do: the watch long poll with the term of our last
//! read, a read at once when a client asks (see
//! [`Refresher`](meshline_registry_core::Refresher)), a forced read once the last one
//! is older than the backend's period, and recovery (stale, backoff, the next server)
//! when no server answers. Each backend says how it polls, reads and logs in
//! [`Source`].

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use meshline_registry_core::{Backoff, Instance, WatchScope};

/// What a Seata HTTP backend's follow task asks of it.
pub(crate) trait Source: Send + Sync + 'static {
    /// What a failed poll or read says.
    type Error: Send;

    /// A read older than this is done again even without a change notice.
    fn period(&self) -> Duration;

    /// The long poll: `Ok(true)` once `name` moved past `term` (read again), `Ok(false)`
    /// when the server held it without a change.
    fn poll(&self, name: &str, term: i64)
    -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// One read of `name`: the members to list and the term they are of.
    fn read(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<(Vec<Instance>, i64), Self::Error>> + Send;

    /// `e` as the stale reason and the logs show it, and how long to wait before
    /// trying again (`backoff`'s next delay unless the error calls for another).
    fn failed(e: Self::Error, backoff: &mut Backoff) -> (String, Duration);

    /// Logs that `name` reads again after failures.
    fn log_recovered(name: &str);

    /// Logs that `name` cannot be followed (once, when it starts failing).
    fn log_failing(name: &str, reason: &str);
}

/// Follows `scope`'s name from `term` with `source` until the scope stops.
pub(crate) async fn follow<S: Source>(source: Arc<S>, scope: WatchScope, mut term: i64) {
    let name = scope.cluster().to_string();
    let asks = scope.refresher();
    let mut backoff = Backoff::default();
    let mut last_read = Instant::now();
    let mut healthy = true;
    loop {
        if scope.is_stopped() {
            return;
        }
        let changed = if !healthy || last_read.elapsed() >= source.period() {
            Ok(true)
        } else {
            tokio::select! {
                _ = scope.stopped() => return,
                r = source.poll(&name, term) => r,
                // A client learned from a TC that the list is out of date (e.g. a raft
                // follower answered `NotRaftLeader`).
                _ = asks.requested() => Ok(true),
            }
        };
        let result = match changed {
            Ok(false) => Ok(None),
            Ok(true) => tokio::select! {
                _ = scope.stopped() => return,
                r = source.read(&name) => r.map(Some),
            },
            Err(e) => Err(e),
        };
        match result {
            Ok(None) => {}
            Ok(Some((members, read_term))) => {
                term = read_term;
                last_read = Instant::now();
                scope.publish_read(members);
                if !healthy {
                    S::log_recovered(&name);
                }
                healthy = true;
                backoff.reset();
            }
            Err(e) => {
                let (reason, wait) = S::failed(e, &mut backoff);
                if healthy {
                    S::log_failing(&name, &reason);
                }
                scope.mark_stale(&reason);
                healthy = false;
                if !scope.sleep(wait).await {
                    return;
                }
            }
        }
    }
}
