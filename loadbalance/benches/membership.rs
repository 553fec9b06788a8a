//! The client's side of the balancer, as the rpc-client uses it since the membership
//! became one path:
//!
//! - `payload_pick`: the whole per-request path of a `Balancer<T>` whose endpoints carry
//!   what to send through (here an `Arc` standing for the client's `AliveEndpoint`):
//!   load the picker, pick, count in flight, read the payload, end the guard. Every
//!   algorithm that ignores load, at 100 endpoints (target < 30 ns).
//! - `apply_10k`: 10 000 endpoints applied as edits (`Balancer::apply`): the full apply
//!   of a fresh balancer (target < 10 ms), and one change (one endpoint leaving or
//!   joining; target < 1 ms), for every algorithm.
//!
//! ```text
//! cargo bench -p meshline-loadbalance --bench membership -- --warm-up-time 1 --measurement-time 3
//! ```

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use meshline_loadbalance::{Balancer, Edit, by_name};

#[path = "../tests/common/mod.rs"]
mod common;
use common::{ALGORITHMS, InTurn, addr, instance, requests, xids};

/// (bench label, factory name, weighted membership): the algorithms that ignore load.
const LOAD_BLIND: &[(&str, &str, bool)] = &[
    ("XID", "XID", false),
    ("Random", "RandomLoadBalance", false),
    ("RandomWeighted", "RandomLoadBalance", true),
    ("RoundRobin", "RoundRobinLoadBalance", false),
    ("RoundRobinWeighted", "RoundRobinLoadBalance", true),
    ("ConsistentHash", "ConsistentHash", false),
    ("JumpHash", "JumpHash", false),
    ("AccountHash", "AccountHash", false),
    ("SourceHash", "SourceHash", false),
    ("ZoneRoundRobin", "zone:RoundRobinLoadBalance", false),
];

/// What the client's endpoints carry: a shared handle (the `AliveEndpoint`'s
/// connection is one `Arc`).
type Handle = Arc<SocketAddr>;

fn inserts(n: usize, weighted: bool) -> Vec<Edit<Handle>> {
    (0..n)
        .map(|i| Edit::Insert(instance(i, weighted), Arc::new(addr(i))))
        .collect()
}

fn balancer(name: &str, n: usize, weighted: bool) -> Balancer<Handle> {
    let b = Balancer::with_payload(by_name(name).unwrap());
    b.apply(inserts(n, weighted));
    b
}

fn bench_payload_pick(c: &mut Criterion) {
    let mut group = c.benchmark_group("payload_pick");
    let keys = xids(100);
    let requests = requests(&keys);
    for &(label, name, weighted) in LOAD_BLIND {
        let b = balancer(name, 100, weighted);
        let mut request = InTurn::new(&requests);
        group.bench_with_input(BenchmarkId::new(label, 100), &100, |bench, _| {
            bench.iter(|| {
                let picked = b.pick(black_box(request.step())).unwrap();
                black_box(picked.payload());
                // Dropping the pick ends the in-flight count.
            })
        });
    }
    group.finish();
}

fn bench_apply(c: &mut Criterion) {
    const N: usize = 10_000;
    let mut group = c.benchmark_group("apply_10k");
    group.sample_size(10);
    for &name in ALGORITHMS {
        let label = name.replace(':', "-");
        group.bench_function(BenchmarkId::new("full", &label), |bench| {
            bench.iter_batched(
                || {
                    (
                        Balancer::with_payload(by_name(name).unwrap()),
                        inserts(N, false),
                    )
                },
                |(b, edits)| {
                    b.apply(edits);
                    b
                },
                BatchSize::PerIteration,
            )
        });
        // One change: the member N leaves on one iteration and joins on the next, so
        // every iteration is one edit against 10 000 (or 10 001) members.
        let b = balancer(name, N, false);
        let newcomer = instance(N, false);
        let mut present = false;
        group.bench_function(BenchmarkId::new("one_change", &label), |bench| {
            bench.iter(|| {
                let edit = if present {
                    Edit::Remove(newcomer.key().clone())
                } else {
                    Edit::Insert(newcomer.clone(), Arc::new(addr(N)))
                };
                present = !present;
                b.apply([edit]);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_payload_pick, bench_apply);
criterion_main!(benches);
