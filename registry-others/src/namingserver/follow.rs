//! Following one vGroup: the watch long poll with our last term, a forced discovery
//! every 30 s (Seata's `PULL_PERIOD`), and recovery when no namingserver answers (stale,
//! backoff, the next namingserver, a fresh discovery), as
//! `NamingserverRegistryServiceImpl.subscribe` does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use meshline_registry_core::{Backoff, WatchScope};

use super::{Inner, KIND};

/// Seata's client pulls a vGroup this often even without a change notice.
pub(super) const PULL_PERIOD: Duration = Duration::from_secs(30);

/// Follows `scope`'s vGroup from `term` until the scope stops.
pub(super) async fn follow(inner: Arc<Inner>, scope: WatchScope, mut term: i64) {
    let vgroup = scope.cluster().to_string();
    let asks = scope.refresher();
    let mut backoff = Backoff::default();
    let mut last_pull = Instant::now();
    let mut healthy = true;
    loop {
        if scope.is_stopped() {
            return;
        }
        let changed = if !healthy || last_pull.elapsed() >= PULL_PERIOD {
            Ok(true)
        } else {
            tokio::select! {
                _ = scope.stopped() => return,
                r = inner.watch_once(&vgroup, term) => r,
                // A client learned from a TC that the list is out of date.
                _ = asks.requested() => Ok(true),
            }
        };
        let result = match changed {
            Ok(false) => Ok(None),
            Ok(true) => tokio::select! {
                _ = scope.stopped() => return,
                r = inner.discover(&vgroup) => r.map(Some),
            },
            Err(e) => Err(e),
        };
        match result {
            Ok(None) => {}
            Ok(Some(d)) => {
                // The namingserver's own view of the vGroup, whatever it is: after
                // its restart it is 0 (no change seen yet), so our next watch is
                // answered by the first re-registration even when that came before
                // the watch. (Seata's client keeps one term for every vGroup and
                // ignores 0 and -1, and then can wait out a 30 s pull.)
                term = d.term;
                last_pull = Instant::now();
                scope.publish_read(d.members);
                if !healthy {
                    tracing::info!(registry = KIND, vgroup, "discovery works again; following");
                }
                healthy = true;
                backoff.reset();
            }
            Err(reason) => {
                if healthy {
                    tracing::warn!(registry = KIND, vgroup, error = %reason, "cannot follow the vGroup; keeping the last list");
                }
                scope.mark_stale(&reason);
                healthy = false;
                if !scope.sleep(backoff.next_delay()).await {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::NamingserverRegistry;
    use meshline_registry_core::RegistryService;
    use meshline_registry_core::config::ConfigLoader;
    use std::sync::Arc;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_follow_task_ends_with_the_last_watch() {
        let ns = meshline_testkit::NamingserverDouble::start(Default::default()).unwrap();
        let config = ConfigLoader::new()
            .set("registry.seata.server-addr", ns.server_addr())
            .load()
            .unwrap();
        let reg = NamingserverRegistry::connect(&config).await.unwrap();
        // The keeper holds one reference of its own; it is not a follow task.
        let refs = || Arc::strong_count(&reg.inner);
        crate::common::assert_follow_ends_with_last_watch(&reg, &reg.inner.life, "c", 1, refs)
            .await;
        reg.close().await.unwrap();
    }
}
