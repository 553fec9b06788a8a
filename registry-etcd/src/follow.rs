//! Listing and following one cluster: the prefix get, and the watch loop that applies
//! events to the member map and re-lists and re-watches after any break. Separate
//! because it is the read side of the backend and runs as one task per watched cluster.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{EventType, GetOptions, WatchOptions};
use meshline_registry_core::{Backoff, Instance, RegistryError, WatchScope};

use crate::layout::{cluster_prefix, member_of, members_of, parse_members};
use crate::timed::timed;
use crate::{Inner, KIND};

impl Inner {
    pub(crate) async fn get_prefix(
        &self,
        cluster: &str,
    ) -> Result<(BTreeMap<Vec<u8>, Instance>, i64), RegistryError> {
        let prefix = cluster_prefix(cluster);
        let resp = timed(&self.servers, "get", self.op_timeout, || {
            let mut kv = self.client.kv_client();
            let prefix = prefix.clone();
            async move { kv.get(prefix, Some(GetOptions::new().with_prefix())).await }
        })
        .await?;
        let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
        Ok((parse_members(cluster, resp.kvs()), revision))
    }
}

/// Follows one cluster: watch from `revision + 1`, re-list and re-watch on any break.
pub(crate) async fn watch_loop(
    inner: Arc<Inner>,
    scope: WatchScope,
    mut members: BTreeMap<Vec<u8>, Instance>,
    mut revision: i64,
) {
    let cluster = scope.cluster().to_string();
    let prefix = cluster_prefix(&cluster);
    // Capped at 1 s: after an election or a restart the watch is live again within a
    // second of the cluster answering.
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
    loop {
        // 1. Watch from the revision after our list.
        let opts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision.saturating_add(1));
        let open = timed(&inner.servers, "watch", inner.op_timeout, || {
            let mut client = inner.client.watch_client();
            let (prefix, opts) = (prefix.clone(), opts.clone());
            async move { client.watch(prefix, Some(opts)).await }
        });
        let watched = tokio::select! {
            _ = scope.stopped() => return,
            w = open => w,
        };
        match watched {
            Ok(mut stream) => loop {
                let msg = tokio::select! {
                    _ = scope.stopped() => return,
                    m = stream.message() => m,
                };
                match msg {
                    Ok(Some(resp)) => {
                        if resp.canceled() || resp.compact_revision() > 0 {
                            tracing::info!(
                                registry = KIND,
                                cluster = %cluster,
                                compact_revision = resp.compact_revision(),
                                reason = resp.cancel_reason(),
                                "watch cancelled by the server; re-listing"
                            );
                            break;
                        }
                        if resp.created() {
                            backoff.reset();
                            scope.mark_connected();
                        }
                        for ev in resp.events() {
                            let Some(kv) = ev.kv() else { continue };
                            revision = revision.max(kv.mod_revision());
                            match ev.event_type() {
                                EventType::Put => match member_of(&prefix, &cluster, kv) {
                                    Some(i) => {
                                        members.insert(kv.key().to_vec(), i);
                                    }
                                    None => {
                                        members.remove(kv.key());
                                    }
                                },
                                EventType::Delete => {
                                    members.remove(kv.key());
                                }
                            }
                        }
                        if let Some(h) = resp.header() {
                            revision = revision.max(h.revision());
                        }
                        if !resp.events().is_empty() {
                            scope.publish(members_of(&members));
                        }
                    }
                    Ok(None) => {
                        scope.mark_stale("etcd closed the watch stream");
                        break;
                    }
                    Err(e) => {
                        scope.mark_stale(&format!("watch broken: {e}"));
                        break;
                    }
                }
            },
            Err(e) => {
                scope.mark_stale(&format!("cannot watch: {e}"));
            }
        }
        // 2. Re-list until it works, then loop to re-watch from the new revision.
        loop {
            if !scope.sleep(backoff.next_delay()).await {
                return;
            }
            match inner.get_prefix(&cluster).await {
                Ok((m, rev)) => {
                    members = m;
                    revision = rev;
                    scope.publish(members_of(&members));
                    scope.mark_connected();
                    break;
                }
                Err(e) => {
                    scope.mark_stale(&format!("cannot list: {e}"));
                }
            }
        }
    }
}
