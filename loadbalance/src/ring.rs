//! The fast consistent-hash ring (ketama-style: many points per weight unit) with an
//! O(1) lookup.
//!
//! Points are 64-bit. Building: each endpoint's identity (`ip:port` text) is hashed
//! once with XXH3, its points are `mix64(h + i * φ)` (no per-point string formatting,
//! the main cost of classic ketama builds), and the points are bucket-sorted by their
//! top bits in O(n). Lookup: a table indexed by the top bits of the key's hash gives
//! the first point of its bucket; about one point per bucket means one or two
//! comparisons, instead of a ~14-step binary search over 16 000 points.
//!
//! Ties (two endpoints on one 64-bit point, about 1 in 10^12 for 1000 endpoints) are
//! broken by endpoint identity, so the ring does not depend on list order.

use crate::hash::{key_hash, mix64};
use crate::picker::Members;

/// Points per weight unit, as nginx / pingora ketama.
pub const DEFAULT_POINTS_PER_WEIGHT: u32 = 160;

/// Most points a ring holds; larger weight sums are scaled down proportionally.
const MAX_POINTS: u64 = 1 << 24;

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

pub(crate) struct Ring {
    hashes: Box<[u64]>,
    nodes: Box<[u32]>,
    /// `lut[b]` = index of the first point whose top `bits` equal or exceed `b`.
    lut: Box<[u32]>,
    shift: u32,
}

impl Ring {
    /// A ring over `members` with `per_weight` points per (normalised) weight unit.
    /// Endpoints with weight 0 get no points.
    pub(crate) fn build(members: &Members, per_weight: u32) -> Ring {
        let per_weight = u64::from(per_weight.max(1));
        let wanted: u64 = members.total_weight * per_weight;
        let scale = if wanted > MAX_POINTS {
            MAX_POINTS as f64 / wanted as f64
        } else {
            1.0
        };
        // Rank of each endpoint by identity, for deterministic tie breaks.
        let mut order: Vec<u32> = (0..members.len() as u32).collect();
        order.sort_by(|&a, &b| {
            members.endpoints[a as usize]
                .key()
                .cmp(members.endpoints[b as usize].key())
        });
        let mut rank = vec![0u32; members.len()];
        for (r, &i) in order.iter().enumerate() {
            rank[i as usize] = r as u32;
        }

        let mut points: Vec<(u64, u32)> = Vec::with_capacity(wanted.min(MAX_POINTS) as usize);
        for (i, ep) in members.endpoints.iter().enumerate() {
            let w = u64::from(members.weights[i]);
            if w == 0 {
                continue;
            }
            let count = ((w * per_weight) as f64 * scale).max(1.0) as u64;
            let base = key_hash(ep.key().to_string().as_bytes());
            for p in 0..count {
                points.push((mix64(base.wrapping_add(p.wrapping_mul(GOLDEN))), i as u32));
            }
        }
        Ring::from_points(points, &rank)
    }

    /// Bucket sort by the top bits, then sort within each (tiny) bucket.
    fn from_points(points: Vec<(u64, u32)>, rank: &[u32]) -> Ring {
        let n = points.len();
        let bits = (usize::BITS - n.max(2).leading_zeros() - 1).clamp(1, 24);
        let shift = 64 - bits;
        let buckets = 1usize << bits;
        let mut lut = vec![0u32; buckets + 1];
        for &(h, _) in &points {
            lut[(h >> shift) as usize + 1] += 1;
        }
        for b in 0..buckets {
            lut[b + 1] += lut[b];
        }
        let mut fill: Vec<u32> = lut[..buckets].to_vec();
        let mut sorted = vec![(0u64, 0u32); n];
        for &(h, node) in &points {
            let b = (h >> shift) as usize;
            sorted[fill[b] as usize] = (h, node);
            fill[b] += 1;
        }
        drop(points);
        for b in 0..buckets {
            let bucket = &mut sorted[lut[b] as usize..lut[b + 1] as usize];
            if bucket.len() > 1 {
                bucket.sort_unstable_by_key(|&(h, node)| (h, rank[node as usize]));
            }
        }
        let (hashes, nodes): (Vec<u64>, Vec<u32>) = sorted.into_iter().unzip();
        Ring {
            hashes: hashes.into_boxed_slice(),
            nodes: nodes.into_boxed_slice(),
            lut: lut.into_boxed_slice(),
            shift,
        }
    }

    /// Number of points.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Position of the first point at or after `h`, wrapping to 0. The ring must not
    /// be empty.
    #[inline]
    pub(crate) fn position(&self, h: u64) -> usize {
        let b = (h >> self.shift) as usize;
        let mut i = self.lut[b] as usize;
        let end = self.lut[b + 1] as usize;
        while i < end && self.hashes[i] < h {
            i += 1;
        }
        if i == self.hashes.len() { 0 } else { i }
    }

    /// The endpoint index of the point at `pos`.
    #[inline]
    pub(crate) fn node_at(&self, pos: usize) -> usize {
        self.nodes[pos] as usize
    }

    /// The endpoint for hash `h`. The ring must not be empty.
    #[inline]
    pub(crate) fn node(&self, h: u64) -> usize {
        self.node_at(self.position(h))
    }

    /// Walks the ring from `h` and returns the first endpoint accepted by `ok`
    /// (each point visited once).
    #[inline]
    pub(crate) fn walk(&self, h: u64, mut ok: impl FnMut(usize) -> bool) -> Option<usize> {
        let n = self.len();
        let mut pos = self.position(h);
        for _ in 0..n {
            let node = self.node_at(pos);
            if ok(node) {
                return Some(node);
            }
            pos += 1;
            if pos == n {
                pos = 0;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Endpoint;
    use meshline_registry_core::Instance;

    fn members(n: usize) -> Members {
        let eps: Vec<Endpoint> = (0..n)
            .map(|i| {
                Endpoint::new(
                    Instance::parse(&format!("10.0.{}.{}:80", i / 250, i % 250 + 1)).unwrap(),
                )
            })
            .collect();
        Members::new(&eps)
    }

    #[test]
    fn lookup_equals_binary_search() {
        for n in [1, 2, 3, 10, 57] {
            let ring = Ring::build(&members(n), 160);
            assert_eq!(ring.len(), n * 160);
            assert!(ring.hashes.windows(2).all(|w| w[0] <= w[1]));
            for k in 0..5000u64 {
                let h = mix64(k * 7919);
                let want = ring.hashes.partition_point(|&x| x < h);
                let want = if want == ring.len() { 0 } else { want };
                assert_eq!(ring.position(h), want);
            }
            assert_eq!(
                ring.position(u64::MAX),
                if ring.hashes[ring.len() - 1] == u64::MAX {
                    ring.len() - 1
                } else {
                    0
                }
            );
            assert_eq!(ring.position(0), 0);
        }
    }

    #[test]
    fn ring_ignores_list_order() {
        let a = members(20);
        let mut eps = a.endpoints.to_vec();
        eps.reverse();
        let b = Members::new(&eps);
        let (ra, rb) = (Ring::build(&a, 160), Ring::build(&b, 160));
        for k in 0..2000u64 {
            let h = mix64(k);
            assert_eq!(a.endpoints[ra.node(h)].key(), b.endpoints[rb.node(h)].key());
        }
    }
}
