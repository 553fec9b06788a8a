//! Membership watches: full snapshots with revisions, registry health, and the hub
//! backends publish into.
//!
//! Backends never hand deltas to users. They publish the *whole* member list of a
//! cluster into a [`WatchHub`]; the hub sorts and de-duplicates it, drops it when it is
//! identical to the current one, applies the empty-list policy, and bumps a revision.
//! Users hold a [`Watch`]: its first [`Watch::next`] returns the current snapshot at
//! once, later ones only when something changed. Readers never lock: a snapshot is an
//! `Arc<[Instance]>` swapped whole (a `tokio::sync::watch` channel underneath). A
//! [`Watch`] is also a `futures::Stream` of the same snapshots (see `watch/stream.rs`),
//! ending when the registry is closed.

mod refresh;
mod stream;

pub use refresh::Refresher;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::watch;

use crate::{Instance, RegistryError};

/// An immutable member list of one cluster, with the hub's revision number.
#[derive(Debug, Clone)]
pub struct Snapshot {
    instances: Arc<[Instance]>,
    revision: u64,
}

impl Snapshot {
    /// A snapshot of `instances` (taken as they are) at `revision`.
    pub fn new(instances: Vec<Instance>, revision: u64) -> Self {
        Snapshot {
            instances: instances.into(),
            revision,
        }
    }

    /// The members, sorted by host and port, one entry per identity.
    pub fn instances(&self) -> &Arc<[Instance]> {
        &self.instances
    }

    /// Increases by one on every applied change; 0 before anything was published.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.instances.len()
    }

    /// True when there are no members.
    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }
}

/// Whether the registry behind a watch is currently reachable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// The backend is connected and the snapshot is live.
    Connected,
    /// The backend lost the registry; the snapshot is the last good one.
    Stale {
        /// When the connection was lost (kept across repeated failures).
        since: SystemTime,
        /// Why, in the backend's words.
        reason: String,
    },
}

impl Health {
    /// True for [`Health::Connected`].
    pub fn is_connected(&self) -> bool {
        matches!(self, Health::Connected)
    }
}

/// What to do when a registry reports a cluster with no members while we know some.
///
/// A registry that blinks (a restart, a network split, an expired session) can report an
/// empty list for a moment; dropping every endpoint because of that is worse than
/// routing to a slightly stale list, so [`EmptyProtection::Protect`] is the default (as
/// in Nacos and Seata). The backend still applies removals that leave at least one
/// member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EmptyProtection {
    /// Keep the last non-empty snapshot and log a warning.
    #[default]
    Protect,
    /// Apply the empty list like any other.
    Apply,
}

impl EmptyProtection {
    /// The policy `registry.emptyProtection` asks for (on by default, as Seata's).
    pub fn of(registry: &crate::config::RegistryConfig) -> EmptyProtection {
        if registry.empty_protection {
            EmptyProtection::Protect
        } else {
            EmptyProtection::Apply
        }
    }
}

/// What [`WatchHub::publish`] did with a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishOutcome {
    /// A new snapshot with this revision was sent to watchers.
    Changed(u64),
    /// The list equals the current snapshot; nothing was sent.
    Unchanged,
    /// The list was empty and [`EmptyProtection::Protect`] kept the last one.
    ProtectedEmpty,
}

struct Channel {
    snapshot: watch::Sender<Snapshot>,
    health: watch::Sender<Health>,
    refresh: Refresher,
}

impl Channel {
    fn new() -> Self {
        Channel {
            snapshot: watch::Sender::new(Snapshot::new(Vec::new(), 0)),
            health: watch::Sender::new(Health::Connected),
            refresh: Refresher::default(),
        }
    }
}

/// Where a backend publishes full member lists; hands out [`Watch`]es.
///
/// One hub per registry client. Cheap to share (`Arc<WatchHub>`); all methods take
/// `&self`.
pub struct WatchHub {
    kind: &'static str,
    policy: EmptyProtection,
    channels: Mutex<HashMap<String, Arc<Channel>>>,
}

impl std::fmt::Debug for WatchHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchHub")
            .field("kind", &self.kind)
            .field("policy", &self.policy)
            .field("clusters", &self.clusters())
            .finish()
    }
}

impl WatchHub {
    /// A hub for a registry of type `kind` with the given empty-list policy.
    pub fn new(kind: &'static str, policy: EmptyProtection) -> Self {
        WatchHub {
            kind,
            policy,
            channels: Mutex::new(HashMap::new()),
        }
    }

    /// The empty-list policy in force.
    pub fn policy(&self) -> EmptyProtection {
        self.policy
    }

    fn channel(&self, cluster: &str) -> Arc<Channel> {
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(cluster.to_string())
            .or_insert_with(|| Arc::new(Channel::new()))
            .clone()
    }

    fn existing(&self, cluster: &str) -> Option<Arc<Channel>> {
        let map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        map.get(cluster).cloned()
    }

