//! The cluster and the keys the balancer's benches time and its tests check, in one
//! place: the benches include this file with `#[path]`, so the membership a test proves
//! allocation-free is the one a bench measures.

// Each bench or test target uses only part of these fixtures.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};

use meshline_instance::Instance;
use meshline_loadbalance::PickRequest;

/// How many keys a bench cycles through: a power of two, so the next index is a mask.
pub const KEYS: usize = 1024;

/// Every algorithm the factory names, once each (the Java ring by its plain alias),
/// zone-aware over a load-blind and a load-aware one: what the allocation test checks
/// and the membership bench times.
pub const ALGORITHMS: &[&str] = &[
    "XID",
    "RandomLoadBalance",
    "RoundRobinLoadBalance",
    "ConsistentHash",
    "ConsistentHashJava",
    "LeastActiveLoadBalance",
    "P2C",
    "BoundedLoad",
    "JumpHash",
    "AccountHash",
    "RoleHash",
    "SourceHash",
    "FillOneByOne",
    "LoadWeighted",
    "FewestRequests",
    "zone:RoundRobinLoadBalance",
    "zone:P2C",
];

/// The address of member `i`: `10.x.y.z:8091`, distinct for every `i` below 2^24.
pub fn addr(i: usize) -> SocketAddr {
    SocketAddr::from(([10, (i >> 16) as u8, (i >> 8) as u8, i as u8], 8091))
}

/// Member `i`, in zone a, b or c by turn; weighted 1 to 5 by turn when `weighted`, else
/// of the default weight.
pub fn instance(i: usize, weighted: bool) -> Instance {
    let inst = Instance::parse(&addr(i).to_string())
        .unwrap()
        .with_zone(["a", "b", "c"][i % 3]);
    if weighted {
        inst.with_weight(1 + (i % 5) as u32)
    } else {
        inst
    }
}

/// Members 0 to `n - 1`.
pub fn instances(n: usize, weighted: bool) -> Vec<Instance> {
    (0..n).map(|i| instance(i, weighted)).collect()
}

/// [`KEYS`] Seata-style XIDs naming members of an `n`-member cluster (so XID benches the
/// hit path), doubling as 30-odd-byte hash keys.
pub fn xids(n: usize) -> Vec<String> {
    (0..KEYS)
        .map(|k| {
            format!(
                "{}:{}",
                addr(k % n),
                2_612_341_069_705_662_465u64 + k as u64
            )
        })
        .collect()
}

/// One request a key: by XID, from a source address of its own, preferring zone b, so
/// every algorithm finds what it hashes or prefers.
pub fn requests(keys: &[String]) -> Vec<PickRequest<'_>> {
    keys.iter()
        .enumerate()
        .map(|(k, x)| {
            PickRequest::xid(x)
                .with_source(IpAddr::from([192, 168, (k >> 8) as u8, k as u8]))
                .with_zone("b")
        })
        .collect()
}

/// Hands out [`KEYS`] items in turn, one a bench iteration, wrapping around: the index
/// is a mask, so the stepping costs next to nothing beside what is measured.
pub struct InTurn<'a, T> {
    items: &'a [T],
    i: usize,
}

impl<'a, T> InTurn<'a, T> {
    pub fn new(items: &'a [T]) -> Self {
        assert_eq!(items.len(), KEYS, "the mask wraps at KEYS");
        Self { items, i: 0 }
    }

    /// The next item (the first call gives the second: the benches always stepped first).
    #[inline(always)]
    pub fn step(&mut self) -> &'a T {
        self.i = (self.i + 1) & (KEYS - 1);
        &self.items[self.i]
    }
}
