//! Following one raft group: the watch long poll, a read at once when a client asks
//! (see [`Refresher`](meshline_registry_core::Refresher)), a forced read every
//! `metadataMaxAgeMs`, and recovery (stale, backoff, next TC) when no TC answers, as
//! `RaftRegistryServiceImpl.startQueryMetadata` does. The loop is the one both Seata
//! HTTP backends run ([`crate::seata_http::follow`]); here is what it asks of the TCs.

use std::time::Duration;

use meshline_registry_core::{Backoff, Instance};

use super::client::CallError;
use super::{Inner, KIND};
use crate::seata_http::follow::Source;

/// A raft group is followed by the loop of [`crate::seata_http::follow`].
impl Source for Inner {
    type Error = CallError;

    fn period(&self) -> Duration {
        self.metadata_max_age
    }

    async fn poll(&self, group: &str, term: i64) -> Result<bool, CallError> {
        self.watch(group, term).await
    }

    async fn read(&self, group: &str) -> Result<(Vec<Instance>, i64), CallError> {
        self.metadata(group).await.map(|m| (m.listed(), m.term))
    }

    fn failed(e: CallError, backoff: &mut Backoff) -> (String, Duration) {
        let reason = e.describe().to_string();
        let wait = match e {
            // A wrong password stays wrong: retry slowly.
            CallError::LoginRefused(_) => Duration::from_secs(10),
            _ => backoff.next_delay(),
        };
        (reason, wait)
    }

    fn log_recovered(group: &str) {
        tracing::info!(registry = KIND, group, "metadata read again; following");
    }

    fn log_failing(group: &str, reason: &str) {
        tracing::warn!(registry = KIND, group, error = %reason, "cannot follow the raft group; keeping the last list");
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
