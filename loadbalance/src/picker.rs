//! The balancer/picker split (gRPC's design): a [`LoadBalance`] is an algorithm plus
//! any state that must outlive membership changes (a round-robin sequence); on every
//! membership change it precomputes a [`Picker`] (alias table, ring, weights), and the
//! hot path only asks that picker for an index.

use std::sync::Arc;

use crate::{Endpoint, MembershipChange, PickRequest};

/// A load-balancing algorithm. Builds a [`Picker`] whenever membership changes.
///
/// Object-safe: the rpc-client holds an `Arc<dyn LoadBalance>` chosen by name
/// ([`crate::by_name`]).
pub trait LoadBalance: Send + Sync + 'static {
    /// The algorithm's canonical name (Seata's name for Seata's five).
    fn name(&self) -> &str;

    /// Precomputes a picker for `endpoints`. Called on membership change only; may
    /// allocate. The picker keeps whatever it needs (it may clone the endpoints, which
    /// is cheap: one reference count each).
    fn build(&self, endpoints: &[Endpoint]) -> Arc<dyn Picker>;

    /// The picker for a membership change, given the previous membership and picker
    /// (what a [`crate::Balancer`] calls). It must pick exactly as
    /// [`build`](Self::build) over [`MembershipChange::endpoints`] would; it may reuse
    /// parts of the previous picker (found through [`Picker::as_any`]) so that one
    /// endpoint joining a large cluster does not cost a whole rebuild. Default:
    /// `build`.
    fn rebuild(&self, change: &MembershipChange<'_>) -> Arc<dyn Picker> {
        self.build(change.endpoints())
    }

    /// Whether this algorithm's pickers read the group's in-flight total
    /// ([`crate::stats::LoadGroup::in_flight`]) on every pick, as bounded-load hashing
    /// does. A [`crate::Balancer`] for such an algorithm keeps the total as a counter
    /// (two more atomic operations per request); for the others the total is summed
    /// from the load board when somebody asks. Default: `false`. An algorithm that
    /// wraps another should forward its answer.
    fn reads_group_in_flight(&self) -> bool {
        false
    }

    /// Whether this algorithm's pickers read the endpoints' in-flight counts
    /// ([`crate::EndpointStats::in_flight`]): least-active, P2C, bounded-load and the
    /// game balancers do. A [`crate::Balancer`] for an algorithm that does not (random,
    /// round robin, the hash rings, XID) counts nothing per request: the count is two
    /// locked instructions, about 9 ns of a pick that otherwise takes 20-30, spent for
    /// no reader; its endpoints then report 0 in flight. Default: `true`, so an
    /// algorithm of your own that reads the counts gets them (and wrapping a load-blind
    /// algorithm in one that answers `true` keeps the counts for display). An
    /// algorithm that wraps another should forward its answer.
    fn reads_in_flight(&self) -> bool {
        true
    }

    /// Whether a request's XID decides where it goes when the XID names an endpoint
    /// (`XID`, and `xid:<name>`): then the transaction's calls belong to the TC that
    /// began it, and a caller must not send such a call elsewhere on its own (a hedge,
    /// a retry on another endpoint), since in Seata's file and raft modes only that TC
    /// holds the session, and another answers as if it had ended. Default: `false`. An
    /// algorithm that wraps another should forward its answer.
    fn routes_by_xid(&self) -> bool {
        false
    }
}

