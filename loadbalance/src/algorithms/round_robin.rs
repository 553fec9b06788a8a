//! Seata's `RoundRobinLoadBalance`, weighted, with a sequence that survives rebuilds.
//!
//! Seata-Java keeps one `AtomicInteger` and picks `list[seq % n]` in list order. We keep
//! that (equal weights: one relaxed `fetch_add` and a division-free remainder), and for
//! unequal weights precompute, once per membership change, one cycle of nginx's
//! *smooth* weighted round robin: endpoint `i` gets exactly `w_i` (weights divided by
//! their gcd) turns per cycle, spread out rather than bunched, and a pick is a table
//! read at `seq % cycle`: no per-pick lock, unlike nginx's mutable current weights.
//! nginx's sequence is simulated exactly, one weight class at a time: O(cycle ×
//! distinct weights) once (1 000 endpoints of weights 1 to 5: about 40 µs). Past 2^24
//! endpoint-steps (cycle × n: huge clusters with unequal weights) the cycle is built in
//! O(cycle log cycle) from each endpoint's evenly spaced deadlines `(2k+1)/(2w_i)`
//! instead: the same shares, similarly spread.
//!
//! The sequence lives in the [`RoundRobinLoadBalance`], not in the picker, so a
//! membership change does not send the next request back to the first endpoint.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::picker::{FastMod, Members, build_over, rebuild_over};
use crate::{Endpoint, LoadBalance, MembershipChange, PickRequest, Picker};

/// Longest weighted cycle precomputed; larger weight sums are scaled down.
const MAX_SLOTS: u64 = 1 << 20;

/// Round robin in list order, weighted (Seata name `RoundRobinLoadBalance`).
#[derive(Debug, Default, Clone)]
pub struct RoundRobinLoadBalance {
    seq: Arc<AtomicU64>,
}

impl RoundRobinLoadBalance {
    /// A balancer whose sequence starts at 0, as Seata's does.
    pub fn new() -> Self {
        RoundRobinLoadBalance::default()
    }
}

impl LoadBalance for RoundRobinLoadBalance {
    /// Picks in turn, never by load.
    fn reads_in_flight(&self) -> bool {
        false
    }

    fn name(&self) -> &str {
        "RoundRobinLoadBalance"
    }

    fn build(&self, endpoints: &[Endpoint]) -> Arc<dyn Picker> {
        build_over(endpoints, |members| self.picker(members))
    }

    fn rebuild(&self, change: &MembershipChange<'_>) -> Arc<dyn Picker> {
        rebuild_over(change, |members| self.picker(members))
    }
}

impl RoundRobinLoadBalance {
    fn picker(&self, members: Members) -> Arc<dyn Picker> {
        let slots: Box<[u32]> = if members.uniform {
            Box::new([])
        } else {
            smooth_cycle(&members.weights)
        };
        let len = if members.uniform {
            members.len()
        } else {
            slots.len()
        };
        Arc::new(RoundRobinPicker {
            modulo: FastMod::new(u32::try_from(len).unwrap_or(u32::MAX)),
            seq: self.seq.clone(),
            members,
            slots,
        })
    }
}

/// Largest cycle length × endpoints for which nginx's exact sequence is simulated (the
/// bound the per-endpoint simulation had; kept so that every membership gets the
/// sequence it got before).
const MAX_SWRR_WORK: u64 = 1 << 24;

/// One cycle of the smooth weighted sequence.
fn smooth_cycle(weights: &[u32]) -> Box<[u32]> {
    let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
    let scaled: Vec<u32> = if total > MAX_SLOTS {
        tracing::debug!(
            total,
            "weight sum too large for one cycle; scaling weights down"
        );
        weights
            .iter()
            .map(|&w| {
                if w == 0 {
                    0
                } else {
                    ((u64::from(w) * MAX_SLOTS / total) as u32).max(1)
                }
            })
            .collect()
    } else {
        weights.to_vec()
    };
    let total: u64 = scaled.iter().map(|&w| u64::from(w)).sum();
    if total.saturating_mul(scaled.len() as u64) <= MAX_SWRR_WORK {
        nginx_cycle(&scaled, total)
    } else {
        deadline_cycle(&scaled)
    }
}

