//! Seata's `LeastActiveLoadBalance`: the endpoint with the fewest requests in flight,
//! uniformly at random among ties.
//!
//! Seata-Java's version reads counters keyed `"/ip:port"` that its hook writes under
//! `"ip:port"`, and only decrements after a successful synchronous send, so in
//! production every count reads 0 (it is random) or only grows. Here the count is the
//! endpoint's [`crate::EndpointStats::in_flight`], incremented by every pick and
//! decremented when the [`crate::InFlightGuard`] drops: exact on success, error,
//! timeout and cancellation.
//!
//! Weighted (Dubbo-style): with unequal weights the endpoint minimising
//! `in_flight / weight` wins, so a weight-2 server carries twice the concurrency.
//! The pick is one pass over the endpoints' counters (plus a partial second pass to
//! pick among ties): O(n), no allocation, no lock.

use std::sync::Arc;

use crate::picker::{EmptyPicker, Members};
use crate::{Endpoint, EndpointStats, LoadBalance, PickRequest, Picker};

/// Fewest in-flight requests, weighted, random among ties (Seata name
/// `LeastActiveLoadBalance`).
#[derive(Debug, Clone, Copy)]
pub struct LeastActiveLoadBalance {
    weighted: bool,
    name: &'static str,
}

impl Default for LeastActiveLoadBalance {
    fn default() -> Self {
        LeastActiveLoadBalance {
            weighted: true,
            name: "LeastActiveLoadBalance",
        }
    }
}

impl LeastActiveLoadBalance {
    /// Weighted least-active.
    pub fn new() -> Self {
        LeastActiveLoadBalance::default()
    }

    /// Ignores weights (the game gateways' "fewest requests").
    pub fn unweighted(name: &'static str) -> Self {
        LeastActiveLoadBalance {
            weighted: false,
            name,
        }
    }
}

impl LoadBalance for LeastActiveLoadBalance {
    fn name(&self) -> &str {
        self.name
    }

    fn build(&self, endpoints: &[Endpoint]) -> Arc<dyn Picker> {
        if endpoints.is_empty() {
            return Arc::new(EmptyPicker);
        }
        let members = Members::new(endpoints);
        let stats = endpoints.iter().map(|e| e.stats_arc().clone()).collect();
        let weighted = self.weighted && !members.uniform;
        Arc::new(LeastActivePicker {
            stats,
            weighted,
            members,
        })
    }
}

struct LeastActivePicker {
    stats: Box<[Arc<EndpointStats>]>,
    weighted: bool,
    members: Members,
}

impl LeastActivePicker {
    /// Exact least-loaded among `ok` endpoints, uniform among ties.
    #[inline(always)]
    fn select(&self, ok: impl Fn(usize) -> bool, weight: impl Fn(usize) -> u64) -> Option<usize> {
        // (load, weight) of the best so far; compare load_a * w_b with load_b * w_a.
        let mut best: Option<(u64, u64)> = None;
        let mut first = 0usize;
        let mut ties = 0usize;
        for (i, s) in self.stats.iter().enumerate() {
            if !ok(i) {
                continue;
            }
            let load = s.in_flight();
            let wi = weight(i);
            if wi == 0 {
                continue;
            }
            match best {
                Some((bl, bw)) => {
                    let (l, r) = (
                        u128::from(load) * u128::from(bw),
                        u128::from(bl) * u128::from(wi),
                    );
                    if l < r {
                        best = Some((load, wi));
                        first = i;
                        ties = 1;
                    } else if l == r {
                        ties += 1;
                    }
                }
                None => {
                    best = Some((load, wi));
                    first = i;
                    ties = 1;
                }
            }
        }
        let (bl, bw) = best?;
        if ties == 1 {
            return Some(first);
        }
        // The r-th tie; counters may have moved since the first pass, in which case the
        // first minimum found is still a fine answer.
        let mut r = fastrand::usize(..ties);
        for (i, s) in self.stats.iter().enumerate().skip(first) {
            if !ok(i) {
                continue;
            }
            let wi = weight(i);
            if wi > 0
                && u128::from(s.in_flight()) * u128::from(bw) == u128::from(bl) * u128::from(wi)
            {
                if r == 0 {
                    return Some(i);
                }
                r -= 1;
            }
        }
        Some(first)
    }
}

/// Endpoints up to which the common case collects ties in one pass on the stack.
const TIE_BUFFER: usize = 128;

impl LeastActivePicker {
    /// Equal weights, nothing excluded, at most [`TIE_BUFFER`] endpoints: one
    /// branch-light pass that keeps the indices of the current minimum's ties.
    #[inline]
    fn select_uniform(&self) -> Option<usize> {
        let mut ties = [0u8; TIE_BUFFER];
        let mut len = 0usize;
        let mut min = u64::MAX;
        for (i, s) in self.stats.iter().enumerate() {
            let load = s.in_flight();
            if load < min {
                min = load;
                len = 0;
            }
            ties[len & (TIE_BUFFER - 1)] = i as u8;
            len += usize::from(load == min);
        }
        match len {
            0 => None,
            1 => Some(usize::from(ties[0])),
            _ => Some(usize::from(ties[fastrand::usize(..len)])),
        }
    }
}

impl Picker for LeastActivePicker {
    #[inline]
    fn pick(&self, req: &PickRequest<'_>) -> Option<usize> {
        let w = &self.members.weights;
        let all = req.exclusions().is_empty();
        match (all, self.weighted, self.members.uniform) {
            // Equal weights, nothing excluded: the common case.
            (true, _, true) if self.stats.len() <= TIE_BUFFER => self.select_uniform(),
            (true, _, true) => self.select(|_| true, |_| 1),
            (true, true, false) => self.select(|_| true, |i| u64::from(w[i])),
            (true, false, false) => self.select(|_| true, |i| u64::from(w[i].min(1))),
            (false, true, _) => self.select(
                |i| !req.is_excluded(i, &self.members.endpoints[i]),
                |i| u64::from(w[i]),
            ),
            (false, false, _) => self.select(
                |i| !req.is_excluded(i, &self.members.endpoints[i]),
                |i| u64::from(w[i].min(1)),
            ),
        }
    }
}
