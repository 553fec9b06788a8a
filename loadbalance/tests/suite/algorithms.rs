//! Behaviour of the algorithms beyond Seata's: P2C, zone preference, game choices,
//! and the fall-backs of the Seata five.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use meshline_instance::{Instance, InstanceKey};
use meshline_loadbalance::{
    AffinityHashLoadBalance, Balancer, FillLoadBalance, InFlightGuard, LoadWeightedLoadBalance,
    P2cLoadBalance, PickRequest, XidLoadBalance, ZoneAwareLoadBalance, by_name,
};

fn inst(i: usize) -> Instance {
    Instance::parse(&format!("10.0.0.{i}:8091")).unwrap()
}

fn key(i: usize) -> InstanceKey {
    inst(i).key().clone()
}

fn counts(b: &Balancer, picks: usize, req: &PickRequest<'_>) -> HashMap<InstanceKey, usize> {
    let mut h = HashMap::new();
    for _ in 0..picks {
        let p = b.pick(req).unwrap();
        *h.entry(p.endpoint().key().clone()).or_insert(0) += 1;
    }
    h
}

#[test]
fn p2c_prefers_fast_endpoints_and_does_not_flood_fresh_ones() {
    let b = Balancer::new(Arc::new(P2cLoadBalance::new()));
    b.update(&[inst(1), inst(2)]);
    // Endpoint 1 has answered in 1 ms; endpoint 2 is fresh (costed at 30 ms).
    let eps = b.endpoints();
    eps[0].begin().success(Duration::from_millis(1));
    let c = counts(&b, 200, &PickRequest::default());
    assert_eq!(c.get(&key(1)), Some(&200), "{c:?}");
    // With 40 requests in flight on endpoint 1 its cost (1 ms x 41) passes the fresh
    // endpoint's 30 ms: now the fresh one is chosen.
    let held: Vec<InFlightGuard> = (0..40).map(|_| eps[0].begin()).collect();
    let p = b.pick(&PickRequest::default()).unwrap();
    assert_eq!(p.endpoint().key(), &key(2));
    drop(held);
    // A slow endpoint loses to a fast one.
    let b = Balancer::new(Arc::new(P2cLoadBalance::new()));
    b.update(&[inst(1), inst(2), inst(3)]);
    let eps = b.endpoints();
    eps[0].begin().success(Duration::from_millis(200));
    eps[1].begin().success(Duration::from_millis(2));
    eps[2].begin().success(Duration::from_millis(2));
    let c = counts(&b, 3000, &PickRequest::default());
    assert_eq!(c.get(&key(1)), None, "{c:?}");
}

/// A failure priced as a slow answer (a server that answers at once that it cannot
/// work) loses the picks as a slow endpoint does; recorded as a plain failure, its
/// fast answers would keep it the cheapest. Its estimate started again, the price is
/// gone at once.
#[test]
fn p2c_avoids_an_endpoint_whose_failures_are_priced_until_its_estimate_restarts() {
    let b = Balancer::new(Arc::new(P2cLoadBalance::new()));
    b.update(&[inst(1), inst(2), inst(3)]);
    let eps = b.endpoints();
    eps[0].begin().success(Duration::from_millis(1));
    eps[1].begin().success(Duration::from_millis(2));
    eps[2].begin().success(Duration::from_millis(2));
    // Endpoint 1 now fails at once: plain failures leave its 1 ms estimate as it was,
    // and it stays the cheaper of every draw it is in (two in three).
    eps[0].begin().failure();
    let c = counts(&b, 3000, &PickRequest::default());
    assert!(c.get(&key(1)).copied().unwrap_or(0) > 1800, "{c:?}");
    // Priced as a 1 s answer, it is never the cheaper of two.
    eps[0].begin().failure_costing(Duration::from_secs(1));
    assert_eq!(eps[0].stats().consecutive_failures(), 2);
    let c = counts(&b, 3000, &PickRequest::default());
    assert_eq!(c.get(&key(1)), None, "{c:?}");
    // Its estimate started again at 1 ms, the price is gone: it wins every draw it is
    // in again.
    eps[0].stats().restart_estimate(Duration::from_millis(1));
    assert!(eps[0].stats().latency_estimate() <= Some(Duration::from_millis(1)));
    let c = counts(&b, 3000, &PickRequest::default());
    assert!(c.get(&key(1)).copied().unwrap_or(0) > 1800, "{c:?}");
}

