//! Membership changes end to end: a registry hub's snapshot order (what a `Balancer`
//! is fed), and `Balancer::update` merging an ordered snapshot against the previous
//! one, which must give exactly what rebuilding from scratch gives.

use std::sync::Arc;

use meshline::loadbalance::{Balancer, ConsistentHashLoadBalance, PickRequest, by_name, hash};
use meshline::{EmptyProtection, Instance, WatchHub};
use proptest::prelude::*;

/// Hosts of every shape: IPv4 of every length (so 8-byte prefixes tie), IPv6, DNS
/// names longer than 16 bytes sharing long prefixes.
fn host(i: u32) -> String {
    match i % 6 {
        0 => format!("10.{}.{}.{}", i % 3, i % 7, i % 200),
        1 => format!("10.1.{}.1", i % 12),
        2 => format!("2001:db8::{:x}", i % 50),
        3 => format!("service-node-{}.cluster.example.com", i % 30),
        4 => format!("service-node-{}.cluster.example.org", i % 3),
        _ => format!("{}.{}.0.1", 1 + i % 250, i % 4),
    }
}

fn instance(i: u32, port: u16, weight: u32) -> Instance {
    Instance::new(&host(i), port).unwrap().with_weight(weight)
}

fn list() -> impl Strategy<Value = Vec<Instance>> {
    prop::collection::vec((0u32..400, 1u16..4, 0u32..3), 0..300).prop_map(|v| {
        v.into_iter()
            .map(|(i, port, w)| instance(i, 8000 + port, w))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// The hub sorts by identity exactly as a stable sort on the key does, and keeps
    /// the first entry of each identity.
    #[test]
    fn a_published_list_is_sorted_and_deduplicated_as_a_stable_sort(list in list()) {
        let hub = WatchHub::new("test", EmptyProtection::Apply);
        hub.publish("c", list.clone());
        let mut expected = list;
        expected.sort_by(|a, b| a.key().cmp(b.key()));
        expected.dedup_by(|later, first| later.key() == first.key());
        let snapshot = hub.current("c").unwrap();
        prop_assert_eq!(&snapshot.instances()[..], &expected[..]);
    }

    /// A balancer fed snapshot after snapshot (merged against the previous one) ends
    /// with the endpoints a fresh balancer gets, keeps the stats of identities it
    /// knew, and a consistent-hash one routes every key as a fresh one does.
    #[test]
    fn merged_updates_equal_fresh_ones(steps in prop::collection::vec(list(), 1..6), unsorted in any::<bool>()) {
        let hub = WatchHub::new("test", EmptyProtection::Apply);
        let ch = Arc::new(ConsistentHashLoadBalance::new());
        let merged = Balancer::new(ch.clone());
        let rr = Balancer::new(by_name("RoundRobinLoadBalance").unwrap());
        for (k, step) in steps.into_iter().enumerate() {
            hub.publish("c", step);
            let snapshot = hub.current("c").unwrap();
            let mut instances = snapshot.instances().to_vec();
            if unsorted && k % 2 == 1 {
                // Not in identity order: the balancer's unmerged path.
                instances.reverse();
            }
            let before = merged.endpoints();
            merged.update(&instances);
            rr.update(&instances);
            let fresh = Balancer::new(ch.clone());
            fresh.update(&instances);
            let after = merged.endpoints();
            prop_assert_eq!(after.len(), fresh.endpoints().len());
            for (a, b) in after.iter().zip(fresh.endpoints().iter()) {
                prop_assert_eq!(a.instance(), b.instance());
            }
            for e in after.iter() {
                if let Some(old) = before.iter().find(|o| o.key() == e.key()) {
                    prop_assert!(Arc::ptr_eq(old.stats_arc(), e.stats_arc()), "{} lost its stats", e);
                }
                let found = merged.endpoint(e.key()).map(|f| f.instance().clone());
                prop_assert_eq!(found.as_ref(), Some(e.instance()));
            }
            prop_assert_eq!(rr.endpoints().len(), after.len());
            for key in 0..200u64 {
                let req = PickRequest::default().with_hash(hash::mix64(key));
                let a = merged.pick(&req).map(|p| p.endpoint().key().clone());
                let b = fresh.pick(&req).map(|p| p.endpoint().key().clone());
                prop_assert_eq!(a, b);
            }
        }
    }
}
