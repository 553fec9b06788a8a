//! The registry mirror shared by every watch: full and delta fetches with the
//! `apps__hashcode` check and the fallback to a full fetch, and the fetcher task that
//! refreshes the mirror and publishes each watched cluster. Separate because it is the
//! read side's background task, one per registry.

use std::sync::Arc;
use std::time::Duration;

use meshline_registry_core::Backoff;

use super::http::CallError;
use super::{Inner, KIND, parse};

impl Inner {
    /// A full fetch, replacing the mirror.
    pub(super) async fn full_fetch(
        &self,
        mirror: &mut Option<parse::Mirror>,
    ) -> Result<(), String> {
        let doc = self.get_json(&["apps"]).await.map_err(|e| e.describe())?;
        *mirror = Some(parse::Mirror::from_full(&doc)?);
        Ok(())
    }

    /// A delta fetch merged into the mirror, with the hash-code check and the fallback
    /// to a full fetch.
    async fn refresh(&self, mirror: &mut Option<parse::Mirror>) -> Result<(), String> {
        let Some(m) = mirror.as_mut() else {
            return self.full_fetch(mirror).await;
        };
        let doc = match self.get_json(&["apps", "delta"]).await {
            Ok(d) => d,
            Err(CallError::Status(s, _)) => {
                tracing::debug!(registry = KIND, status = %s, "delta refused; full fetch");
                return self.full_fetch(mirror).await;
            }
            Err(e) => return Err(e.describe()),
        };
        let server_hash = match m.apply_delta(&doc) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(
                    registry = KIND,
                    error = %meshline_registry_core::redact::truncate(&e, meshline_registry_core::redact::SHOWN_BYTES),
                    "unusable delta; full fetch"
                );
                return self.full_fetch(mirror).await;
            }
        };
        let local = m.hashcode();
        if server_hash.as_deref() != Some(local.as_str()) {
            tracing::debug!(
                registry = KIND,
                server = server_hash.as_deref().unwrap_or("<none>"),
                local,
                "reconcile hash codes differ; full fetch"
            );
            return self.full_fetch(mirror).await;
        }
        Ok(())
    }
}

/// Refreshes the mirror every refresh interval and publishes every watched cluster.
pub(super) async fn fetcher(inner: Arc<Inner>) {
    let mut backoff = Backoff::new(Duration::from_millis(100), inner.refresh);
    let mut delay = inner.refresh;
    loop {
        if !inner.life.sleep(delay).await {
            return;
        }
        let r = tokio::select! {
            _ = inner.life.closed() => return,
            r = async { inner.refresh(&mut *inner.mirror.lock().await).await } => r,
        };
        let hub = inner.life.hub();
        match r {
            Ok(()) => {
                // The watched names are read without the mirror locked: a first watch
                // holds the lifecycle's lock while it reads the mirror.
                let watched = inner.life.watched().await;
                // Connected before the lists: a watcher that sees a fresh list also
                // sees the registry reachable (as `WatchScope::publish_read`).
                hub.mark_all_connected();
                if let Some(m) = inner.mirror.lock().await.as_ref() {
                    for cluster in watched {
                        hub.publish(&cluster, m.members(&cluster));
                    }
                }
                backoff.reset();
                delay = inner.refresh;
            }
            Err(reason) => {
                hub.mark_all_stale(&reason);
                delay = backoff.next_delay();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eureka::EurekaRegistry;
    use meshline_registry_core::{Config, RegistryService};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cluster_is_no_longer_published_after_its_last_watch() {
        let server = meshline_testkit::EurekaDouble::start(Default::default()).unwrap();
        let mut config = Config::default();
        let eureka = config.registry.section_mut("eureka");
        eureka.set("serviceUrl", server.service_url());
        eureka.set("refreshInterval", "50ms");
        let reg = EurekaRegistry::connect(&config).await.unwrap();
        let life = &reg.inner.life;
        // The fetcher is shared and outlives the watch: its reference stays.
        let refs = || Arc::strong_count(&reg.inner);
        crate::common::assert_follow_ends_with_last_watch(&reg, life, "c", 0, refs).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            life.hub().clusters().is_empty(),
            "the fetcher published a cluster nobody watches"
        );
        reg.close().await.unwrap();
    }
}