/// A slow endpoint that recovers gets its share back: while it is left alone its
/// estimate decays at P2C's configured rate, it is tried again, and its fast answers
/// bring its estimate down at that same rate. (The update blended each new sample with
/// a fixed 10 s decay whatever P2C was given: with a 50 ms decay, every fast answer put
/// the old slow estimate nearly back, and the recovered endpoint got one pick in a few
/// hundred for as long as the test ran.)
#[test]
fn p2c_gives_a_recovered_slow_endpoint_its_share_back() {
    let b = Balancer::new(Arc::new(
        P2cLoadBalance::new().with_decay(Duration::from_millis(50)),
    ));
    b.update(&[inst(1), inst(2), inst(3)]);
    let eps = b.endpoints();
    eps[0].begin().success(Duration::from_millis(20));
    eps[1].begin().success(Duration::from_millis(1));
    eps[2].begin().success(Duration::from_millis(1));
    // From now on every endpoint answers in 1 ms, each pick answered at once. Endpoint
    // 1's 20 ms decays below the others' 1 ms after 50 ms x ln 20 = 150 ms; within a
    // few of its answers it is one of three equals.
    let start = std::time::Instant::now();
    let mut window = (std::time::Instant::now(), 0usize, 0usize);
    let mut shares = Vec::new();
    let recovered_at = loop {
        let p = b.pick(&PickRequest::default()).unwrap();
        let one = p.endpoint().key() == &key(1);
        p.success(Duration::from_millis(1));
        window.1 += usize::from(one);
        window.2 += 1;
        std::thread::sleep(Duration::from_micros(50));
        if window.0.elapsed() >= Duration::from_millis(200) {
            let share = window.1 as f64 / window.2 as f64;
            shares.push(format!("{share:.2}"));
            if share >= 0.25 {
                break start.elapsed();
            }
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "endpoint 1 recovered but got these shares of picks, per 200 ms: {shares:?}"
            );
            window = (std::time::Instant::now(), 0, 0);
        }
    };
    eprintln!(
        "a recovered endpoint had a quarter of the picks again after {recovered_at:?} (shares per 200 ms: {shares:?})"
    );
}

#[test]
fn zone_preference_spills_over() {
    let lb =
        Arc::new(ZoneAwareLoadBalance::new(by_name("round-robin").unwrap()).with_min_healthy(2));
    let b = Balancer::new(lb);
    b.update(&[
        inst(1).with_zone("a"),
        inst(2).with_zone("a"),
        inst(3).with_zone("b"),
        inst(4),
    ]);
    let local = PickRequest::default().with_zone("a");
    let c = counts(&b, 100, &local);
    assert_eq!(c.len(), 2);
    assert_eq!(c.get(&key(1)), Some(&50));
    assert_eq!(c.get(&key(2)), Some(&50));
    // Zone b has one endpoint, fewer than 2: spill over to everything.
    let c = counts(&b, 400, &PickRequest::default().with_zone("b"));
    assert_eq!(c.len(), 4);
    // A retry that excluded one of zone a's endpoints leaves it short: spill over.
    let excluded = [key(1)];
    let c = counts(&b, 400, &local.excluding(&excluded));
    assert_eq!(c.len(), 3, "{c:?}");
    assert!(!c.contains_key(&key(1)));
    // The same by index.
    let c = counts(&b, 400, &local.excluding(&[0usize]));
    assert_eq!(c.len(), 3, "{c:?}");
    // Unknown zone or none: everything.
    assert_eq!(
        counts(&b, 400, &PickRequest::default().with_zone("zz")).len(),
        4
    );
    assert_eq!(counts(&b, 400, &PickRequest::default()).len(), 4);
    // With min_healthy 1, one exclusion in zone a keeps the caller local.
    let b1 = Balancer::new(Arc::new(ZoneAwareLoadBalance::new(
        by_name("random").unwrap(),
    )));
    b1.update(
        &b.endpoints()
            .iter()
            .map(|e| e.instance().clone())
            .collect::<Vec<_>>(),
    );
    let c = counts(&b1, 200, &local.excluding(&excluded));
    assert_eq!(c.len(), 1);
    assert_eq!(c.get(&key(2)), Some(&200));
}

#[test]
fn fill_one_by_one_fills_in_identity_order_up_to_capacity() {
    let b = Balancer::new(Arc::new(FillLoadBalance::new(3)));
    // Listed out of order; endpoint 2 has its own capacity.
    b.update(&[inst(3), inst(1), inst(2).with_metadata("capacity", "2")]);
    let mut sessions = Vec::new();
    let mut order = Vec::new();
    for _ in 0..8 {
        let p = b.pick(&PickRequest::default()).unwrap();
        order.push(p.endpoint().instance().host().to_owned());
        sessions.push(p);
    }
    assert_eq!(
        order,
        [
            "10.0.0.1", "10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2", "10.0.0.3", "10.0.0.3",
            "10.0.0.3"
        ]
    );
    // Everything full: the least full relative to capacity (all 100 %): any; then a
    // session on endpoint 1 ends and it is filled again first.
    assert!(b.pick(&PickRequest::default()).is_some());
    sessions.remove(0);
    assert_eq!(
        b.pick(&PickRequest::default()).unwrap().endpoint().key(),
        &key(1)
    );
}

#[test]
fn load_weighted_follows_spare_capacity() {
    let b = Balancer::new(Arc::new(LoadWeightedLoadBalance::new()));
    b.update(&[inst(1), inst(2), inst(3)]);
    let eps = b.endpoints();
    eps[0].stats().report_load(500); // half the spare capacity of an idle one
    eps[1].stats().report_load(1000); // full
    eps[2].stats().report_load(0);
    let c = counts(&b, 30_000, &PickRequest::default());
    let n1 = *c.get(&key(1)).unwrap() as f64;
    let n3 = *c.get(&key(3)).unwrap() as f64;
    assert!(!c.contains_key(&key(2)), "{c:?}");
    // Expected 10 000 and 20 000 (sd about 82).
    assert!(
        (n1 - 10_000.0).abs() < 500.0 && (n3 - 20_000.0).abs() < 500.0,
        "{c:?}"
    );
}

