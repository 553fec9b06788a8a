//! Pick and rebuild costs of every algorithm, with pingora-ketama as a peer measured in
//! the same run. See BENCHMARKS.md for how to run it and the numbers.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use meshline_loadbalance::{
    Balancer, ConsistentHashLoadBalance, Endpoint, InFlightGuard, LoadBalance, PickRequest, Picker,
    StatsRegistry, by_name,
};
use pingora_ketama::{Bucket, Continuum};

#[path = "../tests/common/mod.rs"]
mod common;
use common::{InTurn, addr, instances, requests, xids};

const SIZES: [usize; 4] = [3, 10, 100, 1000];
const REBUILD_SIZES: [usize; 4] = [10, 100, 1000, 10_000];

/// (bench label, factory name, weighted membership, least-active scan width cap)
const ALGORITHMS: &[(&str, &str, bool, Option<&str>)] = &[
    ("XID", "XID", false, None),
    ("Random", "RandomLoadBalance", false, None),
    ("RandomWeighted", "RandomLoadBalance", true, None),
    ("RoundRobin", "RoundRobinLoadBalance", false, None),
    ("RoundRobinWeighted", "RoundRobinLoadBalance", true, None),
    ("ConsistentHash", "ConsistentHash", false, None),
    ("ConsistentHashJava", "ConsistentHashJava", false, None),
    ("LeastActive", "LeastActiveLoadBalance", false, None),
    ("LeastActiveWeighted", "LeastActiveLoadBalance", true, None),
    (
        "LeastActive-avx2",
        "LeastActiveLoadBalance",
        false,
        Some("avx2"),
    ),
    (
        "LeastActive-scalar",
        "LeastActiveLoadBalance",
        false,
        Some("scalar"),
    ),
    ("P2C", "P2C", false, None),
    ("BoundedLoad", "BoundedLoad", false, None),
    ("JumpHash", "JumpHash", false, None),
    ("AccountHash", "AccountHash", false, None),
    ("SourceHash", "SourceHash", false, None),
    ("FillOneByOne", "FillOneByOne", false, None),
    ("LoadWeighted", "LoadWeighted", false, None),
    ("FewestRequests", "FewestRequests", false, None),
    ("ZoneRoundRobin", "zone:RoundRobinLoadBalance", false, None),
];

/// A balancer of `name` over `n` members of the default weight.
fn uniform(name: &str, n: usize) -> Balancer {
    let balancer = Balancer::new(by_name(name).unwrap());
    balancer.update(&instances(n, false));
    balancer
}

