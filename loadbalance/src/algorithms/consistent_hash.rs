//! Seata's `ConsistentHashLoadBalance`, in two hash modes.
//!
//! - [`HashMode::Fast`] (the default): a ketama-style ring with 160 points per weight
//!   unit, XXH3 keys and an O(1) lookup (see the `ring` module). Weighted. Use it when
//!   every client of the cluster is a meshline client.
//! - [`HashMode::Java`]: Seata-Java's ring exactly (SHA-256, `"/ip:port" + i`, 10
//!   virtual nodes by default), so a Rust client sends an XID to the TC a Java client
//!   would. Use it in a mixed Java/Rust fleet.
//!
//! The ring is built once per membership change (Java rebuilds it on every call). The
//! routing key is the request's hash / key / XID ([`PickRequest`]); with no key the pick
//! is random, as Seata's is for a blank XID. An excluded endpoint is skipped by walking
//! the ring to the next endpoint, which is also where the key moves if that endpoint
//! leaves for good.

use std::sync::Arc;

use crate::algorithms::java_ring::{JavaRing, SEATA_DEFAULT_VIRTUAL_NODES};
use crate::algorithms::paged_ring::{PAGED_MIN_POINTS, PagedRing};
use crate::algorithms::ring::{DEFAULT_POINTS_PER_WEIGHT, Ring, point_counts};
use crate::picker::{Members, build_over, rebuild_over};
use crate::{Endpoint, LoadBalance, MembershipChange, PickRequest, Picker, hash};

/// How [`ConsistentHashLoadBalance`] hashes keys and places endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashMode {
    /// XXH3 keys, `points_per_weight` points per weight unit (default 160), O(1) lookup.
    Fast {
        /// Ring points per unit of (normalised) weight.
        points_per_weight: u32,
    },
    /// Seata-Java compatible: SHA-256, `virtual_nodes` points per endpoint (default 10),
    /// weights ignored.
    Java {
        /// Seata's `client.loadBalance.virtualNodes`.
        virtual_nodes: u32,
    },
}

impl Default for HashMode {
    fn default() -> Self {
        HashMode::Fast {
            points_per_weight: DEFAULT_POINTS_PER_WEIGHT,
        }
    }
}

impl HashMode {
    /// Seata-Java's ring with its default 10 virtual nodes.
    pub fn java() -> Self {
        HashMode::Java {
            virtual_nodes: SEATA_DEFAULT_VIRTUAL_NODES,
        }
    }
}

/// Consistent hashing on the request's routing key (Seata name
/// `ConsistentHashLoadBalance`).
///
/// In [`HashMode::Fast`], rings of `PAGED_MIN_POINTS` points and more (about 1640
/// endpoints) are paged: a [`crate::Balancer`] update in which a few endpoints join or
/// leave rewrites only the pages their points fall in (see
/// [`LoadBalance::rebuild`]); every key maps to the same endpoint as on a ring built
/// afresh. In [`HashMode::Java`], such an update hashes only the joining endpoints'
/// points (SHA-256 is most of a build's cost) and merges them into the previous ring.
#[derive(Debug, Clone, Copy)]
pub struct ConsistentHashLoadBalance {
    mode: HashMode,
    /// Fast rings of at least this many points are paged.
    paged_from: u64,
}

impl Default for ConsistentHashLoadBalance {
    fn default() -> Self {
        ConsistentHashLoadBalance::with_mode(HashMode::default())
    }
}

impl ConsistentHashLoadBalance {
    /// The fast ring (160 points per weight unit).
    pub fn new() -> Self {
        ConsistentHashLoadBalance::default()
    }

    /// Seata-Java's ring with `virtual_nodes` points per endpoint (Seata default 10;
    /// 0 is read as 1).
    pub fn java(virtual_nodes: u32) -> Self {
        ConsistentHashLoadBalance::with_mode(HashMode::Java {
            virtual_nodes: virtual_nodes.max(1),
        })
    }

    /// A balancer with the given mode.
    pub fn with_mode(mode: HashMode) -> Self {
        ConsistentHashLoadBalance {
            mode,
            paged_from: PAGED_MIN_POINTS,
        }
    }

