//! Power of two choices over peak-EWMA latency × in-flight (Finagle, linkerd, tower).
//!
//! Draw two distinct endpoints at random and take the cheaper, where
//! `cost = latency_estimate × (in_flight + 1) / weight`. The latency estimate is a
//! peak-sensitive EWMA ([`crate::EndpointStats::latency_estimate`]) that decays toward
//! zero while an endpoint gets no completions, so a slow endpoint is retried once it
//! has been left alone for a while. A fresh endpoint without samples is costed at
//! `default_rtt` (floored at 1 ms as linkerd does), decaying from its creation: it is
//! neither flooded the instant it joins nor starved forever.
//!
//! Two random candidates bound the maximum load by O(log log n) (Mitzenmacher) at O(1)
//! cost, with no herd behaviour when many clients share stale information. The pick
//! reads a coarse clock (an atomic) instead of the system clock.

use std::sync::Arc;
use std::time::Duration;

use crate::board::CounterRef;
use crate::picker::{Members, build_over};
use crate::stats::{DEFAULT_EWMA_DECAY, clock};
use crate::{Endpoint, EndpointStats, LoadBalance, PickRequest, Picker};

/// linkerd's `MIN_DEFAULT_RTT`: the floor of the fresh-endpoint estimate.
const MIN_DEFAULT_RTT: Duration = Duration::from_millis(1);

/// P2C with peak-EWMA costs.
#[derive(Debug, Clone, Copy)]
pub struct P2cLoadBalance {
    default_rtt: Duration,
    decay: Duration,
}

impl Default for P2cLoadBalance {
    fn default() -> Self {
        P2cLoadBalance {
            default_rtt: Duration::from_millis(30),
            decay: DEFAULT_EWMA_DECAY,
        }
    }
}

impl P2cLoadBalance {
    /// Defaults: fresh endpoints at 30 ms, 10 s decay.
    pub fn new() -> Self {
        P2cLoadBalance::default()
    }

    /// The latency assumed for an endpoint that has not answered yet (floored at 1 ms).
    pub fn with_default_rtt(mut self, rtt: Duration) -> Self {
        self.default_rtt = rtt;
        self
    }

    /// How fast estimates decay toward zero without completions (at least 1 ms).
    pub fn with_decay(mut self, decay: Duration) -> Self {
        self.decay = decay;
        self
    }
}

impl LoadBalance for P2cLoadBalance {
    fn name(&self) -> &str {
        "P2C"
    }

    fn build(&self, endpoints: &[Endpoint]) -> Arc<dyn Picker> {
        build_over(endpoints, |members| {
            let inv_decay_ns = crate::stats::inv_decay_ns(self.decay);
            let stats: Box<[Arc<EndpointStats>]> =
                endpoints.iter().map(|e| e.stats_arc().clone()).collect();
            // Updates blend at the rate picks decay at (see `EndpointStats::set_inv_decay`).
            for s in stats.iter() {
                s.set_inv_decay(inv_decay_ns);
            }
            Arc::new(P2cPicker {
                counters: stats.iter().map(|s| s.slot().counter_ref()).collect(),
                stats,
                default_rtt_ns: self.default_rtt.max(MIN_DEFAULT_RTT).as_nanos() as f64,
                inv_decay_ns,
                members,
            })
        })
    }
}

struct P2cPicker {
    stats: Box<[Arc<EndpointStats>]>,
    /// The in-flight counters of `stats` (kept alive by them), one load each.
    counters: Box<[CounterRef]>,
    members: Members,
    default_rtt_ns: f64,
    /// 1 / decay in nanoseconds (a multiplication per candidate, not a division).
    inv_decay_ns: f64,
}

impl P2cPicker {
    #[inline]
    fn cost(&self, i: usize, now: u64) -> f64 {
        let rtt = self.stats[i]
            .rtt_estimate_ns(now, self.default_rtt_ns, self.inv_decay_ns)
            .max(1.0);
        // SAFETY: `self.stats[i]` owns the slot this counter belongs to.
        let in_flight = unsafe { self.counters[i].load() };
        let load = rtt * (f64::from(in_flight) + 1.0);
        if self.members.uniform {
            load
        } else {
            load / f64::from(self.members.weights[i])
        }
    }

    #[inline]
    fn better(&self, i: usize, j: usize) -> usize {
        let now = clock::coarse_nanos();
        if self.cost(i, now) <= self.cost(j, now) {
            i
        } else {
            j
        }
    }

    /// A random eligible index, a few draws then a scan.
    fn draw_eligible(&self, req: &PickRequest<'_>, not: Option<usize>) -> Option<usize> {
        let n = self.members.len();
        for _ in 0..4 {
            let i = fastrand::usize(..n);
            if Some(i) != not && self.members.eligible(i, req) {
                return Some(i);
            }
        }
        crate::picker::scan_from(fastrand::usize(..n), n, |i| {
            Some(i) != not && self.members.eligible(i, req)
        })
    }
}

impl Picker for P2cPicker {
    #[inline]
    fn pick(&self, req: &PickRequest<'_>) -> Option<usize> {
        let n = self.members.len();
        if n == 1 {
            return self.members.eligible(0, req).then_some(0);
        }
        let (i, j) = if req.exclusions().is_empty() && self.members.uniform {
            // One access to the thread's generator for both draws.
            let mut rng = fastrand::Rng::with_seed(fastrand::u64(..));
            let i = rng.usize(..n);
            let j = rng.usize(..n - 1);
            (i, if j >= i { j + 1 } else { j })
        } else {
            let i = self.draw_eligible(req, None)?;
            match self.draw_eligible(req, Some(i)) {
                Some(j) => (i, j),
                None => return Some(i),
            }
        };
        // One call site, so that the comparison is inlined here.
        Some(self.better(i, j))
    }
}