/// nginx's smooth weighted round robin, run for one cycle: every step each endpoint's
/// current weight grows by its weight, the largest (first on ties) is chosen and
/// loses the total.
///
/// Simulated per *weight class* rather than per endpoint, in O(cycle × distinct
/// weights) instead of O(cycle × n). After `t` steps an endpoint that was chosen `k`
/// times has current weight `t × w - k × total`, so among endpoints of one weight the
/// largest is the one chosen least often, first in list order on ties: a class takes
/// its turns in list order, round and round, and only its next member (its current
/// weight, its list position for ties) competes with the other classes. Endpoints of
/// weight 0 are never chosen (their current weight stays 0 while the largest is
/// positive, since the current weights sum to the total after each growth).
/// `tests::reference_nginx_cycle` is the plain per-endpoint simulation (the previous
/// implementation); property tests check that both give the same sequence.
fn nginx_cycle(weights: &[u32], total: u64) -> Box<[u32]> {
    struct Class {
        weight: i64,
        /// Current weight of the member whose turn is next.
        current: i64,
        /// The class's members are `members[start..end]`, in list order.
        start: usize,
        end: usize,
        /// Position in `members` of the member whose turn is next.
        next: usize,
    }
    // Endpoints of positive weight as `weight << 32 | index`, sorted: the classes are
    // runs, their members in list order.
    let mut keyed: Vec<u64> = weights
        .iter()
        .enumerate()
        .filter(|&(_, &w)| w > 0)
        .map(|(i, &w)| u64::from(w) << 32 | i as u64)
        .collect();
    keyed.sort_unstable();
    let members: Vec<u32> = keyed.iter().map(|&k| k as u32).collect();
    let mut classes: Vec<Class> = Vec::new();
    for (pos, &k) in keyed.iter().enumerate() {
        let weight = i64::from((k >> 32) as u32);
        match classes.last_mut() {
            Some(c) if c.weight == weight => c.end = pos + 1,
            _ => classes.push(Class {
                weight,
                current: 0,
                start: pos,
                end: pos + 1,
                next: pos,
            }),
        }
    }
    let total_i = total as i64;
    let mut out = Vec::with_capacity(total as usize);
    for _ in 0..total {
        let mut best = 0usize;
        let mut best_key = (i64::MIN, u32::MAX);
        for (c, class) in classes.iter_mut().enumerate() {
            class.current += class.weight;
            let first = members[class.next];
            // Largest current weight, then first in list order.
            if class.current > best_key.0 || (class.current == best_key.0 && first < best_key.1) {
                best = c;
                best_key = (class.current, first);
            }
        }
        let class = &mut classes[best];
        out.push(best_key.1);
        class.next += 1;
        if class.next == class.end {
            // Every member had one more turn: the next one (the first) is a full
            // total behind.
            class.next = class.start;
            class.current -= total_i;
        }
    }
    out.into_boxed_slice()
}

/// Every endpoint's `k`-th turn at time `(2k+1)/(2w)`, ties broken by list order.
fn deadline_cycle(weights: &[u32]) -> Box<[u32]> {
    let mut turns: Vec<(u32, u32)> = Vec::new(); // (k, endpoint)
    for (i, &w) in weights.iter().enumerate() {
        for k in 0..w {
            turns.push((k, i as u32));
        }
    }
    // Compare (2a+1)/(2wa) with (2b+1)/(2wb) exactly: (2a+1)*wb vs (2b+1)*wa.
    turns.sort_unstable_by(|&(ka, ia), &(kb, ib)| {
        let lhs = (2 * u64::from(ka) + 1) * u64::from(weights[ib as usize]);
        let rhs = (2 * u64::from(kb) + 1) * u64::from(weights[ia as usize]);
        lhs.cmp(&rhs).then(ia.cmp(&ib))
    });
    turns.into_iter().map(|(_, i)| i).collect()
}

struct RoundRobinPicker {
    members: Members,
    /// Empty for equal weights (the slot is the index).
    slots: Box<[u32]>,
    modulo: FastMod,
    seq: Arc<AtomicU64>,
}

impl RoundRobinPicker {
    #[inline]
    fn at(&self, s: u64) -> usize {
        let pos = self.modulo.rem(s as u32) as usize;
        if self.slots.is_empty() {
            pos
        } else {
            self.slots[pos] as usize
        }
    }
}

