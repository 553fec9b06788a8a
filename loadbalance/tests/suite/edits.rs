//! Membership as edits (`Balancer::apply`): a balancer fed "joined with this payload" /
//! "left" ends exactly where one fed the whole resulting list does, every pick hands
//! back the payload its endpoint joined with, and stats survive a replacement.

use std::collections::BTreeMap;
use std::sync::Arc;

use meshline_instance::{Instance, InstanceKey};
use meshline_loadbalance::{Balancer, ConsistentHashLoadBalance, Edit, PickRequest, by_name, hash};
use proptest::prelude::*;

fn instance(i: u32, weight: u32) -> Instance {
    Instance::new(&format!("10.3.{}.{}", i / 200, i % 200), 8091)
        .unwrap()
        .with_weight(weight)
}

/// (identity, weight, insert?) edits, applied in batches.
fn batches() -> impl Strategy<Value = Vec<Vec<(u32, u32, bool)>>> {
    prop::collection::vec(
        prop::collection::vec((0u32..300, 1u32..3, prop::bool::weighted(0.7)), 0..40),
        1..8,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// After every batch: the same endpoints, in identity order, as a fresh balancer
    /// given the whole list; every identity's payload is its latest insert's; stats
    /// of identities that stayed are the same stats; and a consistent-hash balancer
    /// routes every key as the fresh one does (paged rings, updated page by page, are
    /// checked the same way in the crate's `consistent_hash` tests).
    #[test]
    fn edits_equal_a_fresh_update(batches in batches()) {
        for name in ["ConsistentHash", "RoundRobinLoadBalance", "LeastActiveLoadBalance"] {
            let lb = match name {
                "ConsistentHash" => Arc::new(ConsistentHashLoadBalance::new()) as _,
                other => by_name(other).unwrap(),
            };
            let edited: Balancer<(u32, usize)> = Balancer::with_payload(lb);
            let mut model: BTreeMap<InstanceKey, (Instance, (u32, usize))> = BTreeMap::new();
            for (b, batch) in batches.iter().enumerate() {
                let before = edited.snapshot();
                let mut edits = Vec::new();
                for &(i, w, insert) in batch {
                    let inst = instance(i, w);
                    if insert {
                        model.insert(inst.key().clone(), (inst.clone(), (i, b)));
                        edits.push(Edit::Insert(inst, (i, b)));
                    } else {
                        model.remove(inst.key());
                        edits.push(Edit::Remove(inst.key().clone()));
                    }
                }
                edited.apply(edits);
                let list: Vec<Instance> = model.values().map(|(inst, _)| inst.clone()).collect();
                let fresh = Balancer::new(by_name(name).unwrap());
                fresh.update(&list);
                let after = edited.endpoints();
                prop_assert_eq!(after.len(), list.len());
                for (e, (inst, payload)) in after.iter().zip(model.values()) {
                    prop_assert_eq!(e.instance(), inst);
                    prop_assert_eq!(e.payload::<(u32, usize)>(), Some(payload));
                    if let Some(old) = before.endpoint(e.key()) {
                        prop_assert!(Arc::ptr_eq(old.stats_arc(), e.stats_arc()), "{} lost its stats", e);
                    }
                    let found = edited.snapshot().position(e.key());
                    prop_assert_eq!(found.map(|i| after[i].key()), Some(e.key()));
                }
                for key in 0..300u64 {
                    let req = PickRequest::default().with_hash(hash::mix64(key));
                    let Some(picked) = edited.pick(&req) else {
                        prop_assert!(list.is_empty());
                        continue;
                    };
                    let key = picked.endpoint().key().clone();
                    prop_assert_eq!(picked.payload(), &model[&key].1);
                    if name == "ConsistentHash" {
                        let want = fresh.pick(&req).map(|p| p.endpoint().key().clone());
                        prop_assert_eq!(Some(key), want);
                    }
                }
            }
        }
    }
}

/// A replaced endpoint (new instance data, new payload) keeps its stats; a request
/// picked before the replacement keeps the payload it was picked with and ends on the
/// same counter.
#[test]
fn a_replacement_keeps_stats_and_running_picks_keep_their_payload() {
    // An algorithm that reads load, so that requests are counted.
    let b: Balancer<&'static str> =
        Balancer::with_payload(by_name("LeastActiveLoadBalance").unwrap());
    let a = instance(1, 1);
    b.apply([Edit::Insert(a.clone(), "first connection")]);
    let running = b.pick(&PickRequest::default()).unwrap();
    assert_eq!(*running.payload(), "first connection");
    b.apply([Edit::Insert(a.clone().with_weight(4), "second connection")]);
    let now = b.endpoint(a.key()).unwrap();
    assert_eq!(now.weight(), 4);
    assert_eq!(now.payload::<&str>(), Some(&"second connection"));
    assert_eq!(
        now.stats().in_flight(),
        1,
        "the running pick is counted on the same stats"
    );
    assert_eq!(*running.payload(), "first connection");
    drop(running);
    assert_eq!(now.stats().in_flight(), 0);
    let next = b.pick(&PickRequest::default()).unwrap();
    assert_eq!(*next.payload(), "second connection");
    // Removing a non-member changes nothing: the snapshot is the same one.
    let snap = b.snapshot();
    b.apply([Edit::Remove(instance(2, 1).key().clone())]);
    assert!(Arc::ptr_eq(&snap, &b.snapshot()));
    // The last edit of an identity wins.
    b.apply([
        Edit::Remove(a.key().clone()),
        Edit::Insert(a.clone(), "third"),
    ]);
    assert_eq!(*b.pick(&PickRequest::default()).unwrap().payload(), "third");
    b.apply([
        Edit::Insert(a.clone(), "fourth"),
        Edit::Remove(a.key().clone()),
    ]);
    assert!(b.pick(&PickRequest::default()).is_none());
}

/// Edits on a membership of ready-made endpoints in no particular order (the
/// unmerged path) remove every occurrence of an identity and add the new ones.
#[test]
fn edits_of_an_unordered_membership() {
    let b = Balancer::new(by_name("RoundRobinLoadBalance").unwrap());
    let reg = b.stats_registry();
    let list = [instance(5, 1), instance(3, 1), instance(4, 1)];
    b.update_endpoints(reg.endpoints(&list));
    b.apply([
        Edit::Remove(instance(3, 1).key().clone()),
        Edit::Insert(instance(1, 1), ()),
    ]);
    let keys: Vec<String> = b.endpoints().iter().map(|e| e.to_string()).collect();
    assert_eq!(keys, ["10.3.0.5:8091", "10.3.0.4:8091", "10.3.0.1:8091"]);
    let picked: std::collections::HashSet<String> = (0..6)
        .map(|_| {
            b.pick(&PickRequest::default())
                .unwrap()
                .endpoint()
                .to_string()
        })
        .collect();
    assert_eq!(picked.len(), 3);
}
