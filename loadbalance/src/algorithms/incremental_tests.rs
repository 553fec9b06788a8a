//! Every algorithm that updates its picker for a membership change
//! ([`LoadBalance::rebuild`]) in place of building it again picks exactly as a picker
//! built from scratch for the same endpoints, after any sequence of joins, leaves and
//! weight changes applied as [`Edit`]s (what the rpc-client does).

use std::sync::Arc;

use meshline_instance::Instance;
use proptest::prelude::*;

use crate::hash::mix64;
use crate::{
    AffinityHashLoadBalance, Balancer, BoundedLoadLoadBalance, ConsistentHashLoadBalance, Edit,
    LoadBalance, PickRequest, RoundRobinLoadBalance, XidFirstLoadBalance, XidLoadBalance,
    ZoneAwareLoadBalance,
};

const ZONES: [&str; 4] = ["a", "b", "c", "elsewhere"];

fn instance(id: u32, weight: u32) -> Instance {
    Instance::parse(&format!(
        "10.{}.{}.{}:{}",
        id >> 16 & 255,
        id >> 8 & 255,
        id & 255,
        8000 + id % 5
    ))
    .unwrap()
    .with_weight(weight)
    .with_zone(ZONES[id as usize % 3])
}

/// `(label, algorithm the balancer runs, a second instance of it for the fresh builds,
/// whether picks that exclude an endpoint are deterministic)`. Fast rings are paged
/// from 0 points so that a few dozen endpoints exercise the paged update. Round robin
/// keeps a sequence in the algorithm: the two instances advance in lock step because
/// every pick of one is paired with the same pick of the other.
/// `(label, algorithm, second instance, exclusions deterministic)`: see [`algorithms`].
type Case = (
    &'static str,
    Arc<dyn LoadBalance>,
    Arc<dyn LoadBalance>,
    bool,
);

fn algorithms() -> Vec<Case> {
    fn two(
        make: impl Fn() -> Arc<dyn LoadBalance>,
    ) -> (Arc<dyn LoadBalance>, Arc<dyn LoadBalance>) {
        (make(), make())
    }
    let mut out = Vec::new();
    let mut add = |label, (a, b): (Arc<dyn LoadBalance>, Arc<dyn LoadBalance>), excl| {
        out.push((label, a, b, excl))
    };
    add(
        "ConsistentHash",
        two(|| Arc::new(ConsistentHashLoadBalance::new().paged_from(0))),
        true,
    );
    add(
        "ConsistentHashJava",
        two(|| Arc::new(ConsistentHashLoadBalance::java(10))),
        true,
    );
    add(
        "BoundedLoad",
        two(|| Arc::new(BoundedLoadLoadBalance::new().paged_from(0))),
        true,
    );
    add(
        "AccountHash",
        two(|| Arc::new(AffinityHashLoadBalance::account().paged_from(0))),
        true,
    );
    add(
        "SourceHash",
        two(|| Arc::new(AffinityHashLoadBalance::source_address().paged_from(0))),
        true,
    );
    // An excluded XID target falls back to a random pick.
    add("XID", two(|| Arc::new(XidLoadBalance::new())), false);
    // An excluded XID target falls back to the ring, updated through the wrapper.
    add(
        "xid:ConsistentHash",
        two(|| {
            Arc::new(XidFirstLoadBalance::new(Arc::new(
                ConsistentHashLoadBalance::new().paged_from(0),
            )))
        }),
        true,
    );
    add(
        "zone:RoundRobin",
        two(|| {
            Arc::new(ZoneAwareLoadBalance::new(Arc::new(
                RoundRobinLoadBalance::new(),
            )))
        }),
        true,
    );
    add(
        "zone:ConsistentHash",
        two(|| {
            Arc::new(ZoneAwareLoadBalance::new(Arc::new(
                ConsistentHashLoadBalance::new().paged_from(0),
            )))
        }),
        true,
    );
    out
}

