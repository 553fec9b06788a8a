//! Extreme weights (0, 1, `u32::MAX`) through every balancer of the factory's name
//! table: picks never panic, always return a member of the current
//! endpoint set, and an endpoint of weight 0 gets no traffic while another has weight
//! ("weight 0 = no new traffic, unless every endpoint has weight 0", `Endpoint::weight`),
//! except where a balancer documents otherwise:
//!
//! - `XID`: a request naming an endpoint in its XID goes to it even with weight 0 (the
//!   branch belongs to that TC); XIDs naming nobody fall back to weighted random.
//! - `ConsistentHashJava`: weights are ignored, as in Seata-Java's ring.
//!
//! A cluster whose every weight is 0 is treated as all-equal: picks still succeed.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use meshline_instance::{Instance, InstanceKey};
use meshline_loadbalance::{Balancer, PickRequest, by_name};

/// Every name of the factory's name table, read from the "unknown load balancer"
/// message (built from that table), so a balancer added later is covered too.
fn all_names() -> Vec<String> {
    let msg = match by_name("\u{1}no such balancer") {
        Ok(_) => panic!("a nonsense name was accepted"),
        Err(e) => e.to_string(),
    };
    let list = msg
        .split_once("use one of: ")
        .and_then(|(_, rest)| rest.split_once(" (case-insensitive"))
        .map(|(list, _)| list)
        .unwrap_or_else(|| panic!("unexpected message shape: {msg}"));
    let names: Vec<String> = list.split(", ").map(str::to_string).collect();
    assert!(names.len() >= 10, "{names:?}");
    names
}

/// Balancers that document weights as ignored (weight 0 may be picked): Seata's Java
/// ring, under Seata's name and meshline's, which has no weights in Java either.
const IGNORES_WEIGHTS: &[&str] = &["ConsistentHashLoadBalance", "ConsistentHashJava"];

fn cluster(weights: &[u32]) -> Vec<Instance> {
    weights
        .iter()
        .enumerate()
        .map(|(i, &w)| {
            Instance::parse(&format!("10.0.{}.{}:8091", i / 250, i % 250 + 1))
                .unwrap()
                .with_weight(w)
                .with_zone(if i % 2 == 0 { "z1" } else { "z2" })
        })
        .collect()
}

const MAX: u32 = u32::MAX;

/// Weight sets with 0, 1 and `u32::MAX` whose normalised weights stay small (weights
/// are divided by their gcd, so `[0, MAX, MAX]` is `[0, 1, 1]`).
const LIGHT_SETS: &[&[u32]] = &[
    &[1],
    &[0],
    &[MAX],
    &[0, 1],
    &[0, MAX],
    &[MAX, MAX, MAX],
    &[0, 0, 0],
    &[MAX, 0, MAX, 0, MAX],
    &[0, 0, 0, 0, 0, 0, 0, 1],
];

/// 0, 1 and `u32::MAX` together: a total weight of about 2^32, which hash rings cap at
/// their largest size (2^24 points, slow to build in a debug build, hence only once
/// per balancer).
const HEAVY_SETS: &[&[u32]] = &[&[0, 1, MAX]];

