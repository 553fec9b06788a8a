//! Jump consistent hash (Lamping & Veach, 2014) for numeric keys.
//!
//! No table at all: O(log n) arithmetic per pick, perfectly even spread, and when the
//! list grows from `n` to `n + 1` exactly `1/(n+1)` of the keys move, all to the new
//! endpoint. The price: buckets are *positions* in the endpoint list, so it suits
//! numbered shards whose list only grows or shrinks at the end (game zone servers
//! 0..n, cache shards). Removing an endpoint from the middle renumbers the ones after
//! it; use the ring balancers for arbitrary membership. Weights are not supported
//! (weight-0 endpoints are skipped like excluded ones).
//!
//! The key is the request's numeric hash as is (so ids agree with other jump-hash
//! implementations), else XXH3 of its key bytes / XID; keyless requests are random. A
//! key whose bucket is excluded is re-hashed a few times, then the next eligible
//! endpoint is used.

use std::sync::Arc;

use crate::hash::{key_hash, mix64};
use crate::picker::{Members, build_over, scan_from};
use crate::{Endpoint, LoadBalance, PickRequest, Picker};

/// Jump consistent hashing over list positions.
#[derive(Debug, Default, Clone, Copy)]
pub struct JumpHashLoadBalance;

impl JumpHashLoadBalance {
    /// The balancer.
    pub fn new() -> Self {
        JumpHashLoadBalance
    }
}

/// The bucket in `0..buckets` of `key` (Lamping & Veach's reference algorithm).
/// `buckets` must be at least 1.
#[inline]
pub fn jump_consistent_hash(mut key: u64, buckets: u32) -> u32 {
    let mut b: i64 = -1;
    let mut j: i64 = 0;
    while j < i64::from(buckets) {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        let x = (b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64);
        // SAFETY: `x` is finite and in `0..2^63`: `b + 1 <= buckets < 2^32`, and the
        // quotient is at most 2^31 (its divisor is at least 1), so the product is
        // below 2^63 and every such f64 converts exactly as `as i64` would. The
        // unchecked conversion drops the saturation checks `as` adds to the loop's
        // dependency chain (one compare and two conditional moves per step).
        j = unsafe { x.to_int_unchecked::<i64>() };
    }
    b.max(0) as u32
}

impl LoadBalance for JumpHashLoadBalance {
    /// Picks by the key, never by load.
    fn reads_in_flight(&self) -> bool {
        false
    }

    fn name(&self) -> &str {
        "JumpHash"
    }

    fn build(&self, endpoints: &[Endpoint]) -> Arc<dyn Picker> {
        build_over(endpoints, |members| Arc::new(JumpPicker { members }))
    }
}

struct JumpPicker {
    members: Members,
}

impl Picker for JumpPicker {
    #[inline]
    fn pick(&self, req: &PickRequest<'_>) -> Option<usize> {
        let n = self.members.len();
        let key = match req.hash() {
            Some(h) => h,
            None => req
                .routing_text()
                .map(key_hash)
                .unwrap_or_else(|| fastrand::u64(..)),
        };
        let buckets = u32::try_from(n).unwrap_or(u32::MAX);
        let i = jump_consistent_hash(key, buckets) as usize;
        if self.members.uniform && req.exclusions().is_empty() {
            return Some(i);
        }
        if self.members.eligible(i, req) {
            return Some(i);
        }
        let mut k = key;
        for attempt in 1..=4u64 {
            k = mix64(k ^ attempt);
            let j = jump_consistent_hash(k, buckets) as usize;
            if self.members.eligible(j, req) {
                return Some(j);
            }
        }
        scan_from(i, n, |j| self.members.eligible(j, req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_reference_values() {
        // The vectors every jump-hash port (Go, Python, C, Elixir) tests against.
        for (key, buckets, want) in [
            (1u64, 1u32, 0u32),
            (42, 57, 43),
            (0xDEAD10CC, 1, 0),
            (0xDEAD10CC, 666, 361),
            (256, 1024, 520),
            (1, 128, 55),
            (129, 128, 120),
            (128, 100_000_000, 38_172_097),
            (u64::MAX, 128, 92),
        ] {
            assert_eq!(jump_consistent_hash(key, buckets), want, "{key} {buckets}");
        }
        for key in 0..1000u64 {
            // Monotone: growing the list only moves keys to the new bucket.
            let mut prev = jump_consistent_hash(key, 1);
            for n in 2..40u32 {
                let b = jump_consistent_hash(key, n);
                assert!(b < n);
                assert!(b == prev || b == n - 1, "key {key}: {prev} -> {b} at n={n}");
                prev = b;
            }
        }
    }
}
