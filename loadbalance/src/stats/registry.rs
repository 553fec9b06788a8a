//! [`StatsRegistry`]: the stats of every identity a balancer has seen, held weakly
//! so an identity that leaves and comes back while a request of its is in flight gets
//! its own counters back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use meshline_instance::{Instance, InstanceKey};

use super::{Counting, EndpointStats, LoadGroup, clock};
use crate::Endpoint;
use crate::board::Board;

/// The registry's map. foldhash, not SipHash: an update of a 10 000-member cluster hashes
/// every identity, and foldhash is several times faster on short keys while still
/// randomly seeded per process.
type Entries = HashMap<InstanceKey, Weak<EndpointStats>, foldhash::fast::RandomState>;

/// Stats of every endpoint identity a balancer has seen, so that the same
/// [`InstanceKey`] keeps the same [`EndpointStats`] across membership changes.
///
/// Entries are weak: stats are freed once no endpoint list and no in-flight guard uses
/// them. All stats of one registry share one [`LoadGroup`], and their in-flight
/// counters sit side by side on one load board (freed slots are reused, lowest first).
pub struct StatsRegistry {
    entries: Mutex<Entries>,
    group: Arc<LoadGroup>,
    board: Arc<Board>,
}

impl Default for StatsRegistry {
    fn default() -> Self {
        StatsRegistry {
            entries: Mutex::default(),
            group: Arc::default(),
            board: Board::new(),
        }
    }
}

impl std::fmt::Debug for StatsRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatsRegistry")
            .field("entries", &self.len())
            .field("in_flight", &self.group.in_flight())
            .finish()
    }
}

impl StatsRegistry {
    /// An empty registry. Its group's total is a counter (see [`LoadGroup`]).
    pub fn new() -> Self {
        StatsRegistry::default()
    }

    /// An empty registry whose group total is summed on demand rather than counted
    /// on every request (for algorithms that never read it).
    pub(crate) fn summing() -> Self {
        StatsRegistry::summed(Counting::Lanes)
    }

    /// An empty registry whose requests count nothing (for algorithms that read no
    /// load): in-flight counts stay 0.
    pub(crate) fn uncounted() -> Self {
        StatsRegistry::summed(Counting::Nothing)
    }

    fn summed(counting: Counting) -> Self {
        let board = Board::new();
        StatsRegistry {
            entries: Mutex::default(),
            group: Arc::new(LoadGroup::summed(board.clone(), counting)),
            board,
        }
    }

    /// The load group shared by every stats entry of this registry.
    pub fn group(&self) -> &Arc<LoadGroup> {
        &self.group
    }

    /// The stats of `key`, created if this identity is new (or was forgotten).
    pub fn stats_for(&self, key: &InstanceKey) -> Arc<EndpointStats> {
        let mut map = self.lock();
        self.get_or_insert(&mut map, key, clock::now_nanos())
    }

    fn get_or_insert(&self, map: &mut Entries, key: &InstanceKey, now: u64) -> Arc<EndpointStats> {
        if let Some(live) = map.get(key).and_then(Weak::upgrade) {
            return live;
        }
        let fresh = Arc::new(EndpointStats::on_board(
            self.group.clone(),
            &self.board,
            now,
        ));
        map.insert(key.clone(), Arc::downgrade(&fresh));
        fresh
    }

    /// Endpoints for `instances`, each with the stats its identity already had.
    ///
    /// Duplicate identities keep their first occurrence (a warning names the rest).
    /// Entries whose stats are no longer used anywhere are pruned.
    pub fn endpoints(&self, instances: &[Instance]) -> Vec<Endpoint> {
        let mut map = self.lock();
        map.retain(|_, weak| weak.strong_count() > 0);
        let now = clock::now_nanos();
        let mut out: Vec<Endpoint> = Vec::with_capacity(instances.len());
        let mut seen = std::collections::HashSet::with_capacity_and_hasher(
            instances.len(),
            foldhash::fast::RandomState::default(),
        );
        for inst in instances {
            if !seen.insert(inst.key()) {
                tracing::warn!(endpoint = %inst, "duplicate endpoint in membership; keeping the first");
                continue;
            }
            let stats = self.get_or_insert(&mut map, inst.key(), now);
            out.push(Endpoint::with_stats(inst.clone(), stats));
        }
        out
    }

    /// Number of identities currently remembered (live entries only after an update).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no identity is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The registry locked for one membership update over `members` live identities
    /// (the previous membership, every one of them an entry of this registry): entries
    /// whose stats are no longer used are pruned first, as [`endpoints`](Self::endpoints)
    /// does, unless the map holds no more entries than those members (then none is dead).
    pub(crate) fn updating(&self, members: usize) -> Updating<'_> {
        let mut map = self.lock();
        if map.len() > members {
            map.retain(|_, weak| weak.strong_count() > 0);
        }
        Updating {
            registry: self,
            map,
            now: clock::now_nanos(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A panic while holding this lock cannot leave the map inconsistent (every
        // operation is a single insert/retain), so a poisoned lock is still usable.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A [`StatsRegistry`] locked for one membership update.
pub(crate) struct Updating<'a> {
    registry: &'a StatsRegistry,
    map: std::sync::MutexGuard<'a, Entries>,
    /// The update's one clock reading (new stats' creation time).
    now: u64,
}

impl Updating<'_> {
    /// The stats of `key`, created if this identity is new (or was forgotten).
    pub(crate) fn stats(&mut self, key: &InstanceKey) -> Arc<EndpointStats> {
        self.registry.get_or_insert(&mut self.map, key, self.now)
    }

    /// Room for `additional` identities more, so that a large update does not grow
    /// (rehash) the map step by step.
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.map.reserve(additional);
    }
}