impl Picker for RoundRobinPicker {
    #[inline]
    fn pick(&self, req: &PickRequest<'_>) -> Option<usize> {
        let s = self.seq.fetch_add(1, Ordering::Relaxed);
        let i = self.at(s);
        if req.exclusions().is_empty() {
            return Some(i);
        }
        if self.members.eligible(i, req) {
            return Some(i);
        }
        // The next turns in the sequence, then anything eligible.
        for k in 1..=self.members.len().min(8) as u64 {
            let j = self.at(s.wrapping_add(k));
            if self.members.eligible(j, req) {
                return Some(j);
            }
        }
        self.members.scan_random_start(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshline_instance::Instance;
    use proptest::prelude::*;

    /// nginx's smooth weighted round robin simulated endpoint by endpoint, O(cycle × n):
    /// the implementation [`nginx_cycle`] replaced, kept as its reference.
    pub(super) fn reference_nginx_cycle(weights: &[u32], total: u64) -> Box<[u32]> {
        let total = total as i64;
        let mut current = vec![0i64; weights.len()];
        let mut out = Vec::with_capacity(total as usize);
        for _ in 0..total {
            let mut best = 0usize;
            for (i, &w) in weights.iter().enumerate() {
                current[i] += i64::from(w);
                if current[i] > current[best] {
                    best = i;
                }
            }
            current[best] -= total;
            out.push(best as u32);
        }
        out.into_boxed_slice()
    }

    fn endpoints(weights: &[u32]) -> Vec<Endpoint> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                let inst = Instance::parse(&format!("10.3.{}.{}:8091", i / 250, i % 250))
                    .unwrap()
                    .with_weight(w);
                Endpoint::new(inst)
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// The picker's first `3 × sum(weights)` picks are the sequence the reference
        /// simulation gives (through the same normalisation: weights divided by their
        /// gcd, all-zero weights read as equal), zero weights included.
        #[test]
        fn picks_follow_the_reference_simulation(
            weights in prop::collection::vec(0u32..=10, 1..300),
        ) {
            let eps = endpoints(&weights);
            let members = Members::new(&eps);
            let expected: Box<[u32]> = if members.uniform {
                (0..members.len() as u32).collect()
            } else {
                reference_nginx_cycle(&members.weights, members.total_weight)
            };
            let picker = RoundRobinLoadBalance::new().build(&eps);
            let sum: u64 = weights.iter().map(|&w| u64::from(w)).sum();
            let picks = 3 * if sum == 0 { weights.len() as u64 } else { sum };
            for t in 0..picks as usize {
                let got = picker.pick(&PickRequest::default()).unwrap();
                prop_assert_eq!(got as u32, expected[t % expected.len()], "pick {}", t);
            }
        }

        /// Direct comparison over wider weights (many distinct weights, large gaps).
        #[test]
        fn cycle_equals_the_reference(
            weights in prop::collection::vec(prop_oneof![Just(0u32), 1u32..4, 1u32..300], 1..40),
        ) {
            let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
            prop_assume!(total > 0);
            prop_assert_eq!(nginx_cycle(&weights, total), reference_nginx_cycle(&weights, total));
        }
    }

    #[test]
    fn cycle_equals_the_reference_on_large_clusters() {
        let mut rng = fastrand::Rng::with_seed(11);
        for n in [1000usize, 2500] {
            for max in [2u32, 5, 11] {
                let weights: Vec<u32> = (0..n).map(|_| rng.u32(..max)).collect();
                let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
                assert_eq!(
                    nginx_cycle(&weights, total),
                    reference_nginx_cycle(&weights, total),
                    "n={n} max={max}"
                );
            }
        }
    }

    /// Smoothness: over any prefix of the repeated sequence, endpoint `i` has had its
    /// fair share `t * w_i / L` of turns within one turn.
    fn assert_smooth(weights: &[u32]) {
        let cycle = smooth_cycle(weights);
        let total: u32 = weights.iter().sum();
        assert_eq!(cycle.len() as u32, total);
        for (i, &w) in weights.iter().enumerate() {
            let mut count = 0f64;
            for t in 1..=(3 * cycle.len()) {
                if cycle[(t - 1) % cycle.len()] as usize == i {
                    count += 1.0;
                }
                let fair = t as f64 * f64::from(w) / f64::from(total);
                assert!(
                    (count - fair).abs() <= 1.0,
                    "{weights:?} endpoint {i} at {t}: {count} vs {fair}"
                );
            }
        }
    }

    #[test]
    fn smooth_cycle_spreads_turns() {
        assert_smooth(&[5, 1, 1]);
        assert_smooth(&[3, 2, 1]);
        assert_smooth(&[1, 1, 1, 7]);
        assert_smooth(&[10, 9, 1, 4, 4]);
        assert_eq!(smooth_cycle(&[2, 0, 1]).as_ref(), &[0, 2, 0]);
        // nginx's documented sequence for weights 5, 1, 1.
        assert_eq!(smooth_cycle(&[5, 1, 1]).as_ref(), &[0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn deadline_cycle_gives_exact_shares_evenly() {
        let w = [7u32, 3, 1, 9, 9];
        let cycle = deadline_cycle(&w);
        for (i, &wi) in w.iter().enumerate() {
            let pos: Vec<usize> = (0..cycle.len())
                .filter(|&p| cycle[p] as usize == i)
                .collect();
            assert_eq!(pos.len(), wi as usize);
            // Consecutive turns of one endpoint are about cycle/w apart.
            let gap = cycle.len() as f64 / f64::from(wi);
            for pair in pos.windows(2) {
                let d = (pair[1] - pair[0]) as f64;
                assert!((d - gap).abs() <= w.len() as f64, "{i}: {pos:?}");
            }
        }
    }
}
