//! Bounded random subsets for very large clusters.
//!
//! With thousands of servers, a connection to each from each client is too many. A
//! client can instead keep `k` connections to a random subset (Google's "subsetting").
//! Two rules keep this cheap and stable:
//!
//! - members already chosen stay chosen while the registry still lists them, so a
//!   membership change does not reshuffle every connection;
//! - free slots are filled by reservoir sampling (Algorithm R) over the candidates not
//!   yet chosen, so each has the same chance, in one pass, without building a shuffled
//!   copy of the list.

use std::collections::HashSet;

use meshline_registry_core::{Instance, InstanceKey};

/// Chooses up to `k` of `all`, keeping members of `current` that are still listed.
/// The result is in the order of `all`.
pub(crate) fn choose(current: &HashSet<InstanceKey>, all: &[Instance], k: usize) -> Vec<Instance> {
    if all.len() <= k {
        return all.to_vec();
    }
    let mut keep: Vec<usize> = Vec::with_capacity(k);
    let mut candidates: Vec<usize> = Vec::with_capacity(all.len());
    for (i, inst) in all.iter().enumerate() {
        if current.contains(inst.key()) && keep.len() < k {
            keep.push(i);
        } else {
            candidates.push(i);
        }
    }
    let free = k - keep.len();
    // Algorithm R: the first `free` candidates fill the reservoir; candidate number j
    // (0-based) replaces a random slot with probability free / (j + 1).
    let mut reservoir: Vec<usize> = Vec::with_capacity(free);
    for (j, &c) in candidates.iter().enumerate() {
        if j < free {
            reservoir.push(c);
        } else {
            let r = fastrand::usize(..=j);
            if r < free {
                reservoir[r] = c;
            }
        }
    }
    keep.extend(reservoir);
    keep.sort_unstable();
    keep.into_iter().map(|i| all[i].clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(n: u16) -> Vec<Instance> {
        (1..=n)
            .map(|p| Instance::new("10.0.0.1", p).unwrap())
            .collect()
    }

    #[test]
    fn small_clusters_are_taken_whole() {
        let all = cluster(3);
        assert_eq!(choose(&HashSet::new(), &all, 5), all);
        assert_eq!(choose(&HashSet::new(), &all, 3), all);
    }

    #[test]
    fn keeps_current_members_and_fills_to_k() {
        let all = cluster(100);
        let first = choose(&HashSet::new(), &all, 10);
        assert_eq!(first.len(), 10);
        let cur: HashSet<_> = first.iter().map(|i| i.key().clone()).collect();
        // Remove two chosen members from the registry: the other eight stay.
        let removed: HashSet<_> = first[..2].iter().map(|i| i.key().clone()).collect();
        let shrunk: Vec<_> = all
            .iter()
            .filter(|i| !removed.contains(i.key()))
            .cloned()
            .collect();
        let second = choose(&cur, &shrunk, 10);
        assert_eq!(second.len(), 10);
        for kept in &first[2..] {
            assert!(second.iter().any(|i| i.key() == kept.key()));
        }
        for gone in &removed {
            assert!(second.iter().all(|i| i.key() != gone));
        }
    }

    #[test]
    fn every_member_has_a_fair_chance() {
        let all = cluster(20);
        let mut hits = [0u32; 20];
        let rounds = 20_000;
        for _ in 0..rounds {
            for i in choose(&HashSet::new(), &all, 5) {
                hits[usize::from(i.port() - 1)] += 1;
            }
        }
        // Expected 5/20 * rounds = 5000 each; allow +-10%.
        for (i, h) in hits.iter().enumerate() {
            assert!((4500..=5500).contains(h), "member {i}: {h} of {rounds}");
        }
    }
}
