//! Property tests: distributions, consistency under membership change, bounded-load
//! caps, XID routing, and exact in-flight accounting.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use meshline_instance::{Instance, InstanceKey};
use meshline_loadbalance::{
    Balancer, BoundedLoadLoadBalance, ConsistentHashLoadBalance, InFlightGuard,
    JumpHashLoadBalance, LeastActiveLoadBalance, LoadBalance, PickRequest, Picked,
    RandomLoadBalance, RoundRobinLoadBalance, XidLoadBalance, bounded_cap, by_name,
};
use proptest::prelude::*;

fn instance(i: usize) -> Instance {
    Instance::parse(&format!(
        "10.{}.{}.{}:8091",
        (i >> 16) & 255,
        (i >> 8) & 255,
        i & 255
    ))
    .unwrap()
}

fn cluster(weights: &[u32]) -> Vec<Instance> {
    weights
        .iter()
        .enumerate()
        .map(|(i, &w)| instance(i + 1).with_weight(w))
        .collect()
}

/// Counts of `picks` picks per endpoint key.
fn histogram(
    balancer: &Balancer,
    picks: usize,
    req: impl Fn(usize) -> PickRequest<'static>,
) -> HashMap<InstanceKey, usize> {
    let mut h = HashMap::new();
    for i in 0..picks {
        let p = balancer.pick(&req(i)).expect("an endpoint");
        *h.entry(p.endpoint().key().clone()).or_insert(0) += 1;
    }
    h
}

