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

/// Why a watch stream ended.
enum Ended {
    /// The stream broke (connection closed, member declared dead by the HTTP/2
    /// keep-alive, stream reset) or could not be opened: watch again from the last
    /// revision seen, on whichever member answers; no re-list needed.
    Broken,
    /// etcd cancelled the watch (history compacted past our revision, no leader...):
    /// re-list, then watch from the listing's revision.
    Cancelled,
}

/// Follows one cluster: watch from `revision + 1`; after a broken stream watch again
/// from the last revision seen + 1 (nothing missed, nothing re-listed); after a
/// cancellation (compaction) re-list first.
///
/// `revision` only advances with the listing and with delivered events: the header
/// revision of a watch's creation or of a progress answer may run ahead of the events
/// still to come on the stream (etcd 3.4 answers a progress request with the store's
/// current revision), and resuming from it could skip them.
///
/// While the stream is open, a progress request goes out every `inner.heartbeat`: the
/// answers are data from the server, so a live member is never PINGed (see the
/// keep-alive notes in `lib.rs`) and a silent one is found by the HTTP/2 keep-alive
/// within `keepaliveTime + keepaliveTimeout`.
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
        let ended = follow_once(
            &inner,
            &scope,
            &prefix,
            &mut members,
            &mut revision,
            &mut backoff,
        )
        .await;
        let Some(ended) = ended else { return };
        if !scope.sleep(backoff.next_delay()).await {
            return;
        }
        if let Ended::Broken = ended {
            continue;
        }
        // Re-list until it works, then loop to re-watch from the new revision.
        loop {
            match inner.get_prefix(&cluster).await {
                Ok((m, rev)) => {
                    members = m;
                    revision = rev;
                    scope.publish_read(members_of(&members));
                    break;
                }
                Err(e) => {
                    scope.mark_stale(&format!("cannot list: {e}"));
                }
            }
            if !scope.sleep(backoff.next_delay()).await {
                return;
            }
        }
    }
}

/// One watch stream, from `revision + 1` until it ends; `None` when the task must stop.
async fn follow_once(
    inner: &Inner,
    scope: &WatchScope,
    prefix: &str,
    members: &mut BTreeMap<Vec<u8>, Instance>,
    revision: &mut i64,
    backoff: &mut Backoff,
) -> Option<Ended> {
    let cluster = scope.cluster();
    let opts = WatchOptions::new()
        .with_prefix()
        .with_start_revision(revision.saturating_add(1));
    let open = timed(&inner.servers, "watch", inner.op_timeout, || {
        let mut client = inner.client.watch_client();
        let opts = opts.clone();
        let prefix = prefix.to_string();
        async move { client.watch(prefix, Some(opts)).await }
    });
    let watched = tokio::select! {
        _ = scope.stopped() => return None,
        w = open => w,
    };
    let (mut requests, mut stream) = match watched {
        Ok(stream) => stream.split(),
        Err(e) => {
            scope.mark_stale(&format!("cannot watch: {e}"));
            return Some(Ended::Broken);
        }
    };
    let mut beat = tokio::time::interval(inner.heartbeat);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let msg = tokio::select! {
            _ = scope.stopped() => return None,
            _ = beat.tick() => {
                if let Err(e) = requests.request_progress().await {
                    scope.mark_stale(&format!("watch broken: {e}"));
                    return Some(Ended::Broken);
                }
                continue;
            }
            m = stream.message() => m,
        };
        let resp = match msg {
            Ok(Some(resp)) => resp,
            Ok(None) => {
                scope.mark_stale("etcd closed the watch stream");
                return Some(Ended::Broken);
            }
            Err(e) => {
                scope.mark_stale(&format!("watch broken: {e}"));
                return Some(Ended::Broken);
            }
        };
        if resp.canceled() || resp.compact_revision() > 0 {
            tracing::info!(
                registry = KIND,
                cluster = %cluster,
                compact_revision = resp.compact_revision(),
                reason = resp.cancel_reason(),
                "watch cancelled by the server; re-listing"
            );
            scope.mark_stale(&format!("watch cancelled: {}", resp.cancel_reason()));
            return Some(Ended::Cancelled);
        }
        if resp.created() {
            // A store behind the revision we saw lost its data (a member or cluster
            // restored from scratch): events from it would not tell us what is gone.
            let store = resp.header().map(|h| h.revision()).unwrap_or(i64::MAX);
            if store < *revision {
                tracing::warn!(
                    registry = KIND,
                    cluster = %cluster,
                    store,
                    seen = *revision,
                    "etcd's revision went backwards; re-listing"
                );
                scope.mark_stale("etcd's revision went backwards");
                return Some(Ended::Cancelled);
            }
            backoff.reset();
            tracing::debug!(registry = KIND, cluster = %cluster, from = *revision + 1, "watching");
            scope.mark_connected();
        }
        for ev in resp.events() {
            let Some(kv) = ev.kv() else { continue };
            *revision = (*revision).max(kv.mod_revision());
            match ev.event_type() {
                EventType::Put => match member_of(prefix, cluster, kv) {
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
        if !resp.events().is_empty() {
            scope.publish(members_of(members));
        }
    }
}