    /// The mode.
    pub fn mode(&self) -> HashMode {
        self.mode
    }

    /// Pages fast rings from `points` points on (tests: paged rings of a few
    /// endpoints).
    #[cfg(test)]
    pub(crate) fn paged_from(mut self, points: u64) -> Self {
        self.paged_from = points;
        self
    }

    /// The fast-mode picker over `members`, updated from `previous` (a paged ring and
    /// the change since it) when that is possible.
    fn fast(
        &self,
        members: Members,
        per_weight: u32,
        previous: Option<(&PagedRing, &MembershipChange<'_>)>,
    ) -> Arc<dyn Picker> {
        let ring = FastRing::new(&members, per_weight, self.paged_from, previous);
        RingPicker::on(ring, members, RingKey::Request)
    }
}

/// The fast ring of a membership: flat when small, paged from `paged_from` points on
/// (what every algorithm on the fast ring builds: the fast consistent hash, bounded
/// loads, the game gateways' affinity hashes). Both give every key the same endpoint;
/// the paged one can be updated for a membership change page by page.
pub(crate) enum FastRing {
    /// Under `paged_from` points: one flat array (a pick is two dependent loads
    /// shorter).
    Flat(Ring),
    /// `paged_from` points and more.
    Paged(PagedRing),
}

impl FastRing {
    /// The ring over `members` with `per_weight` points per weight unit, updated from
    /// `previous` (the previous paged ring and the change since it) when a few pages can
    /// absorb the change, else built afresh.
    pub(crate) fn new(
        members: &Members,
        per_weight: u32,
        paged_from: u64,
        previous: Option<(&PagedRing, &MembershipChange<'_>)>,
    ) -> FastRing {
        let (counts, _) = point_counts(members, per_weight);
        let total: u64 = counts.iter().sum();
        if total < paged_from {
            return FastRing::Flat(Ring::with_counts(members, &counts));
        }
        let updated = previous.and_then(|(ring, change)| {
            ring.update(
                members,
                |i| change.previous_index(i),
                change.left(),
                &counts,
            )
        });
        FastRing::Paged(match updated {
            Some(ring) => ring,
            None => PagedRing::build(members, counts),
        })
    }
}

impl LoadBalance for ConsistentHashLoadBalance {
    /// A ring picks by the key's hash, never by load.
    fn reads_in_flight(&self) -> bool {
        false
    }

    fn name(&self) -> &str {
        "ConsistentHashLoadBalance"
    }

    fn build(&self, endpoints: &[Endpoint]) -> Arc<dyn Picker> {
        build_over(endpoints, |members| match self.mode {
            HashMode::Fast { points_per_weight } => self.fast(members, points_per_weight, None),
            HashMode::Java { virtual_nodes } => Arc::new(JavaRingPicker {
                ring: JavaRing::build(&members, virtual_nodes.max(1)),
                members,
            }),
        })
    }

    fn rebuild(&self, change: &MembershipChange<'_>) -> Arc<dyn Picker> {
        rebuild_over(change, |members| match self.mode {
            HashMode::Fast { points_per_weight } => self.fast(
                members,
                points_per_weight,
                RingPicker::previous_ring(change),
            ),
            HashMode::Java { virtual_nodes } => {
                // Only the joining endpoints' points are hashed and merged in.
                let virtual_nodes = virtual_nodes.max(1);
                let updated = change
                    .previous()
                    .picker()
                    .as_any()
                    .and_then(|p| p.downcast_ref::<JavaRingPicker>())
                    .and_then(|p| p.ring.update(&members, virtual_nodes, change));
                let ring = match updated {
                    Some(ring) => ring,
                    None => JavaRing::build(&members, virtual_nodes),
                };
                Arc::new(JavaRingPicker { ring, members })
            }
        })
    }
}

/// Which request field a fast-ring picker hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RingKey {
    /// [`PickRequest::routing_hash`]: hash, else key, else xid.
    Request,
    /// The source IP address, else as `Request`.
    Source,
}

/// What a [`RingPicker`] needs of its ring: the flat [`Ring`] or the [`PagedRing`].
pub(crate) trait RingLookup: Send + Sync + 'static {
    /// The endpoint for the key hash `h`.
    fn node(&self, h: u64) -> usize;
    /// The first endpoint from `h` on that `ok` accepts.
    fn walk(&self, h: u64, ok: impl FnMut(usize) -> bool) -> Option<usize>;
}

