//! Consistent hashing with bounded loads (Mirrokni, Thorup & Zadimoghaddam, 2017; the
//! scheme behind HAProxy's `hash-balance-factor` and Vimeo's proxies).
//!
//! Keys go to their ring endpoint as in plain consistent hashing, unless that endpoint
//! already carries more than its share: with `m` requests in flight in the cluster, an
//! endpoint of weight `w` (total weight `W`) accepts a new request only while its own
//! in-flight count is below `ceil(c × (m + 1) × w / W)`. Otherwise the key walks the
//! ring to the next endpoint under its cap. With `c ≥ 1` some endpoint is always
//! under its cap, and no endpoint ever goes above `c ×` its fair share; keys still
//! move only when load forces them to. `c` defaults to 1.25.
//!
//! "Load" is in-flight requests, read from [`crate::EndpointStats`]; the cluster total
//! comes from the endpoints' shared [`crate::stats::LoadGroup`] (one per
//! [`crate::Balancer`], counted because this algorithm says it reads it:
//! [`crate::LoadBalance::reads_group_in_flight`]) in O(1). Endpoints built
//! independently (no shared, counted group) are summed at pick time instead. Concurrent picks can each see the same counts, so under
//! concurrency the cap can be exceeded by the number of simultaneous picks.

use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::algorithms::consistent_hash::{FastRing, RingLookup};
use crate::algorithms::paged_ring::{PAGED_MIN_POINTS, PagedRing};
use crate::algorithms::ring::DEFAULT_POINTS_PER_WEIGHT;
use crate::picker::{Members, build_over, rebuild_over};
use crate::stats::LoadGroup;
use crate::{Endpoint, LoadBalance, MembershipChange, PickRequest, Picker};

/// The default balance factor `c`.
pub const DEFAULT_BALANCE_FACTOR: f64 = 1.25;

/// Consistent hashing where no endpoint exceeds `c ×` its share of the in-flight load.
///
/// The ring is the fast consistent hash's: paged from `PAGED_MIN_POINTS` points on
/// (about 1640 endpoints), so that when a few endpoints join or leave a
/// [`crate::Balancer`] rewrites only the pages their points fall in
/// ([`LoadBalance::rebuild`]); every key walks the same ring either way.
#[derive(Debug, Clone, Copy)]
pub struct BoundedLoadLoadBalance {
    factor: f64,
    points_per_weight: u32,
    /// Rings of at least this many points are paged.
    paged_from: u64,
}

impl Default for BoundedLoadLoadBalance {
    fn default() -> Self {
        BoundedLoadLoadBalance {
            factor: DEFAULT_BALANCE_FACTOR,
            points_per_weight: DEFAULT_POINTS_PER_WEIGHT,
            paged_from: PAGED_MIN_POINTS,
        }
    }
}

impl BoundedLoadLoadBalance {
    /// `c` = 1.25, 160 points per weight unit.
    pub fn new() -> Self {
        BoundedLoadLoadBalance::default()
    }

    /// Balance factor `c`. Values below 1 (or not finite) cannot be honoured (the
    /// caps would not hold all requests) and are an error.
    pub fn with_factor(mut self, c: f64) -> Result<Self, crate::LoadBalanceError> {
        if !(c.is_finite() && c >= 1.0) {
            return Err(crate::LoadBalanceError::InvalidOption {
                option: "balance factor",
                reason: format!("{c} is not a finite number >= 1.0"),
            });
        }
        self.factor = c;
        Ok(self)
    }

    /// The balance factor `c`.
    pub fn factor(&self) -> f64 {
        self.factor
    }

    /// Pages rings from `points` points on (tests: paged rings of a few endpoints).
    #[cfg(test)]
    pub(crate) fn paged_from(mut self, points: u64) -> Self {
        self.paged_from = points;
        self
    }

    /// The picker over `members` (`endpoints`, shared or copied), its ring updated from
    /// `previous` when possible.
    fn picker(
        &self,
        endpoints: &[Endpoint],
        members: Members,
        previous: Option<(&PagedRing, &MembershipChange<'_>)>,
    ) -> Arc<dyn Picker> {
        let group = endpoints[0].stats().group().clone();
        // One counted group: its total is one load. Otherwise the picker sums its
        // endpoints' counts (a group that is not counted is summed under a lock).
        let shared = group.counted()
            && endpoints
                .iter()
                .all(|e| Arc::ptr_eq(e.stats().group(), &group));
        // Exact integer test: load_i < c (m+1) w_i / W  <=>
        // load_i * MICRO * W < c_micro * w_i * (m+1).
        let c_micro = (self.factor * MICRO as f64).round() as u128;
        let share: Box<[u128]> = members
            .weights
            .iter()
            .map(|&w| c_micro * u128::from(w))
            .collect();
        let lanes = Lanes::of(&members);
        let denom = MICRO * u128::from(members.total_weight.max(1));
        let group = shared.then_some(group);
        // The picker is generic over its ring; all else is the same for either kind.
        type Rest = (Lanes, Box<[u128]>, u128, Option<Arc<LoadGroup>>, Members);
        fn with_ring<R: RingLookup>(ring: R, rest: Rest) -> Arc<dyn Picker> {
            let (lanes, share, denom, group, members) = rest;
            Arc::new(BoundedPicker {
                ring,
                lanes,
                share,
                denom,
                group,
                members,
            })
        }
        let ring = FastRing::new(&members, self.points_per_weight, self.paged_from, previous);
        let rest = (lanes, share, denom, group, members);
        match ring {
            FastRing::Flat(ring) => with_ring(ring, rest),
            FastRing::Paged(ring) => with_ring(ring, rest),
        }
    }
}

impl LoadBalance for BoundedLoadLoadBalance {
    fn name(&self) -> &str {
        "BoundedLoadConsistentHash"
    }