#[test]
fn affinity_hashes_are_sticky() {
    let source = Balancer::new(Arc::new(AffinityHashLoadBalance::source_address()));
    let account = Balancer::new(Arc::new(AffinityHashLoadBalance::account()));
    let members: Vec<Instance> = (1..=20).map(inst).collect();
    source.update(&members);
    account.update(&members);
    let mut spread = HashMap::new();
    for i in 0..2000u32 {
        let ip = IpAddr::from(i.to_be_bytes());
        let req = PickRequest::default().with_source(ip);
        let first = source.pick(&req).unwrap().endpoint().key().clone();
        assert_eq!(source.pick(&req).unwrap().endpoint().key(), &first);
        *spread.entry(first).or_insert(0) += 1;
        let id = format!("player-{i}");
        let req = PickRequest::default().with_key(id.as_bytes());
        let a = account.pick(&req).unwrap().endpoint().key().clone();
        assert_eq!(account.pick(&req).unwrap().endpoint().key(), &a);
    }
    // Sequential source addresses spread over every endpoint.
    assert_eq!(spread.len(), 20);
}

#[test]
fn xid_falls_back_to_random_and_honours_exclusions() {
    let b = Balancer::new(Arc::new(XidLoadBalance));
    b.update(&[inst(1), inst(2), inst(3)]);
    for xid in [
        "",
        "XID",
        "10.0.0.9:8091:1",
        "not an xid at all: 5",
        "10.0.0.1:x:1",
    ] {
        let c = counts(&b, 600, &PickRequest::xid(xid));
        assert_eq!(c.len(), 3, "{xid}: {c:?}");
    }
    // Named but excluded (its send just failed): another endpoint.
    let excluded = [key(2)];
    let c = counts(
        &b,
        300,
        &PickRequest::xid("10.0.0.2:8091:77").excluding(&excluded),
    );
    assert!(!c.contains_key(&key(2)));
    // A draining TC (weight 0) still receives its own transactions.
    b.update(&[inst(1), inst(2).with_weight(0), inst(3)]);
    let p = b.pick(&PickRequest::xid("10.0.0.2:8091:77")).unwrap();
    assert_eq!(p.endpoint().key(), &key(2));
    // ...but no new ones.
    let c = counts(&b, 600, &PickRequest::default());
    assert!(!c.contains_key(&key(2)), "{c:?}");
}

#[test]
fn every_algorithm_handles_empty_and_fully_excluded_lists() {
    for name in [
        "XID",
        "random",
        "rr",
        "ch",
        "ConsistentHashJava",
        "least-active",
        "p2c",
        "bounded-load",
        "jump",
        "AccountHash",
        "SourceHash",
        "fill",
        "load",
        "fewest-requests",
        "zone:rr",
    ] {
        let b = Balancer::new(by_name(name).unwrap());
        assert!(b.pick(&PickRequest::default()).is_none(), "{name}");
        b.update(&[inst(1), inst(2)]);
        let all = [key(1), key(2)];
        let req = PickRequest::xid("10.0.0.1:8091:1")
            .with_zone("a")
            .excluding(&all);
        assert!(b.pick(&req).is_none(), "{name}");
        let one = [key(1)];
        let req = PickRequest::xid("10.0.0.1:8091:1")
            .with_hash(9)
            .excluding(&one);
        for _ in 0..50 {
            assert_eq!(b.pick(&req).unwrap().endpoint().key(), &key(2), "{name}");
        }
        // Zero weights everywhere are treated as equal weights, not as "no endpoint".
        b.update(&[inst(1).with_weight(0), inst(2).with_weight(0)]);
        assert!(b.pick(&PickRequest::default()).is_some(), "{name}");
    }
}

/// Lookup by identity follows membership, and an endpoint found that way shares the
/// picker's stats (its in-flight count is the one least-active reads).
#[test]
fn endpoint_lookup_by_identity_follows_membership() {
    let b = Balancer::new(by_name("LeastActiveLoadBalance").unwrap());
    let all: Vec<Instance> = (1..=12)
        .map(|i| Instance::parse(&format!("10.3.0.{i}:8091")).unwrap())
        .collect();
    b.update(&all);
    let key = all[4].key().clone();
    let e = b.endpoint(&key).expect("a member");
    assert_eq!(e.key(), &key);
    let guard = e.begin();
    let same = b.snapshot().endpoint(&key).unwrap().stats().in_flight();
    assert_eq!(same, 1);
    drop(guard);
    b.update(&all[5..]);
    assert!(b.endpoint(&key).is_none());
    assert!(b.endpoint(all[7].key()).is_some());
    b.update(&[]);
    assert!(b.endpoint(all[7].key()).is_none());
}
