//! What ZooKeeper holds near a cluster: the other clusters under `/registry/zk` that
//! have members.
//!
//! One listing of `/registry/zk` gives the cluster names; then each cluster's children
//! are listed, all requests at once (the client pipelines them on its one connection),
//! each bounded by the operation timeout. The children are parsed by the layout module
//! exactly as a lookup parses them.

use std::time::Duration;

use meshline_registry_core::{Nearby, RegistryError};
use tokio::task::JoinSet;
use zookeeper_client as zk;

use super::Inner;
use super::layout::{ROOT, cluster_path, parse_children};

/// At most this many clusters are listed (and reported).
const MAX_PLACES: usize = 300;
/// At most this many members are shown per place.
const MAX_MEMBERS: usize = 10;

impl Inner {
    /// The clusters other than `cluster` with at least one member, in name order.
    pub(super) async fn nearby(&self, cluster: &str) -> Result<Vec<Nearby>, RegistryError> {
        let after = self.op_timeout();
        let client = self.client();
        let mut names = match bounded(after, client.list_children(ROOT)).await {
            Some(Ok(names)) => names,
            Some(Err(zk::Error::NoNode)) => return Ok(Vec::new()),
            Some(Err(e)) => return Err(self.err("list children of /registry/zk", e)),
            None => return Err(self.timed_out("list children of /registry/zk", after)),
        };
        names.retain(|n| n != cluster);
        names.sort();
        if names.len() > MAX_PLACES {
            tracing::debug!(
                registry = super::KIND,
                clusters = names.len(),
                "nearby: more clusters than reported; the first {MAX_PLACES} by name are listed"
            );
            names.truncate(MAX_PLACES);
        }
        let mut lists = JoinSet::new();
        for (at, name) in names.iter().enumerate() {
            let client = client.clone();
            let path = cluster_path(name);
            lists.spawn(async move { (at, bounded(after, client.list_children(&path)).await) });
        }
        let mut places: Vec<Option<Nearby>> = vec![None; names.len()];
        while let Some(joined) = lists.join_next().await {
            let Ok((at, listed)) = joined else { continue };
            let name = &names[at];
            let children = match listed {
                Some(Ok(children)) => children,
                // Deleted between the two listings: nothing there.
                Some(Err(zk::Error::NoNode)) => continue,
                Some(Err(e)) => return Err(self.err("list children", e)),
                None => return Err(self.timed_out("list children", after)),
            };
            let mut members = parse_children(name, &children);
            if members.is_empty() {
                continue;
            }
            members.truncate(MAX_MEMBERS);
            places[at] = Some(Nearby {
                place: format!("cluster `{name}` ({})", cluster_path(name)),
                members,
                cluster: Some(name.clone()),
                select_with: Vec::new(),
            });
        }
        Ok(places.into_iter().flatten().collect())
    }
}

/// `f`'s result, or `None` when it takes longer than `after` (while disconnected the
/// client queues requests until it reconnects or gives the session up).
async fn bounded<T>(after: Duration, f: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout(after, f).await.ok()
}
