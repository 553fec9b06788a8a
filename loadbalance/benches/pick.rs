//! Pick and rebuild costs of every algorithm, with pingora-ketama as a peer measured in
//! the same run. See BENCHMARKS.md for how to run it and the numbers.

use std::hint::black_box;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use meshline_instance::Instance;
use meshline_loadbalance::{
    Balancer, ConsistentHashLoadBalance, Endpoint, InFlightGuard, LoadBalance, PickRequest, Picker,
    StatsRegistry, by_name,
};
use pingora_ketama::{Bucket, Continuum};

const SIZES: [usize; 4] = [3, 10, 100, 1000];
const REBUILD_SIZES: [usize; 4] = [10, 100, 1000, 10_000];
const KEYS: usize = 1024;

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

fn addr(i: usize) -> SocketAddr {
    SocketAddr::from(([10, (i >> 16) as u8, (i >> 8) as u8, i as u8], 8091))
}

fn instances(n: usize, weighted: bool) -> Vec<Instance> {
    (0..n)
        .map(|i| {
            let inst = Instance::parse(&addr(i).to_string())
                .unwrap()
                .with_zone(["a", "b", "c"][i % 3]);
            if weighted {
                inst.with_weight(1 + (i % 5) as u32)
            } else {
                inst
            }
        })
        .collect()
}

/// Seata-style XIDs naming endpoints of the cluster (so XID benches the hit path) and
/// doubling as 30-odd-byte hash keys.
fn xids(n: usize) -> Vec<String> {
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

fn bench_picks(c: &mut Criterion) {
    let mut group = c.benchmark_group("pick");
    for &n in &SIZES {
        let keys = xids(n);
        let requests: Vec<PickRequest<'_>> = keys
            .iter()
            .enumerate()
            .map(|(k, x)| {
                PickRequest::xid(x)
                    .with_source(IpAddr::from([192, 168, (k >> 8) as u8, k as u8]))
                    .with_zone("b")
            })
            .collect();
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
            let mut i = 0usize;
            group.bench_with_input(BenchmarkId::new(label, n), &n, |b, _| {
                b.iter(|| {
                    i = (i + 1) & (KEYS - 1);
                    black_box(picker.pick(black_box(&requests[i])))
                })
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
        let balancer = Balancer::new(by_name("ConsistentHashJava").unwrap());
        balancer.update(&instances(n, false));
        let picker: Arc<dyn Picker> = balancer.snapshot().picker().clone();
        let mut i = 0usize;
        group.bench_with_input(
            BenchmarkId::new("ConsistentHashJava-prepared", n),
            &n,
            |b, _| {
                b.iter(|| {
                    i = (i + 1) & (KEYS - 1);
                    black_box(picker.pick(black_box(&prepared[i])))
                })
            },
        );

        // The peer: pingora-ketama's lookup over the same keys.
        let buckets: Vec<Bucket> = (0..n).map(|i| Bucket::new(addr(i), 1)).collect();
        let continuum = Continuum::new(&buckets);
        let mut i = 0usize;
        group.bench_with_input(BenchmarkId::new("pingora-ketama", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) & (KEYS - 1);
                black_box(continuum.node(black_box(keys[i].as_bytes())))
            })
        });
    }
    group.finish();

    // The key hashes alone, on the same ~33-byte XIDs: SHA-256 over key||key is what
    // Java compatibility costs per hashed pick.
    let mut group = c.benchmark_group("key_hash");
    let keys = xids(100);
    let mut i = 0usize;
    group.bench_function("java_sha256", |b| {
        b.iter(|| {
            i = (i + 1) & (KEYS - 1);
            black_box(meshline_loadbalance::hash::java_hash(black_box(
                keys[i].as_bytes(),
            )))
        })
    });
    group.bench_function("xxh3", |b| {
        b.iter(|| {
            i = (i + 1) & (KEYS - 1);
            black_box(meshline_loadbalance::hash::key_hash(black_box(
                keys[i].as_bytes(),
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
        let balancer = Balancer::new(by_name(name).unwrap());
        balancer.update(&instances(100, false));
        let keys = xids(100);
        let mut i = 0usize;
        group.bench_with_input(BenchmarkId::new(name, 100), &100, |b, _| {
            b.iter(|| {
                i = (i + 1) & (KEYS - 1);
                black_box(balancer.pick(&PickRequest::xid(&keys[i])))
            })
        });
    }
    group.finish();

    // The same path as the rpc-client takes it: pick, split the result into the endpoint
    // and the guard (`Picked::into_parts`), read the endpoint's key, drop both.
    let mut group = c.benchmark_group("balancer_pick_parts");
    for name in ["RandomLoadBalance", "RoundRobinLoadBalance"] {
        let balancer = Balancer::new(by_name(name).unwrap());
        balancer.update(&instances(100, false));
        let keys = xids(100);
        let mut i = 0usize;
        group.bench_with_input(BenchmarkId::new(name, 100), &100, |b, _| {
            b.iter(|| {
                i = (i + 1) & (KEYS - 1);
                let picked = balancer.pick(&PickRequest::xid(&keys[i])).unwrap();
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
