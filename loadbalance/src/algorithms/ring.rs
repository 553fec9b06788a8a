//! The fast consistent-hash ring (ketama-style: many points per weight unit) with an
//! O(1) lookup.
//!
//! Building: each endpoint's identity (`ip:port` text) is hashed once with XXH3, its
//! points are the top 32 bits of `mix64(h + i * φ)` (no per-point string formatting,
//! the main cost of classic ketama builds), and the points are counting-sorted by their
//! top bits in O(n). A point is one `u64` (`hash << 32 | endpoint`), 8 bytes like
//! pingora's, so a 1000-endpoint ring is 1.3 MB: on a rebuild, fresh memory costs page
//! faults, and the build keeps no second copy. Lookup: a table indexed by the top bits
//! of the key's hash gives the first point of its bucket; two or three points per
//! bucket means a few comparisons in one cache line instead of a ~14-step binary
//! search over 16 000 points.
//!
//! Ties (two points with one 32-bit hash) are ordered by endpoint identity, so the
//! ring does not depend on list order.

use crate::Endpoint;
use crate::hash::{key_hash, mix64};
use crate::picker::{Members, scan_from};

/// Points per weight unit, as nginx / pingora ketama.
pub const DEFAULT_POINTS_PER_WEIGHT: u32 = 160;

/// Most points a ring holds; larger weight sums are scaled down proportionally.
const MAX_POINTS: u64 = 1 << 24;

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

pub(crate) struct Ring {
    /// Sorted `hash << 32 | endpoint index`.
    points: Box<[u64]>,
    /// `lut[b]` = index of the first point whose top `bits` equal or exceed `b`.
    lut: Box<[u32]>,
    /// `32 - bits`.
    shift: u32,
}

/// Calls `f(point hash, endpoint)` for every point of every endpoint.
#[inline]
fn for_points(bases: &[u64], counts: &[u64], mut f: impl FnMut(u32, u32)) {
    for (i, &base) in bases.iter().enumerate() {
        for p in 0..counts[i] {
            f(point_hash(base, p), i as u32);
        }
    }
}

/// Points of each endpoint: its (normalised) weight times `per_weight`, scaled down
/// proportionally when the ring would exceed [`MAX_POINTS`] (then `true`), at least one
/// for a positive weight, none for weight 0.
pub(crate) fn point_counts(members: &Members, per_weight: u32) -> (Vec<u64>, bool) {
    let per_weight = u64::from(per_weight.max(1));
    let wanted: u64 = members.total_weight * per_weight;
    let scale = if wanted > MAX_POINTS {
        MAX_POINTS as f64 / wanted as f64
    } else {
        1.0
    };
    let counts = members
        .weights
        .iter()
        .map(|&w| point_count(w, per_weight, scale))
        .collect();
    (counts, scale != 1.0)
}

/// One endpoint's share of [`point_counts`].
#[inline]
pub(crate) fn point_count(weight: u32, per_weight: u64, scale: f64) -> u64 {
    if weight == 0 {
        0
    } else {
        ((u64::from(weight) * per_weight) as f64 * scale).max(1.0) as u64
    }
}

/// XXH3 of each endpoint's identity text (`host:port`, `[v6]:port`: the
/// [`InstanceKey`](meshline_instance::InstanceKey) `Display`), the base its ring
/// points derive from.
pub(crate) fn identity_hashes(endpoints: &[Endpoint]) -> Vec<u64> {
    let mut text = String::with_capacity(64);
    endpoints
        .iter()
        .map(|ep| identity_hash(ep.key(), &mut text))
        .collect()
}