/// The per-request half: chooses one endpoint of the slice it was built from.
///
/// Implementations must not allocate or lock in [`pick`](Picker::pick).
pub trait Picker: Send + Sync {
    /// The index (into the slice given to [`LoadBalance::build`]) of the chosen
    /// endpoint, or `None` when no endpoint is eligible (empty list, everything
    /// excluded).
    fn pick(&self, req: &PickRequest<'_>) -> Option<usize>;

    /// This picker as [`Any`](std::any::Any), for a [`LoadBalance::rebuild`] that
    /// reuses parts of the picker it built before. Default: `None` (nothing to reuse).
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// What most pickers keep: the endpoints and their normalised weights.
pub(crate) struct Members {
    /// Shared with the [`crate::Snapshot`] when built through a [`crate::Balancer`].
    pub(crate) endpoints: Arc<[Endpoint]>,
    /// Weights divided by their greatest common divisor; all ones when every weight is
    /// equal or every weight is 0 (Seata ignores weights, and a cluster whose every
    /// weight is 0 is almost certainly misconfigured rather than meant to be idle).
    pub(crate) weights: Box<[u32]>,
    /// All weights equal: the common case with a fast path everywhere.
    pub(crate) uniform: bool,
    pub(crate) total_weight: u64,
}

impl Members {
    pub(crate) fn new(endpoints: &[Endpoint]) -> Members {
        Members::shared(Arc::from(endpoints))
    }

    /// Members over `endpoints` without copying the list.
    pub(crate) fn shared(endpoints: Arc<[Endpoint]>) -> Members {
        let raw: Vec<u32> = endpoints.iter().map(Endpoint::weight).collect();
        let g = raw.iter().copied().fold(0u32, gcd);
        let weights: Box<[u32]> = if g == 0 {
            if !endpoints.is_empty() {
                tracing::warn!(
                    endpoints = endpoints.len(),
                    "every endpoint has weight 0; treating them as equal"
                );
            }
            vec![1; endpoints.len()].into_boxed_slice()
        } else {
            raw.iter().map(|w| w / g).collect()
        };
        let uniform = weights.iter().all(|&w| w == 1);
        let total_weight = weights.iter().map(|&w| u64::from(w)).sum();
        Members {
            endpoints,
            weights,
            uniform,
            total_weight,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.endpoints.len()
    }

    /// Eligible for this request: weight above 0 and not excluded.
    #[inline]
    pub(crate) fn eligible(&self, i: usize, req: &PickRequest<'_>) -> bool {
        self.weights[i] > 0 && !req.is_excluded(i, &self.endpoints[i])
    }

    /// First eligible index scanning from a random start. O(n); only reached after the
    /// algorithm's own choice was excluded.
    pub(crate) fn scan_random_start(&self, req: &PickRequest<'_>) -> Option<usize> {
        let n = self.len();
        if n == 0 {
            return None;
        }
        scan_from(fastrand::usize(..n), n, |i| self.eligible(i, req))
    }
}

/// The first `i` (from `start`, wrapping around at `n`) for which `ok(i)` holds, each
/// position tried once: the one wrap-around scan every picker uses (a retry's scan over
/// the members, the walks of both consistent-hash rings).
#[inline]
pub(crate) fn scan_from(
    start: usize,
    n: usize,
    mut ok: impl FnMut(usize) -> bool,
) -> Option<usize> {
    let mut i = start;
    for _ in 0..n {
        if ok(i) {
            return Some(i);
        }
        i += 1;
        if i == n {
            i = 0;
        }
    }
    None
}

pub(crate) fn gcd(a: u32, b: u32) -> u32 {
    let (mut a, mut b) = (a, b);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `a % d` for a fixed divisor without a division instruction (Lemire, Kaser & Kurz,
/// "Faster remainder by direct computation", 2019).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FastMod {
    m: u64,
    d: u32,
}

impl FastMod {
    pub(crate) fn new(d: u32) -> FastMod {
        let d = d.max(1);
        FastMod {
            m: (u64::MAX / u64::from(d)).wrapping_add(1),
            d,
        }
    }

    #[inline]
    pub(crate) fn rem(&self, a: u32) -> u32 {
        if self.d == 1 {
            return 0;
        }
        let low = self.m.wrapping_mul(u64::from(a));
        ((u128::from(low) * u128::from(self.d)) >> 64) as u32
    }
}

/// A picker for an empty endpoint list.
pub(crate) struct EmptyPicker;

/// [`LoadBalance::build`] of an algorithm whose picker is built from [`Members`]:
/// `picker` over `endpoints`, or the [`EmptyPicker`] when there are none.
pub(crate) fn build_over(
    endpoints: &[Endpoint],
    picker: impl FnOnce(Members) -> Arc<dyn Picker>,
) -> Arc<dyn Picker> {
    if endpoints.is_empty() {
        return Arc::new(EmptyPicker);
    }
    picker(Members::new(endpoints))
}

/// [`LoadBalance::rebuild`] of an algorithm whose picker is built from [`Members`]:
/// `picker` over the change's endpoints (the list shared with the balancer's
/// snapshot, not copied), or the [`EmptyPicker`] when there are none.
pub(crate) fn rebuild_over(
    change: &MembershipChange<'_>,
    picker: impl FnOnce(Members) -> Arc<dyn Picker>,
) -> Arc<dyn Picker> {
    if change.endpoints().is_empty() {
        return Arc::new(EmptyPicker);
    }
    picker(Members::shared(change.endpoints().clone()))
}

impl Picker for EmptyPicker {
    fn pick(&self, _req: &PickRequest<'_>) -> Option<usize> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fastmod_equals_rem() {
        for d in [1u32, 2, 3, 7, 10, 100, 1000, 65_537, u32::MAX] {
            let f = FastMod::new(d);
            for a in [0u32, 1, 2, 99, 1000, 123_456_789, u32::MAX - 1, u32::MAX] {
                assert_eq!(f.rem(a), a % d, "{a} % {d}");
            }
        }
    }

    #[test]
    fn gcd_works() {
        assert_eq!(gcd(0, 0), 0);
        assert_eq!(gcd(0, 5), 5);
        assert_eq!(gcd(100, 50), 50);
        assert_eq!(gcd(7, 3), 1);
    }
}