    fn reads_group_in_flight(&self) -> bool {
        true
    }

    fn build(&self, endpoints: &[Endpoint]) -> Arc<dyn Picker> {
        build_over(endpoints, |members| self.picker(endpoints, members, None))
    }

    fn rebuild(&self, change: &MembershipChange<'_>) -> Arc<dyn Picker> {
        rebuild_over(change, |members| {
            let previous = change
                .previous()
                .picker()
                .as_any()
                .and_then(|p| p.downcast_ref::<BoundedPicker<PagedRing>>())
                .map(|p| (&p.ring, change));
            self.picker(change.endpoints(), members, previous)
        })
    }
}

/// Each member's in-flight counter, read straight from the load board: one load per
/// candidate at pick time, and built without touching a reference count (10 000
/// `Arc` clones, each a locked instruction on its own cache line, were a tenth of a
/// 10 000-endpoint rebuild).
struct Lanes(Box<[NonNull<AtomicU32>]>);

// SAFETY: every pointer is the in-flight lane of an endpoint's stats (a board slot,
// whose page its stats keep alive), and the picker holding these lanes also holds the
// endpoints (`BoundedPicker::members`), so the lanes live as long as it; an
// `AtomicU32` is read from any thread through a shared reference.
unsafe impl Send for Lanes {}
// SAFETY: as above.
unsafe impl Sync for Lanes {}

impl Lanes {
    /// The lanes of `members`' endpoints (which the picker keeps, see the `Send` impl).
    fn of(members: &Members) -> Lanes {
        Lanes(members.endpoints.iter().map(|e| e.stats().lane()).collect())
    }

    /// Requests in flight on member `i`.
    #[inline]
    fn in_flight(&self, i: usize) -> u64 {
        // SAFETY: see the `Send` impl: the lane outlives `self`.
        u64::from(unsafe { self.0[i].as_ref() }.load(Ordering::Relaxed))
    }
}

struct BoundedPicker<R> {
    ring: R,
    /// Read through `members`' endpoints, which the picker keeps alive.
    lanes: Lanes,
    /// `c_micro × w_i` per endpoint.
    share: Box<[u128]>,
    /// `MICRO × W`.
    denom: u128,
    group: Option<Arc<LoadGroup>>,
    members: Members,
}

impl<R> BoundedPicker<R> {
    #[inline]
    fn total_in_flight(&self) -> u64 {
        match &self.group {
            Some(g) => g.in_flight(),
            None => (0..self.lanes.0.len())
                .map(|i| self.lanes.in_flight(i))
                .sum(),
        }
    }
}

impl<R: RingLookup> Picker for BoundedPicker<R> {
    #[inline]
    fn pick(&self, req: &PickRequest<'_>) -> Option<usize> {
        let h = req.routing_hash().unwrap_or_else(|| fastrand::u64(..));
        let next = u128::from(self.total_in_flight() + 1);
        let all = req.exclusions().is_empty();
        self.ring.walk(h, |i| {
            (all || self.members.eligible(i, req))
                && u128::from(self.lanes.in_flight(i)) * self.denom < self.share[i] * next
        })
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

/// The factor `c` is applied in millionths, so caps are computed exactly.
const MICRO: u128 = 1_000_000;

/// The most requests an endpoint of weight `weight` (of `total_weight`) may carry when
/// `in_flight_total` requests (including the newest) are in flight:
/// `ceil(c × in_flight_total × weight / total_weight)`, computed exactly with `c`
/// rounded to millionths, as the picker does.
pub fn bounded_cap(factor: f64, weight: u32, total_weight: u64, in_flight_total: u64) -> u64 {
    let num =
        (factor * MICRO as f64).round() as u128 * u128::from(weight) * u128::from(in_flight_total);
    let den = MICRO * u128::from(total_weight.max(1));
    num.div_ceil(den) as u64
}