/// XXH3 of `key`'s `Display` text, written into `text` by hand (the formatting
/// machinery costs more than the hash on a 10 000-endpoint build).
pub(crate) fn identity_hash(key: &meshline_instance::InstanceKey, text: &mut String) -> u64 {
    text.clear();
    let v6 = key.host.contains(':');
    if v6 {
        text.push('[');
    }
    text.push_str(&key.host);
    if v6 {
        text.push(']');
    }
    text.push(':');
    let mut digits = [0u8; 5];
    let mut at = digits.len();
    let mut port = key.port;
    loop {
        at -= 1;
        digits[at] = b'0' + (port % 10) as u8;
        port /= 10;
        if port == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        text.push(char::from(d));
    }
    key_hash(text.as_bytes())
}

/// The hash of point `p` of an endpoint whose identity hashes to `base`.
#[inline]
pub(crate) fn point_hash(base: u64, p: u64) -> u32 {
    (mix64(base.wrapping_add(p.wrapping_mul(GOLDEN))) >> 32) as u32
}

impl Ring {
    /// A ring over `members` with `per_weight` points per (normalised) weight unit.
    /// Endpoints with weight 0 get no points. (The algorithms build through
    /// `FastRing`, which pages large rings.)
    #[cfg(test)]
    pub(crate) fn build(members: &Members, per_weight: u32) -> Ring {
        let (counts, _) = point_counts(members, per_weight);
        Ring::with_counts(members, &counts)
    }

    /// A ring of `counts[i]` points for endpoint `i` ([`point_counts`]).
    pub(crate) fn with_counts(members: &Members, counts: &[u64]) -> Ring {
        // Each endpoint's identity is hashed once; its points are cheap to regenerate,
        // so the counting sort generates them twice instead of storing an unsorted copy.
        let bases = identity_hashes(&members.endpoints);
        Ring::from_bases(members, &bases, counts)
    }

    /// The ring of `counts[i]` points derived from `bases[i]` for each endpoint.
    pub(crate) fn from_bases(members: &Members, bases: &[u64], counts: &[u64]) -> Ring {
        let total = counts.iter().sum::<u64>() as usize;
        // About two points per bucket.
        let bits = (usize::BITS - total.max(4).leading_zeros() - 2).clamp(1, 24);
        let shift = 32 - bits;
        let buckets = 1usize << bits;
        // lut[b] = number of points in bucket b, then the end of bucket b; the scatter
        // below decrements it down to the start.
        let mut lut = vec![0u32; buckets + 1];
        for_points(bases, counts, |h, _| lut[(h >> shift) as usize] += 1);
        for b in 1..buckets {
            lut[b] += lut[b - 1];
        }
        lut[buckets] = total as u32;
        let mut points = vec![0u64; total];
        for_points(bases, counts, |h, node| {
            let c = &mut lut[(h >> shift) as usize];
            *c -= 1;
            points[*c as usize] = (u64::from(h) << 32) | u64::from(node);
        });
        // Order within each (tiny) bucket by the whole point (hash, then endpoint
        // index): plain integer compares, in one insertion-sort pass over the whole
        // array (buckets are already in order, so nothing crosses a bucket boundary).
        for k in 1..points.len() {
            let v = points[k];
            let mut j = k;
            while j > 0 && points[j - 1] > v {
                points[j] = points[j - 1];
                j -= 1;
            }
            points[j] = v;
        }
        // Two points with one 32-bit hash (about three in a 160 000-point ring) are
        // ordered by endpoint identity instead, so the ring does not depend on list
        // order.
        let mut k = 0;
        while k + 1 < points.len() {
            if points[k] >> 32 != points[k + 1] >> 32 {
                k += 1;
                continue;
            }
            let mut end = k + 1;
            while end < points.len() && points[end] >> 32 == points[k] >> 32 {
                end += 1;
            }
            points[k..end].sort_by(|a, b| {
                members.endpoints[*a as u32 as usize]
                    .key()
                    .cmp(members.endpoints[*b as u32 as usize].key())
            });
            k = end;
        }
        Ring {
            points: points.into_boxed_slice(),
            lut: lut.into_boxed_slice(),
            shift,
        }
    }