/// The request of pick number `i`: no routing fact, a key, a hash, a source address, a
/// zone, an XID naming a member of `named` (weighted ones only, see `XID`), or an XID
/// naming nobody.
fn request<'a>(i: usize, key: &'a [u8], xid: &'a str, zone: &'a str) -> PickRequest<'a> {
    match i % 7 {
        0 => PickRequest::default(),
        1 => PickRequest::default().with_key(key),
        2 => PickRequest::default().with_hash((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        3 => PickRequest::default().with_source(IpAddr::V4(Ipv4Addr::new(
            203,
            0,
            113,
            (i % 256) as u8,
        ))),
        4 => PickRequest::default().with_zone(zone),
        5 => PickRequest::xid(xid),
        _ => PickRequest::xid("not-an-xid").with_key(key),
    }
}

/// Picks `rounds` times from `balancer` over `instances`; returns every key picked.
fn pick_many(
    name: &str,
    balancer: &Balancer,
    instances: &[Instance],
    rounds: usize,
) -> Vec<InstanceKey> {
    let members: HashSet<&InstanceKey> = instances.iter().map(Instance::key).collect();
    let weighted: Vec<&Instance> = instances.iter().filter(|i| i.weight() > 0).collect();
    let mut held = Vec::new();
    let mut out = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let key = (i as u64).to_le_bytes();
        // XIDs name a weighted member when there is one (a weight-0 TC named by its
        // XID is chosen on purpose, tested separately).
        let named = weighted
            .get(i % weighted.len().max(1))
            .copied()
            .unwrap_or(&instances[0]);
        let xid = format!("{}:{}:{}", named.host(), named.port(), 1000 + i);
        let zone = if i % 2 == 0 { "z1" } else { "z2" };
        let req = request(i, &key, &xid, zone);
        let picked = balancer
            .pick(&req)
            .unwrap_or_else(|| panic!("{name}: no pick from {} members", instances.len()));
        let k = picked.endpoint().key().clone();
        assert!(members.contains(&k), "{name}: picked {k}, not a member");
        out.push(k);
        match i % 3 {
            0 => picked.success(Duration::from_millis((i % 50) as u64)),
            1 => held.push(picked), // load builds up for load-aware balancers
            _ => picked.failure(),
        }
        if held.len() > 16 {
            held.clear();
        }
    }
    out
}

#[test]
fn every_balancer_survives_extreme_weights_and_stays_within_the_set() {
    for name in all_names() {
        for spelled in [name.clone(), format!("zone:{name}")] {
            let balancer = Balancer::new(by_name(&spelled).unwrap());
            let heavy: &[&[u32]] = if spelled == name { HEAVY_SETS } else { &[] };
            for weights in LIGHT_SETS.iter().chain(heavy) {
                let instances = cluster(weights);
                balancer.update(&instances);
                let picked = pick_many(&spelled, &balancer, &instances, 400);
                let some_weighted = weights.iter().any(|&w| w > 0);
                if some_weighted && !IGNORES_WEIGHTS.contains(&name.as_str()) {
                    let zero: HashSet<&InstanceKey> = instances
                        .iter()
                        .filter(|i| i.weight() == 0)
                        .map(Instance::key)
                        .collect();
                    let bad: Vec<&InstanceKey> =
                        picked.iter().filter(|k| zero.contains(k)).collect();
                    assert!(
                        bad.is_empty(),
                        "{spelled} with weights {weights:?} picked a weight-0 endpoint {} times ({})",
                        bad.len(),
                        bad[0]
                    );
                }
            }
            // Membership changes between the extremes, on one balancer.
            for weights in LIGHT_SETS.iter().rev() {
                let instances = cluster(weights);
                balancer.update(&instances);
                pick_many(&spelled, &balancer, &instances, 50);
            }
            balancer.update(&[]);
            assert!(
                balancer.pick(&PickRequest::default()).is_none(),
                "{spelled}"
            );
        }
    }
}

/// `u32::MAX` against 1: the heavy endpoint takes (nearly) all weighted-random traffic,
/// and no total overflows (a sum of `u32::MAX` weights in `u32` would wrap).
#[test]
fn max_weights_do_not_overflow_weighted_random() {
    let instances = cluster(&[MAX, MAX, MAX, 1]);
    let balancer = Balancer::new(by_name("RandomLoadBalance").unwrap());
    balancer.update(&instances);
    let mut light = 0;
    for _ in 0..10_000 {
        let p = balancer.pick(&PickRequest::default()).unwrap();
        if p.endpoint().key() == instances[3].key() {
            light += 1;
        }
    }
    assert!(
        light <= 2,
        "weight 1 of 3 * u32::MAX + 1 picked {light} times in 10,000"
    );
}

/// `XID` documents that an XID naming an endpoint routes to it even at weight 0.
#[test]
fn xid_routes_to_the_named_endpoint_even_at_weight_0() {
    let instances = cluster(&[0, MAX, 1]);
    let balancer = Balancer::new(by_name("XID").unwrap());
    balancer.update(&instances);
    let xid = format!("{}:{}:42", instances[0].host(), instances[0].port());
    let p = balancer.pick(&PickRequest::xid(&xid)).unwrap();
    assert_eq!(p.endpoint().key(), instances[0].key());
}
