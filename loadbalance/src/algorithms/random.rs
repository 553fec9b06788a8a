//! Seata's `RandomLoadBalance`, weighted.
//!
//! Seata-Java draws `ThreadLocalRandom.nextInt(n)` and ignores weights. We honour the
//! registry weights with Vose's alias table (built once per membership change, O(1) per
//! pick: one 64-bit random number, one table read) and keep Seata's uniform draw as
//! the fast path when all weights are equal.

use std::sync::Arc;

use crate::picker::{Members, build_over, rebuild_over};
use crate::{Endpoint, LoadBalance, MembershipChange, PickRequest, Picker};

/// Draws attempted before falling back to a scan when the draw hits an excluded
/// endpoint.
const DRAWS: usize = 4;

/// Weighted random choice (Seata name `RandomLoadBalance`).
#[derive(Debug, Default, Clone, Copy)]
pub struct RandomLoadBalance;

impl RandomLoadBalance {
    /// The balancer.
    pub fn new() -> Self {
        RandomLoadBalance
    }
}

impl LoadBalance for RandomLoadBalance {
    /// Picks at random, never by load.
    fn reads_in_flight(&self) -> bool {
        false
    }

    fn name(&self) -> &str {
        "RandomLoadBalance"
    }

    fn build(&self, endpoints: &[Endpoint]) -> Arc<dyn Picker> {
        build_over(endpoints, random_picker)
    }

    fn rebuild(&self, change: &MembershipChange<'_>) -> Arc<dyn Picker> {
        rebuild_over(change, random_picker)
    }
}

/// The random picker over `members` (not empty).
pub(crate) fn random_picker(members: Members) -> Arc<dyn Picker> {
    if members.uniform {
        Arc::new(UniformRandomPicker { members })
    } else {
        let table = AliasTable::new(&members.weights);
        Arc::new(WeightedRandomPicker { members, table })
    }
}

struct UniformRandomPicker {
    members: Members,
}

impl Picker for UniformRandomPicker {
    #[inline]
    fn pick(&self, req: &PickRequest<'_>) -> Option<usize> {
        let n = self.members.len();
        let i = fastrand::usize(..n);
        if req.exclusions().is_empty() {
            return Some(i);
        }
        pick_avoiding(&self.members, req, i, || fastrand::usize(..n))
    }
}

struct WeightedRandomPicker {
    members: Members,
    table: AliasTable,
}

impl Picker for WeightedRandomPicker {
    #[inline]
    fn pick(&self, req: &PickRequest<'_>) -> Option<usize> {
        let i = self.table.sample();
        if req.exclusions().is_empty() {
            return Some(i);
        }
        pick_avoiding(&self.members, req, i, || self.table.sample())
    }
}

/// `first` if eligible, else a few more draws, else a scan.
#[inline]
pub(crate) fn pick_avoiding(
    members: &Members,
    req: &PickRequest<'_>,
    first: usize,
    mut draw: impl FnMut() -> usize,
) -> Option<usize> {
    if members.eligible(first, req) {
        return Some(first);
    }
    for _ in 0..DRAWS {
        let i = draw();
        if members.eligible(i, req) {
            return Some(i);
        }
    }
    members.scan_random_start(req)
}

/// Vose's alias method: O(n) to build, O(1) to sample a weighted index.
pub(crate) struct AliasTable {
    /// Keep-threshold of each column in units of 2^-32 (2^32 = always keep).
    prob: Box<[u64]>,
    alias: Box<[u32]>,
}

impl AliasTable {
    /// A table over `weights` (at least one must be positive).
    pub(crate) fn new(weights: &[u32]) -> AliasTable {
        let n = weights.len();
        let total: f64 = weights.iter().map(|&w| f64::from(w)).sum();
        let mut scaled: Vec<f64> = weights
            .iter()
            .map(|&w| f64::from(w) * n as f64 / total)
            .collect();
        let mut prob = vec![1u64 << 32; n];
        let mut alias: Vec<u32> = (0..n as u32).collect();
        let (mut small, mut large): (Vec<usize>, Vec<usize>) =
            (0..n).partition(|&i| scaled[i] < 1.0);
        while let (Some(s), Some(&l)) = (small.pop(), large.last()) {
            prob[s] = (scaled[s] * (1u64 << 32) as f64) as u64;
            alias[s] = l as u32;
            scaled[l] = (scaled[l] + scaled[s]) - 1.0;
            if scaled[l] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // Left-overs (rounding) keep themselves with certainty.
        AliasTable {
            prob: prob.into_boxed_slice(),
            alias: alias.into_boxed_slice(),
        }
    }

    /// A weighted random index.
    #[inline]
    pub(crate) fn sample(&self) -> usize {
        let r = fastrand::u64(..);
        let n = self.prob.len() as u64;
        let i = (((r >> 32) * n) >> 32) as usize;
        if u64::from(r as u32) < self.prob[i] {
            i
        } else {
            self.alias[i] as usize
        }
    }
}
