//! Following one vGroup: the watch long poll with our last term, a forced discovery
//! every 30 s (Seata's `PULL_PERIOD`), and recovery when no namingserver answers (stale,
//! backoff, the next namingserver, a fresh discovery), as
//! `NamingserverRegistryServiceImpl.subscribe` does. The loop is the one both Seata
//! HTTP backends run ([`crate::seata_http::follow`]); here is what it asks of the
//! namingservers.

use std::time::Duration;

use meshline_registry_core::{Backoff, Instance};

use super::{Inner, KIND};
use crate::seata_http::follow::Source;

/// Seata's client pulls a vGroup this often even without a change notice.
pub(super) const PULL_PERIOD: Duration = Duration::from_secs(30);

/// A vGroup is followed by the loop of [`crate::seata_http::follow`].
impl Source for Inner {
    type Error = String;

    fn period(&self) -> Duration {
        PULL_PERIOD
    }

    async fn poll(&self, vgroup: &str, term: i64) -> Result<bool, String> {
        self.watch_once(vgroup, term).await
    }

    /// The term is the namingserver's own view of the vGroup, whatever it is: after
    /// its restart it is 0 (no change seen yet), so our next watch is answered by the
    /// first re-registration even when that came before the watch. (Seata's client
    /// keeps one term for every vGroup and ignores 0 and -1, and then can wait out a
    /// 30 s pull.)
    async fn read(&self, vgroup: &str) -> Result<(Vec<Instance>, i64), String> {
        self.discover(vgroup).await.map(|d| (d.members, d.term))
    }

    fn failed(reason: String, backoff: &mut Backoff) -> (String, Duration) {
        (reason, backoff.next_delay())
    }

    fn log_recovered(vgroup: &str) {
        tracing::info!(registry = KIND, vgroup, "discovery works again; following");
    }

    fn log_failing(vgroup: &str, reason: &str) {
        tracing::warn!(registry = KIND, vgroup, error = %reason, "cannot follow the vGroup; keeping the last list");
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