/// Each ring answers the lookups with its own inherent `node` and `walk` (the same
/// forwarding for both, so written once).
macro_rules! ring_lookup {
    ($($ring:ident),*) => {$(
        impl RingLookup for $ring {
            #[inline]
            fn node(&self, h: u64) -> usize {
                $ring::node(self, h)
            }
            #[inline]
            fn walk(&self, h: u64, ok: impl FnMut(usize) -> bool) -> Option<usize> {
                $ring::walk(self, h, ok)
            }
        }
    )*};
}

ring_lookup!(Ring, PagedRing);

pub(crate) struct RingPicker<R = Ring> {
    pub(crate) ring: R,
    pub(crate) members: Members,
    pub(crate) key: RingKey,
}

impl RingPicker {
    /// The picker hashing `key` onto `ring`, of either kind.
    pub(crate) fn on(ring: FastRing, members: Members, key: RingKey) -> Arc<dyn Picker> {
        match ring {
            FastRing::Flat(ring) => Arc::new(RingPicker { ring, members, key }),
            FastRing::Paged(ring) => Arc::new(RingPicker { ring, members, key }),
        }
    }

    /// The paged ring of the fast-ring picker `change` replaces, if it was one, with
    /// `change`: what [`FastRing::new`] updates rather than builds afresh.
    pub(crate) fn previous_ring<'c, 'a>(
        change: &'c MembershipChange<'a>,
    ) -> Option<(&'c PagedRing, &'c MembershipChange<'a>)> {
        change
            .previous()
            .picker()
            .as_any()
            .and_then(|p| p.downcast_ref::<RingPicker<PagedRing>>())
            .map(|p| (&p.ring, change))
    }
}

impl<R> RingPicker<R> {
    #[inline]
    fn point(&self, req: &PickRequest<'_>) -> u64 {
        let h = match (self.key, req.source()) {
            (RingKey::Source, Some(std::net::IpAddr::V4(v4))) => {
                Some(hash::mix64(u64::from(u32::from(v4))))
            }
            (RingKey::Source, Some(std::net::IpAddr::V6(v6))) => Some(hash::key_hash(&v6.octets())),
            _ => req.routing_hash(),
        };
        h.unwrap_or_else(|| fastrand::u64(..))
    }
}