/// Every endpoint's count within 6 standard deviations of `picks × w / W`.
fn assert_proportional(weights: &[u32], counts: &HashMap<InstanceKey, usize>, picks: usize) {
    let total: f64 = weights.iter().map(|&w| f64::from(w)).sum();
    for (i, &w) in weights.iter().enumerate() {
        let p = f64::from(w) / total;
        let expected = picks as f64 * p;
        let sd = (picks as f64 * p * (1.0 - p)).sqrt();
        let got = *counts.get(instance(i + 1).key()).unwrap_or(&0) as f64;
        assert!(
            (got - expected).abs() <= 6.0 * sd + 1.0,
            "endpoint {i} weight {w}: {got} picks, expected {expected:.0} ± {:.0}",
            6.0 * sd
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_follows_weights(weights in prop::collection::vec(1u32..10, 1..16), uniform in any::<bool>()) {
        let weights: Vec<u32> = if uniform { vec![3; weights.len()] } else { weights };
        let b = Balancer::new(Arc::new(RandomLoadBalance));
        b.update(&cluster(&weights));
        let picks = 20_000;
        assert_proportional(&weights, &histogram(&b, picks, |_| PickRequest::default()), picks);
    }

    #[test]
    fn round_robin_is_exact_per_cycle(weights in prop::collection::vec(1u32..8, 1..12), uniform in any::<bool>(), cycles in 1usize..4) {
        let weights: Vec<u32> = if uniform { vec![2; weights.len()] } else { weights };
        let g = weights.iter().copied().fold(0, gcd);
        let cycle: usize = weights.iter().map(|&w| (w / g) as usize).sum();
        let b = Balancer::new(Arc::new(RoundRobinLoadBalance::new()));
        b.update(&cluster(&weights));
        let counts = histogram(&b, cycle * cycles, |_| PickRequest::default());
        for (i, &w) in weights.iter().enumerate() {
            prop_assert_eq!(counts.get(instance(i + 1).key()).copied().unwrap_or(0), (w / g) as usize * cycles);
        }
        if uniform {
            // Seata's order: list order from the sequence's current position.
            let first = b.pick(&PickRequest::default()).unwrap().index();
            for k in 1..weights.len() * 2 {
                prop_assert_eq!(b.pick(&PickRequest::default()).unwrap().index(), (first + k) % weights.len());
            }
        }
    }

    #[test]
    fn round_robin_sequence_survives_rebuilds(n in 2usize..10) {
        let b = Balancer::new(Arc::new(RoundRobinLoadBalance::new()));
        b.update(&cluster(&vec![1; n]));
        let first = b.pick(&PickRequest::default()).unwrap().index();
        b.update(&cluster(&vec![1; n]));
        prop_assert_eq!(b.pick(&PickRequest::default()).unwrap().index(), (first + 1) % n);
    }

    #[test]
    fn consistent_hash_moves_about_one_nth(n in 3usize..40, weighted in any::<bool>(), seed in any::<u64>()) {
        let weights: Vec<u32> = (0..=n)
            .map(|i| if weighted { 1 + (i as u32 * 7 + seed as u32) % 4 } else { 1 })
            .collect();
        // (algorithm, whether the moved fraction is checked against the joiner's share).
        // Java's ring has only 10 points per endpoint, so its share is far noisier; it
        // gets the exact structural check only.
        let cases: [(Arc<dyn LoadBalance>, bool); 4] = [
            (Arc::new(ConsistentHashLoadBalance::new()), true),
            (Arc::new(ConsistentHashLoadBalance::java(10)), false),
            (by_name("AccountHash").unwrap(), true),
            (Arc::new(BoundedLoadLoadBalance::new()), true),
        ];
        for (lb, check_share) in cases {
            let small = Balancer::new(lb.clone());
            small.update(&cluster(&weights[..n]));
            let big = Balancer::new(lb.clone());
            big.update(&cluster(&weights));
            let joined = instance(n + 1);
            let keys = 4000u64;
            let mut moved = 0u64;
            for k in 0..keys {
                let key = format!("{seed:x}-{k}");
                let req = PickRequest::default().with_key(key.as_bytes());
                let a = small.pick(&req).unwrap();
                let b = big.pick(&req).unwrap();
                if a.endpoint().key() != b.endpoint().key() {
                    moved += 1;
                    // A key only ever moves to the endpoint that joined; read backwards,
                    // only the leaver's keys move when it leaves.
                    prop_assert_eq!(b.endpoint().key(), joined.key(), "{}", lb.name());
                }
            }
            if check_share {
                // Two-sided: the joiner takes about its share of the keys, neither much
                // more (keys moving between old endpoints) nor much less (a ring that
                // barely places it). Its share of the ring differs from its share of
                // the weight by about 1/sqrt(160 w) (8% for weight 1: 160 points), so
                // +-50% is over six standard deviations of that; plus four standard
                // deviations of sampling 4000 keys.
                let total: f64 = weights.iter().map(|&w| f64::from(w)).sum();
                let share = f64::from(weights[n]) / total;
                let sampling = 4.0 * (share * (1.0 - share) / keys as f64).sqrt();
                let frac = moved as f64 / keys as f64;
                prop_assert!(
                    frac <= share * 1.5 + sampling && frac >= share * 0.5 - sampling,
                    "{}: {frac:.4} of keys moved, joiner's share {share:.4}", lb.name()
                );
            }
        }
    }

    #[test]
    fn jump_hash_moves_exactly_to_the_new_bucket(n in 1usize..60, seed in any::<u64>()) {
        let small = Balancer::new(Arc::new(JumpHashLoadBalance));
        small.update(&cluster(&vec![1; n]));
        let big = Balancer::new(Arc::new(JumpHashLoadBalance));
        big.update(&cluster(&vec![1; n + 1]));
        // The keys go through a finaliser so they behave as independent draws, which the
        // binomial bound below assumes: an arithmetic progression of keys stays one
        // through jump's affine step, and for some (n, seed) pairs lands on the new
        // bucket several sigma too seldom.
        let keys = 20_000u64;
        let mut moved = 0u64;
        for k in 0..keys {
            let req = PickRequest::default().with_hash(meshline_loadbalance::hash::mix64(seed.wrapping_add(k)));
            let a = small.pick(&req).unwrap();
            let b = big.pick(&req).unwrap();
            if a.index() != b.index() {
                moved += 1;
                prop_assert_eq!(b.index(), n);
            }
        }
        let share = 1.0 / (n as f64 + 1.0);
        let frac = moved as f64 / keys as f64;
        // Five sigma: about one false alarm in 70 000 runs of this test's 24 cases, and
        // still within a quarter of the share (n < 60), so moving half or twice the
        // keys it should fails.
        prop_assert!((frac - share).abs() <= 5.0 * (share * (1.0 - share) / keys as f64).sqrt() + 1e-9,
            "{frac} of the keys moved, the new bucket's share is {share}");
    }

    #[test]
    fn bounded_load_never_exceeds_the_cap(
        weights in prop::collection::vec(1u32..5, 1..12),
        factor in prop::sample::select(vec![1.0f64, 1.1, 1.25, 2.0]),
        ops in prop::collection::vec((any::<u16>(), 0u8..4), 1..600),
    ) {
        let lb = BoundedLoadLoadBalance::new().with_factor(factor).unwrap();
        let b = Balancer::new(Arc::new(lb));
        b.update(&cluster(&weights));
        let total_weight: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let g = weights.iter().copied().fold(0, gcd);
        let mut held: Vec<Picked> = Vec::new();
        for (key, op) in ops {
            if op == 0 && !held.is_empty() {
                // A request ends.
                let i = usize::from(key) % held.len();
                drop(held.swap_remove(i));
                continue;
            }
            // A few hot keys, as sticky game sessions produce.
            let k = [u64::from(key % 4), u64::from(key)][usize::from(op % 2)];
            let p = b.pick(&PickRequest::default().with_hash(k)).unwrap();
            let total = b.stats_registry().group().in_flight();
            let w = p.endpoint().weight();
            let cap = bounded_cap(factor, w / g, total_weight / u64::from(g), total);
            prop_assert!(p.endpoint().stats().in_flight() <= cap,
                "{} in flight > cap {cap} (total {total}, c {factor})", p.endpoint().stats().in_flight());
            held.push(p);
        }
    }

    #[test]
    fn xid_routes_to_the_named_endpoint(
        v4 in prop::collection::btree_set(any::<u32>(), 1..8),
        v6 in prop::collection::btree_set(any::<u128>(), 1..8),
        port in 1u16..,
        tx in any::<u64>(),
    ) {
        let mut instances: Vec<Instance> = Vec::new();
        for ip in &v4 {
            instances.push(Instance::parse(&SocketAddr::new(IpAddr::V4(Ipv4Addr::from(*ip)), port).to_string()).unwrap());
        }
        for ip in &v6 {
            let ip = Ipv6Addr::from(*ip);
            if ip.to_ipv4_mapped().is_some() { continue; }
            instances.push(Instance::parse(&SocketAddr::new(IpAddr::V6(ip), port).to_string()).unwrap());
        }
        let b = Balancer::new(Arc::new(XidLoadBalance));
        b.update(&instances);
        let endpoints = b.endpoints();
        for ep in endpoints.iter() {
            let sa = ep.instance().socket_addr().unwrap();
            // Java's form (IPv6 unbracketed, uncompressed), Rust's form, bracketed form.
            for xid in [
                format!("{}:{tx}", ep.instance().to_java_string()),
                format!("{sa}:{tx}"),
                format!("{}:{}:{tx}", sa.ip(), port),
            ] {
                let p = b.pick(&PickRequest::xid(&xid)).unwrap();
                prop_assert_eq!(p.endpoint().key(), ep.key(), "{}", xid);
            }
        }
    }

    #[test]
    fn least_active_counts_return_to_zero(ops in prop::collection::vec((0u8..8, any::<u8>()), 1..400), weighted in any::<bool>(), big in any::<bool>()) {
        // 6 endpoints: the one-by-one scan; 70: the vector scan over two board pages.
        let n = if big { 70 } else { 6 };
        let weights: Vec<u32> = (0..n).map(|i| if weighted { 1 + i % 3 } else { 1 }).collect();
        let b = Balancer::new(Arc::new(LeastActiveLoadBalance::new()));
        b.update(&cluster(&weights));
        let mut held: Vec<InFlightGuard> = Vec::new();
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        for (op, arg) in ops {
            // The least-active choice is exact when nothing runs concurrently.
            let before: Vec<(u64, u32)> = b.endpoints().iter().map(|e| (e.stats().in_flight(), weights[endpoint_no(e.key())])).collect();
            let p = b.pick(&PickRequest::default()).unwrap();
            let (load, w) = before[p.index()];
            for &(l, wl) in &before {
                prop_assert!(u64::from(wl) * load <= u64::from(w) * l,
                    "picked {load}/{w} while {l}/{wl} was available");
            }
            match op {
                0 => p.success(Duration::from_millis(u64::from(arg))),
                1 => p.failure(),
                2 => drop(p),
                // Held for a while, then ended in any way.
                3 | 4 => held.push(p.into_parts().1),
                5 => {
                    // A future that owns the guard is polled once, then dropped
                    // mid-flight (a cancelled call).
                    let mut fut = pin!(call(p));
                    prop_assert!(fut.as_mut().poll(&mut cx).is_pending());
                }
                6 => {
                    // The guard ends on another thread.
                    let (_, g) = p.into_parts();
                    std::thread::spawn(move || g.success(Duration::from_micros(5))).join().unwrap();
                }
                _ => {
                    // Membership churn while requests are in flight.
                    b.update(&cluster(&weights[..3]));
                    b.update(&cluster(&weights));
                    drop(p);
                }
            }
            if arg % 3 == 0 && !held.is_empty() {
                let g = held.swap_remove(usize::from(arg) % held.len());
                match arg % 4 { 0 => g.failure(), 1 => g.success(Duration::from_millis(1)), _ => g.cancel() }
            }
        }
        drop(held);
        for e in b.endpoints().iter() {
            prop_assert_eq!(e.stats().in_flight(), 0);
        }
        prop_assert_eq!(b.stats_registry().group().in_flight(), 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Names, XIDs and keys from outside never panic; XID picks always succeed (they fall
    /// back to random).
    #[test]
    fn arbitrary_input_never_panics(text in "\\PC{0,64}", bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = by_name(&text);
        let _ = meshline_loadbalance::parse_xid_address(&text);
        for name in ["XID", "ConsistentHashJava", "ConsistentHashLoadBalance", "jump", "BoundedLoad", "zone:xid"] {
            let b = Balancer::new(by_name(name).unwrap());
            b.update(&cluster(&[1, 2, 3]));
            prop_assert!(b.pick(&PickRequest::xid(&text).with_zone(&text)).is_some());
            prop_assert!(b.pick(&PickRequest::default().with_key(&bytes)).is_some());
        }
    }
}

/// Never completes: stands for a response that has not arrived.
async fn call(picked: Picked) {
    std::future::pending::<()>().await;
    picked.success(Duration::from_millis(1));
}

fn endpoint_no(key: &InstanceKey) -> usize {
    let last: usize = key.host.rsplit('.').next().unwrap().parse().unwrap();
    last - 1
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}
