//! The choice types game gateways configure per module, as thin wrappers over the
//! general algorithms.
//!
//! | Game gateway term            | Here                                                   |
//! |------------------------------|--------------------------------------------------------|
//! | hash of account id           | [`AffinityHashLoadBalance::account`] (key / hash)      |
//! | hash of role (character) id  | [`AffinityHashLoadBalance::role`] (hash / key)         |
//! | hash of source address       | [`AffinityHashLoadBalance::source_address`] (source IP)|
//! | fill one by one              | [`FillLoadBalance`]                                    |
//! | load-weighted random         | [`LoadWeightedLoadBalance`]                            |
//! | fewest requests              | [`fewest_requests`]                                    |
//!
//! Affinity hashing uses the fast consistent-hash ring, so a player stays on one
//! backend while membership is stable and only ~1/n of players move when a backend
//! joins or leaves.

use std::sync::Arc;

use crate::algorithms::consistent_hash::{FastRing, RingKey, RingPicker};
use crate::algorithms::paged_ring::{PAGED_MIN_POINTS, PagedRing};
use crate::algorithms::random::AliasTable;
use crate::algorithms::ring::DEFAULT_POINTS_PER_WEIGHT;
use crate::picker::{EmptyPicker, Members, build_over, rebuild_over};
use crate::{
    Endpoint, EndpointStats, LeastActiveLoadBalance, LoadBalance, MembershipChange, PickRequest,
    Picker,
};

/// Sticky routing by an identity: account, role, or the client's source address.
///
/// Rings of `PAGED_MIN_POINTS` points and more (about 1640 endpoints) are paged, as
/// [`crate::ConsistentHashLoadBalance`]'s: when a few endpoints join or leave, a
/// [`crate::Balancer`] rewrites only the pages their points fall in
/// ([`LoadBalance::rebuild`]) instead of building the whole ring again; every key maps
/// to the same endpoint either way.
#[derive(Debug, Clone, Copy)]
pub struct AffinityHashLoadBalance {
    key: RingKey,
    name: &'static str,
    /// Rings of at least this many points are paged.
    paged_from: u64,
}

impl AffinityHashLoadBalance {
    /// By account id: pass it with [`PickRequest::with_key`] (bytes) or
    /// [`PickRequest::with_hash`] (numeric).
    pub fn account() -> Self {
        AffinityHashLoadBalance {
            key: RingKey::Request,
            name: "AccountHash",
            paged_from: PAGED_MIN_POINTS,
        }
    }

    /// By role / character id: pass it with [`PickRequest::with_hash`] or `with_key`.
    pub fn role() -> Self {
        AffinityHashLoadBalance {
            key: RingKey::Request,
            name: "RoleHash",
            paged_from: PAGED_MIN_POINTS,
        }
    }

    /// By the client's IP address: pass it with [`PickRequest::with_source`]
    /// (requests without one fall back to the key, else random).
    pub fn source_address() -> Self {
        AffinityHashLoadBalance {
            key: RingKey::Source,
            name: "SourceHash",
            paged_from: PAGED_MIN_POINTS,
        }
    }

    /// Pages rings from `points` points on (tests: paged rings of a few endpoints).
    #[cfg(test)]
    pub(crate) fn paged_from(mut self, points: u64) -> Self {
        self.paged_from = points;
        self
    }

    /// The picker over `members`, its ring updated from `previous` when possible.
    fn picker(
        &self,
        members: Members,
        previous: Option<(&PagedRing, &MembershipChange<'_>)>,
    ) -> Arc<dyn Picker> {
        let ring = FastRing::new(
            &members,
            DEFAULT_POINTS_PER_WEIGHT,
            self.paged_from,
            previous,
        );
        RingPicker::on(ring, members, self.key)
    }
}

impl LoadBalance for AffinityHashLoadBalance {
    /// Picks by the key's hash, never by load.
    fn reads_in_flight(&self) -> bool {
        false
    }

    fn name(&self) -> &str {
        self.name
    }

    fn build(&self, endpoints: &[Endpoint]) -> Arc<dyn Picker> {
        build_over(endpoints, |members| self.picker(members, None))
    }

    fn rebuild(&self, change: &MembershipChange<'_>) -> Arc<dyn Picker> {
        rebuild_over(change, |members| {
            self.picker(members, RingPicker::previous_ring(change))
        })
    }
}

/// The game gateways' "fewest requests": the endpoint with the fewest requests in
/// flight, ignoring weights, random among ties.
pub fn fewest_requests() -> LeastActiveLoadBalance {
    LeastActiveLoadBalance::unweighted("FewestRequests")
}

/// Metadata key that overrides [`FillLoadBalance`]'s capacity for one endpoint.
pub const CAPACITY_METADATA_KEY: &str = "capacity";

/// Fill one endpoint up to its capacity before using the next ("fill one by one": keeps
/// players together on few servers, so rooms fill and idle servers can be drained).
///
/// Endpoints are filled in identity order (host, then port), which does not change
/// when the registry lists them in another order. Load is the in-flight count: hold the
/// [`crate::InFlightGuard`] for as long as the player (session) occupies the backend.
/// Capacity is per endpoint: metadata `capacity` if it parses as a positive number,
/// else the balancer's default. When every endpoint is full, the least-full relative to
/// its capacity takes the request (an over-full server beats no server; put an
/// admission check in front if "full" must mean "refuse").
#[derive(Debug, Clone, Copy)]
pub struct FillLoadBalance {
    capacity: u32,
}

impl FillLoadBalance {
    /// Fill each endpoint up to `capacity` (at least 1) unless its metadata says
    /// otherwise.
    pub fn new(capacity: u32) -> Self {
        FillLoadBalance {
            capacity: capacity.max(1),
        }
    }
}

impl Default for FillLoadBalance {
    fn default() -> Self {
        FillLoadBalance::new(1000)
    }
}

impl LoadBalance for FillLoadBalance {
    fn name(&self) -> &str {
        "FillOneByOne"
    }

