//! Reading and following one cluster: listing its children, and the watch loop that
//! re-arms a one-shot child (or existence) watch after each event and waits for a new
//! session after an expiry. Separate because it is the read side of the backend and
//! runs as one task per watched cluster.

use std::sync::Arc;
use std::time::Duration;

use meshline_registry_core::{Backoff, Instance, RegistryError, WatchScope};
use zookeeper_client as zk;

use super::Inner;
use super::layout::{cluster_path, parse_children};

impl Inner {
    /// The members of `cluster`, listed within the operation timeout (lookup and a
    /// watch's first read). ZooKeeper's client holds a request while it is
    /// disconnected: unbounded, a lookup with the server down waited until the session
    /// expired (its timeout and a third more), then failed with "session expired".
    pub(super) async fn list(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        let after = self.op_timeout();
        let (client, path) = (self.client(), cluster_path(cluster));
        let listed = tokio::time::timeout(after, client.list_children(&path));
        match listed.await {
            Ok(Ok(children)) => Ok(parse_children(cluster, &children)),
            Ok(Err(zk::Error::NoNode)) => Ok(Vec::new()),
            Ok(Err(e)) => Err(self.err("list children", e)),
            Err(_) => Err(self.timed_out("list children", after)),
        }
    }
}

/// Follows one cluster with one-shot child watches (existence watch while the path
/// is missing), publishing the full child list after every change, until `scope` stops
/// (the client closed or the last watch on the cluster was dropped).
pub(super) async fn watch_loop(inner: Arc<Inner>, scope: WatchScope) {
    let cluster = scope.cluster();
    let path = cluster_path(cluster);
    let mut generations = inner.generation.subscribe();
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    loop {
        let client = inner.client();
        let result = client.list_and_watch_children(&path).await;
        let watcher = match result {
            Ok((children, watcher)) => {
                scope.publish_read(parse_children(cluster, &children));
                backoff.reset();
                Some(watcher)
            }
            Err(zk::Error::NoNode) => match client.check_and_watch_stat(&path).await {
                Ok((None, w)) => {
                    scope.publish_read(Vec::new());
                    backoff.reset();
                    Some(w)
                }
                // Created meanwhile: list again.
                Ok((Some(_), _)) => continue,
                Err(e) => {
                    scope.mark_stale(&format!("cannot watch {path}: {e}"));
                    None
                }
            },
            Err(e) => {
                scope.mark_stale(&format!("cannot list {path}: {e}"));
                None
            }
        };
        match watcher {
            Some(w) => {
                let ev = tokio::select! {
                    _ = scope.stopped() => return,
                    ev = w.changed() => ev,
                };
                if ev.session_state.is_terminated() {
                    // Wait for the session loop to install a new session.
                    tokio::select! {
                        _ = scope.stopped() => return,
                        _ = generations.changed() => {}
                    }
                }
            }
            None => {
                let session_over = client.state().is_terminated();
                tokio::select! {
                    _ = scope.stopped() => return,
                    _ = generations.changed(), if session_over => {}
                    _ = backoff.wait(), if !session_over => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zookeeper::ZookeeperRegistry;
    use meshline_registry_core::{Config, RegistryService};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_child_watch_loop_ends_with_the_last_watch() {
        let zk = meshline_testkit::ZooKeeper::start().expect("zookeeper");
        let mut config = Config::default();
        let zk_section = config.registry.section_mut("zk");
        zk_section.set("serverAddr", zk.connect_string());
        zk_section.set("sessionTimeout", "4s");
        let reg = ZookeeperRegistry::connect(&config).await.unwrap();
        let refs = || Arc::strong_count(&reg.inner);
        crate::common::assert_follow_ends_with_last_watch(&reg, &reg.inner.life, "c", 1, refs)
            .await;
        reg.close().await.unwrap();
    }
}