impl<R: RingLookup> Picker for RingPicker<R> {
    #[inline]
    fn pick(&self, req: &PickRequest<'_>) -> Option<usize> {
        let h = self.point(req);
        if req.exclusions().is_empty() {
            return Some(self.ring.node(h));
        }
        self.ring.walk(h, |i| self.members.eligible(i, req))
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

struct JavaRingPicker {
    ring: JavaRing,
    members: Members,
}

impl Picker for JavaRingPicker {
    #[inline]
    fn pick(&self, req: &PickRequest<'_>) -> Option<usize> {
        let h = match (req.java_hash(), req.routing_text()) {
            (Some(prepared), _) => prepared,
            (None, Some(text)) => hash::java_hash(text),
            // Seata hashes a random long's text for a blank key: a random point.
            (None, None) => fastrand::i64(..),
        };
        self.ring
            .walk(h, |i| !req.is_excluded(i, &self.members.endpoints[i]))
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Balancer;
    use meshline_instance::Instance;

    fn paged<T: std::any::Any + Send + Sync>(b: &Balancer<T>) -> Arc<dyn Picker> {
        b.snapshot().picker().clone()
    }

    /// A balancer fed membership after membership (endpoints joining, leaving, changing
    /// weight) picks exactly as one built afresh for each, and most updates reuse the
    /// previous ring's pages.
    #[test]
    fn an_updated_balancer_picks_as_a_fresh_one() {
        let lb = Arc::new(ConsistentHashLoadBalance::new().paged_from(0));
        let updated = Balancer::new(lb.clone());
        // The same changes given as edits (what the rpc-client does).
        let edited: Balancer<u32> = Balancer::with_payload(lb.clone());
        let at = |i: u32, w: u32| {
            Instance::parse(&format!("10.7.{}.{}:8091", i / 256 % 256, i % 256))
                .unwrap()
                .with_weight(w)
        };
        let mut rng = fastrand::Rng::with_seed(5);
        let mut ids: Vec<(u32, u32)> = (0..120).map(|i| (i * 7, 1)).collect();
        edited.apply(ids.iter().map(|&(i, w)| crate::Edit::Insert(at(i, w), i)));
        let mut reused = 0;
        let mut reused_by_edits = 0;
        for step in 0..30 {
            let edit = match step % 3 {
                0 => {
                    ids.push((rng.u32(1000..60_000), 1));
                    let (i, w) = ids[ids.len() - 1];
                    crate::Edit::Insert(at(i, w), i)
                }
                1 => {
                    let k = rng.usize(..ids.len());
                    let (i, w) = ids.swap_remove(k);
                    crate::Edit::Remove(at(i, w).key().clone())
                }
                _ => {
                    let k = rng.usize(..ids.len());
                    ids[k].1 = if step % 2 == 0 { 1 } else { 3 };
                    let (i, w) = ids[k];
                    crate::Edit::Insert(at(i, w), i)
                }
            };
            let edited_before = paged(&edited);
            edited.apply([edit]);
            let mut list: Vec<Instance> = ids
                .iter()
                .map(|&(i, w)| {
                    Instance::parse(&format!("10.7.{}.{}:8091", i / 256 % 256, i % 256))
                        .unwrap()
                        .with_weight(w)
                })
                .collect();
            list.sort_by(|a, b| a.key().cmp(b.key()));
            let before = paged(&updated);
            updated.update(&list);
            let after = paged(&updated);
            let fresh = Balancer::new(lb.clone());
            fresh.update(&list);
            let ring = |p: &Arc<dyn Picker>| {
                p.as_any()
                    .and_then(|a| a.downcast_ref::<RingPicker<PagedRing>>())
                    .map(|r| &r.ring as *const PagedRing)
            };
            if let (Some(a), Some(b)) = (ring(&before), ring(&after)) {
                // SAFETY: both pickers are alive (held above).
                if unsafe { (*b).shares_pages_with(&*a) } {
                    reused += 1;
                }
            }
            let edited_after = paged(&edited);
            if let (Some(a), Some(b)) = (ring(&edited_before), ring(&edited_after)) {
                // SAFETY: both pickers are alive (held above).
                if unsafe { (*b).shares_pages_with(&*a) } {
                    reused_by_edits += 1;
                }
            }
            for k in 0..3000u64 {
                // The updated ring picks as the ring built afresh, excluding or not.
                let same_pick = |req: &PickRequest<'_>| {
                    let a = updated.pick(req).unwrap();
                    let b = fresh.pick(req).unwrap();
                    assert_eq!(
                        a.endpoint().key(),
                        b.endpoint().key(),
                        "step {step} key {k}"
                    );
                    (a, b)
                };
                let req = PickRequest::default().with_hash(hash::mix64(k + step));
                let (a, b) = same_pick(&req);
                let e = edited.pick(&req).unwrap();
                assert_eq!(
                    e.endpoint().key(),
                    b.endpoint().key(),
                    "edits: step {step} key {k}"
                );
                assert_eq!(at(*e.payload(), 1).key(), e.endpoint().key());
                let skip = [a.endpoint().key().clone()];
                same_pick(&req.excluding(&skip));
            }
        }
        assert!(reused >= 20, "only {reused} of 30 updates reused pages");
        assert!(
            reused_by_edits >= 20,
            "only {reused_by_edits} of 30 edits reused pages"
        );
    }
}