    fn build(&self, endpoints: &[Endpoint]) -> Arc<dyn Picker> {
        if endpoints.is_empty() {
            return Arc::new(EmptyPicker);
        }
        let mut order: Vec<u32> = (0..endpoints.len() as u32).collect();
        order.sort_by(|&a, &b| endpoints[a as usize].key().cmp(endpoints[b as usize].key()));
        let capacity = endpoints
            .iter()
            .map(|e| match e.instance().metadata().get(CAPACITY_METADATA_KEY) {
                None => u64::from(self.capacity),
                Some(text) => match text.trim().parse::<u32>() {
                    Ok(c) if c > 0 => u64::from(c),
                    _ => {
                        tracing::warn!(endpoint = %e, value = %text, "metadata `capacity` is not a positive number; using the default");
                        u64::from(self.capacity)
                    }
                },
            })
            .collect();
        Arc::new(FillPicker {
            order: order.into_boxed_slice(),
            capacity,
            stats: endpoints.iter().map(|e| e.stats_arc().clone()).collect(),
            members: Members::new(endpoints),
        })
    }
}

struct FillPicker {
    order: Box<[u32]>,
    capacity: Box<[u64]>,
    stats: Box<[Arc<EndpointStats>]>,
    members: Members,
}

impl Picker for FillPicker {
    #[inline]
    fn pick(&self, req: &PickRequest<'_>) -> Option<usize> {
        let all = req.exclusions().is_empty();
        // Least-full so far, as (load, capacity, index): compare load/cap exactly.
        let mut best: Option<(u64, u64, usize)> = None;
        for &i in self.order.iter() {
            let i = i as usize;
            if !(all || self.members.eligible(i, req)) || self.members.weights[i] == 0 {
                continue;
            }
            let load = self.stats[i].in_flight();
            let cap = self.capacity[i];
            if load < cap {
                return Some(i);
            }
            let better = match best {
                None => true,
                Some((bl, bc, _)) => {
                    u128::from(load) * u128::from(bc) < u128::from(bl) * u128::from(cap)
                }
            };
            if better {
                best = Some((load, cap, i));
            }
        }
        best.map(|(_, _, i)| i)
    }
}

/// Random choice weighted by the spare capacity each backend reports
/// ([`crate::EndpointStats::report_load`], per-mille of capacity), times its registry
/// weight: a backend at 90 % load gets a fifth of the traffic of one at 50 %.
///
/// Sampling is by rejection (draw by weight, keep with probability `spare / 1000`), so
/// a pick is O(1) expected and exact in distribution; after 16 rejections (every
/// backend nearly full) the least-loaded candidate drawn is used. A backend that has
/// not reported yet counts as idle.
#[derive(Debug, Default, Clone, Copy)]
pub struct LoadWeightedLoadBalance;

impl LoadWeightedLoadBalance {
    /// The balancer.
    pub fn new() -> Self {
        LoadWeightedLoadBalance
    }
}

const LOAD_DRAWS: usize = 16;

impl LoadBalance for LoadWeightedLoadBalance {
    fn name(&self) -> &str {
        "LoadWeighted"
    }

    fn build(&self, endpoints: &[Endpoint]) -> Arc<dyn Picker> {
        build_over(endpoints, |members| {
            let table = (!members.uniform).then(|| AliasTable::new(&members.weights));
            Arc::new(LoadWeightedPicker {
                stats: endpoints.iter().map(|e| e.stats_arc().clone()).collect(),
                table,
                members,
            })
        })
    }
}

struct LoadWeightedPicker {
    stats: Box<[Arc<EndpointStats>]>,
    table: Option<AliasTable>,
    members: Members,
}

impl Picker for LoadWeightedPicker {
    #[inline]
    fn pick(&self, req: &PickRequest<'_>) -> Option<usize> {
        let n = self.members.len();
        let all = req.exclusions().is_empty();
        let mut best: Option<(u32, usize)> = None;
        for _ in 0..LOAD_DRAWS {
            let i = match &self.table {
                Some(t) => t.sample(),
                None => fastrand::usize(..n),
            };
            if !(all || self.members.eligible(i, req)) {
                continue;
            }
            let load = self.stats[i].reported_load().unwrap_or(0);
            if fastrand::u32(..1000) >= load {
                return Some(i);
            }
            if best.is_none_or(|(bl, _)| load < bl) {
                best = Some((load, i));
            }
        }
        best.map(|(_, i)| i)
            .or_else(|| self.members.scan_random_start(req))
    }
}
