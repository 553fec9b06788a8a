//! Following one raft group: the watch long poll, a read at once when a client asks
//! (see [`Refresher`](meshline_registry_core::Refresher)), a forced read every
//! `metadataMaxAgeMs`, and recovery (stale, backoff, next TC) when no TC answers, as
//! `RaftRegistryServiceImpl.startQueryMetadata` does.

use std::sync::Arc;
use std::time::Instant;

use meshline_registry_core::{Backoff, WatchScope};

use super::Inner;
use super::client::CallError;

/// Follows `scope`'s raft group from `term` until the scope stops.
pub(super) async fn follow(inner: Arc<Inner>, scope: WatchScope, mut term: i64) {
    let group = scope.cluster().to_string();
    let asks = scope.refresher();
    let mut backoff = Backoff::default();
    let mut last_read = Instant::now();
    let mut healthy = true;
    loop {
        if scope.is_stopped() {
            return;
        }
        let due = last_read.elapsed() >= inner.metadata_max_age;
        let changed = if due || !healthy {
            Ok(true)
        } else {
            tokio::select! {
                _ = scope.stopped() => return,
                r = inner.watch(&group, term) => r,
                // A client learned from a TC that the list is out of date (a
                // follower answered `NotRaftLeader`).
                _ = asks.requested() => Ok(true),
            }
        };
        let result = match changed {
            Ok(false) => Ok(None),
            Ok(true) => tokio::select! {
                _ = scope.stopped() => return,
                r = inner.metadata(&group) => r.map(Some),
            },
            Err(e) => Err(e),
        };
        match result {
            Ok(None) => {}
            Ok(Some(m)) => {
                term = m.term;
                last_read = Instant::now();
                scope.publish_read(m.listed());
                if !healthy {
                    tracing::info!(
                        registry = super::KIND,
                        group,
                        "metadata read again; following"
                    );
                }
                healthy = true;
                backoff.reset();
            }
            Err(e) => {
                let reason = e.describe().to_string();
                if healthy {
                    tracing::warn!(registry = super::KIND, group, error = %reason, "cannot follow the raft group; keeping the last list");
                }
                scope.mark_stale(&reason);
                healthy = false;
                let wait = match e {
                    // A wrong password stays wrong: retry slowly.
                    CallError::LoginRefused(_) => std::time::Duration::from_secs(10),
                    _ => backoff.next_delay(),
                };
                if !scope.sleep(wait).await {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::RaftRegistry;
    use meshline_registry_core::RegistryService;
    use meshline_registry_core::config::ConfigLoader;
    use std::sync::Arc;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_follow_task_ends_with_the_last_watch() {
        let d = meshline_testkit::RaftDouble::start(Default::default()).unwrap();
        d.set_members("c", &["10.0.0.1:8091"], Some(0));
        let config = ConfigLoader::new()
            .set("registry.raft.serverAddr", d.server_addr())
            .load()
            .unwrap();
        let reg = RaftRegistry::connect(&config).await.unwrap();
        let refs = || Arc::strong_count(&reg.inner);
        crate::common::assert_follow_ends_with_last_watch(&reg, &reg.inner.life, "c", 1, refs)
            .await;
        reg.close().await.unwrap();
    }
}