fn bench_picks(c: &mut Criterion) {
    let mut group = c.benchmark_group("pick");
    for &n in &SIZES {
        let keys = xids(n);
        let requests = requests(&keys);
        for &(label, name, weighted, scan) in ALGORITHMS {
            let balancer = Balancer::new(by_name(name).unwrap());
            if let Some(scan) = scan {
                // SAFETY: criterion runs benches on this one thread; nothing else reads
                // the environment meanwhile.
                unsafe { std::env::set_var("MESHLINE_LB_SCAN", scan) };
            }
            balancer.update(&instances(n, weighted));
            if scan.is_some() {
                // SAFETY: as above.
                unsafe { std::env::remove_var("MESHLINE_LB_SCAN") };
            }
            // Some load, so least-active and P2C compare real counts.
            let endpoints = balancer.endpoints();
            let held: Vec<InFlightGuard> = (0..n * 2)
                .map(|i| endpoints[(i * 7919) % n].begin())
                .collect();
            let picker: Arc<dyn Picker> = balancer.snapshot().picker().clone();
            let mut request = InTurn::new(&requests);
            group.bench_with_input(BenchmarkId::new(label, n), &n, |b, _| {
                b.iter(|| black_box(picker.pick(black_box(request.step()))))
            });
            drop(held);
        }

        // The Java ring with each key's SHA-256 hash prepared once (per transaction),
        // as `PickRequest::with_java_hash` allows: the lookup alone.
        let prepared: Vec<PickRequest<'_>> = requests
            .iter()
            .zip(&keys)
            .map(|(r, k)| r.with_java_hash(meshline_loadbalance::hash::java_hash(k.as_bytes())))
            .collect();
        let balancer = uniform("ConsistentHashJava", n);
        let picker: Arc<dyn Picker> = balancer.snapshot().picker().clone();
        let mut request = InTurn::new(&prepared);
        group.bench_with_input(
            BenchmarkId::new("ConsistentHashJava-prepared", n),
            &n,
            |b, _| b.iter(|| black_box(picker.pick(black_box(request.step())))),
        );

        // The peer: pingora-ketama's lookup over the same keys.
        let buckets: Vec<Bucket> = (0..n).map(|i| Bucket::new(addr(i), 1)).collect();
        let continuum = Continuum::new(&buckets);
        let mut key = InTurn::new(&keys);
        group.bench_with_input(BenchmarkId::new("pingora-ketama", n), &n, |b, _| {
            b.iter(|| black_box(continuum.node(black_box(key.step().as_bytes()))))
        });
    }
    group.finish();

    // The key hashes alone, on the same ~33-byte XIDs: SHA-256 over key||key is what
    // Java compatibility costs per hashed pick.
    let mut group = c.benchmark_group("key_hash");
    let keys = xids(100);
    let mut key = InTurn::new(&keys);
    group.bench_function("java_sha256", |b| {
        b.iter(|| {
            black_box(meshline_loadbalance::hash::java_hash(black_box(
                key.step().as_bytes(),
            )))
        })
    });
    group.bench_function("xxh3", |b| {
        b.iter(|| {
            black_box(meshline_loadbalance::hash::key_hash(black_box(
                key.step().as_bytes(),
            )))
        })
    });
    group.finish();

    // The whole per-request path: load the picker, pick, count in flight, drop.
    let mut group = c.benchmark_group("balancer_pick");
    for name in [
        "RandomLoadBalance",
        "RoundRobinLoadBalance",
        "P2C",
        "ConsistentHash",
    ] {
        let balancer = uniform(name, 100);
        let mut key = InTurn::new(&keys);
        group.bench_with_input(BenchmarkId::new(name, 100), &100, |b, _| {
            b.iter(|| black_box(balancer.pick(&PickRequest::xid(key.step()))))
        });
    }
    group.finish();

    // The same path as the rpc-client takes it: pick, split the result into the endpoint
    // and the guard (`Picked::into_parts`), read the endpoint's key, drop both.
    let mut group = c.benchmark_group("balancer_pick_parts");
    for name in ["RandomLoadBalance", "RoundRobinLoadBalance"] {
        let balancer = uniform(name, 100);
        let mut key = InTurn::new(&keys);
        group.bench_with_input(BenchmarkId::new(name, 100), &100, |b, _| {
            b.iter(|| {
                let picked = balancer.pick(&PickRequest::xid(key.step())).unwrap();
                let (endpoint, guard) = picked.into_parts();
                black_box(endpoint.key());
                guard.cancel();
            })
        });
    }
    group.finish();
}

fn bench_rebuilds(c: &mut Criterion) {
    let mut group = c.benchmark_group("rebuild");
    group.sample_size(10);
    for &n in &REBUILD_SIZES {
        let registry = StatsRegistry::new();
        let uniform: Vec<Endpoint> = registry.endpoints(&instances(n, false));
        let weighted: Vec<Endpoint> = registry.endpoints(&instances(n, true));
        let cases: [(&str, Arc<dyn LoadBalance>, &[Endpoint]); 6] = [
            (
                "ConsistentHash",
                Arc::new(ConsistentHashLoadBalance::new()),
                &uniform,
            ),
            (
                "ConsistentHashJava",
                by_name("ConsistentHashJava").unwrap(),
                &uniform,
            ),
            ("BoundedLoad", by_name("BoundedLoad").unwrap(), &uniform),
            (
                "RandomWeighted",
                by_name("RandomLoadBalance").unwrap(),
                &weighted,
            ),
            (
                "RoundRobinWeighted",
                by_name("RoundRobinLoadBalance").unwrap(),
                &weighted,
            ),
            (
                "LeastActive",
                by_name("LeastActiveLoadBalance").unwrap(),
                &uniform,
            ),
        ];
        for (label, lb, endpoints) in cases {
            group.bench_with_input(BenchmarkId::new(label, n), &n, |b, _| {
                b.iter(|| black_box(lb.build(black_box(endpoints))))
            });
        }
        let buckets: Vec<Bucket> = (0..n).map(|i| Bucket::new(addr(i), 1)).collect();
        group.bench_with_input(BenchmarkId::new("pingora-ketama", n), &n, |b, _| {
            b.iter(|| black_box(Continuum::new(black_box(&buckets))))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_picks, bench_rebuilds);
criterion_main!(benches);