    /// Number of points.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.points.len()
    }

    /// Position of the first point at or after the key hash `h`, wrapping to 0. The
    /// ring must not be empty.
    #[inline]
    pub(crate) fn position(&self, h: u64) -> usize {
        let h = (h >> 32) as u32;
        let b = (h >> self.shift) as usize;
        let mut i = self.lut[b] as usize;
        let end = self.lut[b + 1] as usize;
        while i < end && ((self.points[i] >> 32) as u32) < h {
            i += 1;
        }
        if i == self.points.len() { 0 } else { i }
    }

    /// The hash of the point at `pos` (for tests).
    #[cfg(test)]
    pub(crate) fn hash_at(&self, pos: usize) -> u32 {
        (self.points[pos] >> 32) as u32
    }

    /// The endpoint index of the point at `pos`.
    #[inline]
    pub(crate) fn node_at(&self, pos: usize) -> usize {
        self.points[pos] as u32 as usize
    }

    /// The endpoint for the key hash `h`. The ring must not be empty.
    #[inline]
    pub(crate) fn node(&self, h: u64) -> usize {
        self.node_at(self.position(h))
    }

    /// Walks the ring from `h` and returns the first endpoint accepted by `ok`
    /// (each point visited once).
    #[inline]
    pub(crate) fn walk(&self, h: u64, mut ok: impl FnMut(usize) -> bool) -> Option<usize> {
        scan_from(self.position(h), self.len(), |pos| ok(self.node_at(pos)))
            .map(|pos| self.node_at(pos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Endpoint;
    use meshline_instance::Instance;

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
            let hashes: Vec<u32> = ring.points.iter().map(|&p| (p >> 32) as u32).collect();
            assert!(hashes.windows(2).all(|w| w[0] <= w[1]));
            for k in 0..5000u64 {
                let h = mix64(k * 7919);
                let want = hashes.partition_point(|&x| x < (h >> 32) as u32);
                let want = if want == ring.len() { 0 } else { want };
                assert_eq!(ring.position(h), want);
            }
            let top = if hashes[ring.len() - 1] == u32::MAX {
                hashes.partition_point(|&x| x < u32::MAX)
            } else {
                0
            };
            assert_eq!(ring.position(u64::MAX), top);
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

#[cfg(test)]
mod tie_tests {
    use super::*;
    use crate::Endpoint;
    use meshline_instance::Instance;

    /// Points with one 32-bit hash are ordered by endpoint identity, whatever the list
    /// order: endpoints given the same base collide on every point.
    #[test]
    fn equal_hashes_are_ordered_by_identity() {
        let eps: Vec<Endpoint> = (0..6)
            .map(|i| Endpoint::new(Instance::parse(&format!("10.9.0.{}:80", 9 - i)).unwrap()))
            .collect();
        let rings: Vec<Vec<(u64, String)>> = [false, true]
            .into_iter()
            .map(|reverse| {
                let mut list = eps.clone();
                if reverse {
                    list.reverse();
                }
                let m = Members::new(&list);
                let ring = Ring::from_bases(&m, &[7, 7, 7, 9, 9, 11], &[50, 50, 50, 50, 50, 50]);
                ring.points
                    .iter()
                    .map(|&p| (p >> 32, m.endpoints[p as u32 as usize].key().to_string()))
                    .collect()
            })
            .collect();
        // Each hash of base 7 appears three times, in identity order.
        let first = &rings[0];
        assert!(
            first
                .windows(2)
                .all(|w| w[0].0 < w[1].0 || (w[0].0 == w[1].0 && w[0].1 < w[1].1))
        );
        assert!(
            first
                .windows(3)
                .any(|w| w[0].0 == w[1].0 && w[1].0 == w[2].0)
        );
        // Either list order: hash order, then identity order on every tie.
        for ring in &rings {
            assert!(ring.windows(2).all(|w| w[0].0 < w[1].0 || w[0].1 < w[1].1));
        }
    }
}