    /// Publishes the full member list of `cluster`.
    ///
    /// The list is sorted by identity and de-duplicated (the first entry of an identity
    /// wins; later ones are logged). Identical lists are not re-sent. An empty list
    /// replacing a non-empty one is subject to the [`EmptyProtection`] policy.
    pub fn publish(&self, cluster: &str, instances: Vec<Instance>) -> PublishOutcome {
        // Sorted, de-duplicated (first of each identity kept) and moved into the shared
        // slice the snapshot holds, ordered through integer ranks (see `sorted_unique`).
        let (instances, dropped) = crate::sorted_unique(instances);
        if dropped > 0 {
            tracing::warn!(
                registry = self.kind,
                cluster,
                dropped,
                "duplicate instances in registry data; kept the first of each address"
            );
        }
        self.publish_unique(cluster, instances)
    }

    /// [`publish`](Self::publish) of another watch's snapshot, forwarded: a hub's
    /// snapshot is sorted and unique already, so it is shared as it is (checked in one
    /// pass, not sorted again), and the same slice published again is seen unchanged
    /// without comparing its members.
    pub(crate) fn forward(&self, cluster: &str, instances: &Arc<[Instance]>) -> PublishOutcome {
        let sorted = instances.windows(2).all(|w| w[0].key() < w[1].key());
        if !sorted {
            return self.publish(cluster, instances.to_vec());
        }
        self.publish_unique(cluster, instances.clone())
    }

    /// Publishes `instances`, sorted and unique.
    fn publish_unique(&self, cluster: &str, instances: Arc<[Instance]>) -> PublishOutcome {
        let ch = self.channel(cluster);
        let mut outcome = PublishOutcome::Unchanged;
        ch.snapshot.send_if_modified(|cur| {
            if instances.is_empty() && !cur.is_empty() && self.policy == EmptyProtection::Protect {
                tracing::warn!(
                    registry = self.kind,
                    cluster,
                    kept = cur.len(),
                    "registry reported no members; keeping the last non-empty list (empty protection)"
                );
                outcome = PublishOutcome::ProtectedEmpty;
                return false;
            }
            if Arc::ptr_eq(&cur.instances, &instances) || cur.instances[..] == instances[..] {
                return false;
            }
            let revision = cur.revision + 1;
            *cur = Snapshot {
                instances,
                revision,
            };
            tracing::debug!(registry = self.kind, cluster, revision, members = cur.len(), "membership changed");
            outcome = PublishOutcome::Changed(revision);
            true
        });
        outcome
    }

    /// A watch on `cluster`. Its first value is whatever was published last (revision
    /// 0 and empty when nothing was); backends publish the initial list before
    /// returning a watch to the user.
    pub fn subscribe(&self, cluster: &str) -> Watch {
        // The receivers are made under the map's lock, so `forget_if_unwatched` never
        // removes a channel between its lookup here and the new watch on it.
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        let ch = map
            .entry(cluster.to_string())
            .or_insert_with(|| Arc::new(Channel::new()));
        Watch {
            kind: self.kind,
            snapshot: ch.snapshot.subscribe(),
            health: ch.health.subscribe(),
            refresh: ch.refresh.clone(),
            delivered_first: false,
            changed: stream::Changed::default(),
        }
    }

    /// Where the watchers of `cluster` ask for a read now ([`Watch::refresher`]): the
    /// backend's follow task waits on it.
    pub fn refresher(&self, cluster: &str) -> Refresher {
        self.channel(cluster).refresh.clone()
    }

    /// Resolves once no [`Watch`] on `cluster` is left (at once when there is none or
    /// the cluster is unknown). Backends' watch tasks wait on it to end themselves.
    pub async fn watchers_gone(&self, cluster: &str) {
        if let Some(ch) = self.existing(cluster) {
            ch.snapshot.closed().await;
        }
    }

    /// Forgets `cluster` (its snapshot and health) when no [`Watch`] on it is left, so
    /// a hub that watched many names over its life does not keep them all. Returns
    /// whether it did. The check and the removal are one step under the hub's lock,
    /// so a concurrent [`subscribe`](Self::subscribe) either keeps the channel alive or
    /// gets a fresh one.
    pub fn forget_if_unwatched(&self, cluster: &str) -> bool {
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(cluster) {
            Some(ch) if ch.snapshot.receiver_count() == 0 => {
                map.remove(cluster);
                tracing::debug!(
                    registry = self.kind,
                    cluster,
                    "no watch left; forgot the cluster"
                );
                true
            }
            _ => false,
        }
    }

    /// The current snapshot of `cluster`, if anything watches or was published for it.
    pub fn current(&self, cluster: &str) -> Option<Snapshot> {
        self.existing(cluster)
            .map(|ch| ch.snapshot.borrow().clone())
    }

    /// Every cluster with a channel (watched or published), sorted.
    pub fn clusters(&self) -> Vec<String> {
        let map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<String> = map.keys().cloned().collect();
        v.sort();
        v
    }

    /// Number of live [`Watch`]es on `cluster`.
    pub fn watcher_count(&self, cluster: &str) -> usize {
        self.existing(cluster)
            .map(|ch| ch.snapshot.receiver_count())
            .unwrap_or(0)
    }