/// Checks `label` through `steps`: each step is a list of `(kind, a, b)` edits: kind 0
/// joins identity `a` (weight `b`), 1 removes the `a`-th member, 2 re-weighs the
/// `a`-th member to `b`.
fn check(
    label: &str,
    lb: Arc<dyn LoadBalance>,
    fresh_lb: Arc<dyn LoadBalance>,
    exclusions: bool,
    initial: u32,
    seed: u64,
    steps: &[Vec<(u8, u32, u32)>],
) -> Result<(), TestCaseError> {
    let balancer: Balancer<u32> = Balancer::with_payload(lb);
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut members: Vec<(u32, u32)> = Vec::new();
    let mut edits = Vec::new();
    for _ in 0..initial {
        let id = rng.u32(..1 << 20);
        if !members.iter().any(|m| m.0 == id) {
            members.push((id, 1));
            edits.push(Edit::Insert(instance(id, 1), id));
        }
    }
    balancer.apply(edits);
    for (s, step) in steps.iter().enumerate() {
        let mut edits = Vec::new();
        for &(kind, a, b) in step {
            match kind {
                0 if !members.iter().any(|m| m.0 == a) => {
                    members.push((a, b));
                    edits.push(Edit::Insert(instance(a, b), a));
                }
                1 if members.len() > 1 => {
                    let (id, w) = members.swap_remove(a as usize % members.len());
                    edits.push(Edit::Remove(instance(id, w).key().clone()));
                }
                2 => {
                    let k = a as usize % members.len();
                    members[k].1 = b;
                    let (id, w) = members[k];
                    edits.push(Edit::Insert(instance(id, w), id));
                }
                _ => {}
            }
        }
        balancer.apply(edits);
        let snapshot = balancer.snapshot();
        let endpoints = snapshot.endpoints();
        prop_assert_eq!(endpoints.len(), members.len());
        let fresh = fresh_lb.build(endpoints);
        let updated = snapshot.picker();
        for k in 0..400u64 {
            let named = &endpoints[(k as usize * 7919) % endpoints.len()];
            // Every other XID spells the address another way (IPv4-mapped IPv6), so
            // that the XID picker's address table is read, not its text index.
            let xid = if k % 2 == 0 {
                format!("{}:{}", named.key(), 2_612_341_069_705_662_465u64 + k)
            } else {
                format!("::ffff:{}:{}", named.key(), k)
            };
            let req = PickRequest::xid(&xid)
                .with_hash(mix64(k ^ seed))
                .with_source(std::net::IpAddr::from([192, 168, (k >> 8) as u8, k as u8]))
                .with_zone(ZONES[k as usize % 4]);
            let a = updated.pick(&req);
            let b = fresh.pick(&req);
            prop_assert_eq!(a, b, "{} step {} key {}", label, s, k);
            if exclusions && let Some(first) = a {
                let skip = [first, (k as usize * 31) % endpoints.len()];
                let req = req.excluding(&skip[..]);
                let a = updated.pick(&req);
                let b = fresh.pick(&req);
                prop_assert_eq!(a, b, "{} step {} key {} excluding", label, s, k);
            }
        }
    }
    Ok(())
}

fn edit() -> impl Strategy<Value = (u8, u32, u32)> {
    (0u8..3, 0u32..1 << 20, 1u32..3)
}

fn steps() -> impl Strategy<Value = Vec<Vec<(u8, u32, u32)>>> {
    // Mostly one edit (one endpoint joining or leaving), sometimes a few, now and then
    // a large batch (built afresh).
    let one = prop::collection::vec(edit(), 1..=1);
    let few = prop::collection::vec(edit(), 2..5);
    let many = prop::collection::vec(edit(), 20..40);
    prop::collection::vec(prop_oneof![6 => one, 3 => few, 1 => many], 1..8)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn an_updated_picker_picks_as_one_built_afresh(
        initial in 2u32..120,
        seed in any::<u64>(),
        steps in steps(),
    ) {
        for (label, lb, fresh_lb, exclusions) in algorithms() {
            check(label, lb, fresh_lb, exclusions, initial, seed, &steps)?;
        }
    }
}