    /// Marks `cluster` as stale (the registry is unreachable). The `since` time of an
    /// already stale cluster is kept; only the reason is updated.
    pub fn mark_stale(&self, cluster: &str, reason: &str) {
        // Health only matters to watchers: a cluster nobody watches (or one forgotten
        // a moment ago) is not brought back by a late report.
        let Some(ch) = self.existing(cluster) else {
            return;
        };
        ch.health.send_if_modified(|h| match h {
            Health::Connected => {
                tracing::warn!(
                    registry = self.kind,
                    cluster,
                    reason,
                    "registry unreachable; serving the last snapshot"
                );
                *h = Health::Stale {
                    since: SystemTime::now(),
                    reason: reason.to_string(),
                };
                true
            }
            Health::Stale { reason: r, .. } => {
                if r != reason {
                    *r = reason.to_string();
                    true
                } else {
                    false
                }
            }
        });
    }

    /// Marks `cluster` as connected again.
    pub fn mark_connected(&self, cluster: &str) {
        // Health only matters to watchers: a cluster nobody watches (or one forgotten
        // a moment ago) is not brought back by a late report.
        let Some(ch) = self.existing(cluster) else {
            return;
        };
        ch.health.send_if_modified(|h| {
            if h.is_connected() {
                false
            } else {
                tracing::info!(registry = self.kind, cluster, "registry reachable again");
                *h = Health::Connected;
                true
            }
        });
    }

    /// [`mark_stale`](Self::mark_stale) for every known cluster.
    pub fn mark_all_stale(&self, reason: &str) {
        for c in self.clusters() {
            self.mark_stale(&c, reason);
        }
    }

    /// [`mark_connected`](Self::mark_connected) for every known cluster.
    pub fn mark_all_connected(&self) {
        for c in self.clusters() {
            self.mark_connected(&c);
        }
    }

    /// The health of `cluster` (connected when unknown).
    pub fn health(&self, cluster: &str) -> Health {
        self.existing(cluster)
            .map(|ch| ch.health.borrow().clone())
            .unwrap_or(Health::Connected)
    }

    /// Drops every channel: watchers' [`Watch::next`] then returns
    /// [`RegistryError::Closed`] once they have seen the last snapshot.
    pub fn close(&self) {
        self.channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// A live view of one cluster's membership and of the registry's health.
///
/// The first [`next`](Watch::next) returns the current snapshot immediately; every later
/// call waits for a *changed* snapshot. Intermediate snapshots may be skipped when the
/// reader is slow (each snapshot is complete, so nothing is lost).
///
/// It is also a `futures::Stream<Item = Snapshot>` yielding the same sequence and
/// ending (`None`) where [`next`](Watch::next) returns [`RegistryError::Closed`], so
/// stream combinators and adapters (tower's `Discover`, for one) take it as it is.
/// The inherent `next` wins method resolution; reach the stream's through
/// `StreamExt::next(&mut watch)`.
pub struct Watch {
    kind: &'static str,
    snapshot: watch::Receiver<Snapshot>,
    health: watch::Receiver<Health>,
    refresh: Refresher,
    delivered_first: bool,
    /// The wait for the next change while the watch is polled as a stream.
    changed: stream::Changed,
}

impl Clone for Watch {
    /// A watch at the same point of the sequence (its next snapshot is the next
    /// change), with no wait of its own pending.
    fn clone(&self) -> Self {
        Watch {
            kind: self.kind,
            snapshot: self.snapshot.clone(),
            health: self.health.clone(),
            refresh: self.refresh.clone(),
            delivered_first: self.delivered_first,
            changed: stream::Changed::default(),
        }
    }
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("kind", &self.kind)
            .field("snapshot", &self.snapshot)
            .field("health", &self.health)
            .field("delivered_first", &self.delivered_first)
            .finish()
    }
}

impl Watch {
    /// The latest snapshot, without waiting.
    pub fn current(&self) -> Snapshot {
        self.snapshot.borrow().clone()
    }

    /// The current snapshot on the first call, then the next changed one.
    ///
    /// Returns [`RegistryError::Closed`] when the registry was closed.
    pub async fn next(&mut self) -> Result<Snapshot, RegistryError> {
        if !self.delivered_first {
            self.delivered_first = true;
            return Ok(self.snapshot.borrow_and_update().clone());
        }
        self.snapshot
            .changed()
            .await
            .map_err(|_| RegistryError::Closed { kind: self.kind })?;
        Ok(self.snapshot.borrow_and_update().clone())
    }

    /// The registry's health as last reported by the backend.
    pub fn health(&self) -> Health {
        self.health.borrow().clone()
    }

    /// Waits until the health changes and returns the new value.
    pub async fn health_changed(&mut self) -> Result<Health, RegistryError> {
        self.health
            .changed()
            .await
            .map_err(|_| RegistryError::Closed { kind: self.kind })?;
        Ok(self.health.borrow_and_update().clone())
    }

    /// Asks the registry to read this cluster again now, for a client that learned
    /// from a server that its list is out of date (see [`Refresher`]).
    pub fn refresher(&self) -> Refresher {
        self.refresh.clone()
    }

    /// The registry type this watch comes from.
    pub fn kind(&self) -> &'static str {
        self.kind
    }
}

#[cfg(test)]
mod tests;
