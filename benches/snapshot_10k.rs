//! Applying a registry snapshot of 10,000 instances end to end, and one change within
//! 10,000: parse the registry's `ip:port` entries, publish through a `WatchHub` (sort,
//! de-duplicate, compare with the last snapshot), receive on a `Watch`, and rebuild a
//! `Balancer` (round-robin, consistent hash, least-active).
//!
//! ```text
//! cargo bench -p meshline --bench snapshot_10k -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! Targets: full apply < 10 ms, one change < 1 ms on the 2-core development machine.
//! The figures, measured with a peer in the same run, and what each change to this path
//! bought, are in loadbalance/BENCHMARKS.md.
//!
//! The routine hands the hub and balancer back, so their teardown is dropped outside
//! the timing (a full apply is not a balancer's destruction). The harness clones `full`
//! per iteration (untimed); with shared hosts, the previous snapshot's drop frees no
//! strings, as for a backend that republishes its kept members after one event. A
//! backend that re-parses everything also pays `parse_only` and the frees.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use meshline::loadbalance::{Balancer, by_name};
use meshline::{EmptyProtection, Instance, WatchHub};

const N: usize = 10_000;

fn entries(n: usize, salt: u32) -> Vec<String> {
    (0..n as u32)
        .map(|i| {
            let x = i.wrapping_mul(2_654_435_761).wrapping_add(salt);
            format!(
                "10.{}.{}.{}:{}",
                (x >> 16) & 255,
                (x >> 8) & 255,
                x & 255,
                8000 + (i % 1000)
            )
        })
        .collect()
}

fn parse(entries: &[String]) -> Vec<Instance> {
    entries
        .iter()
        .filter_map(|e| Instance::parse(e).ok())
        .collect()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let base = entries(N, 0);
    let mut group = c.benchmark_group("snapshot_10k");
    for lb in [
        "RoundRobinLoadBalance",
        "ConsistentHash",
        "LeastActiveLoadBalance",
    ] {
        group.bench_function(format!("full_apply/{lb}"), |b| {
            b.iter_batched(
                || {
                    (
                        WatchHub::new("bench", EmptyProtection::Apply),
                        Balancer::new(by_name(lb).expect("balancer")),
                    )
                },
                |(hub, balancer)| {
                    let mut watch = hub.subscribe("c");
                    let list = parse(&base);
                    hub.publish("c", list);
                    let snap = rt.block_on(watch.next()).expect("snapshot");
                    balancer.update(snap.instances());
                    black_box(balancer.endpoints().len());
                    // Dropped after the timing: tearing the balancer down is not part
                    // of applying a snapshot.
                    (hub, balancer, watch, snap)
                },
                criterion::BatchSize::PerIteration,
            )
        });
        // One instance added to (or removed from) a cluster of 10,000.
        let hub = WatchHub::new("bench", EmptyProtection::Apply);
        let balancer = Balancer::new(by_name(lb).expect("balancer"));
        let mut watch = hub.subscribe("c");
        let full = parse(&base);
        hub.publish("c", full.clone());
        balancer.update(rt.block_on(watch.next()).expect("snapshot").instances());
        let extra = Instance::parse("192.168.255.254:9999").expect("instance");
        let mut flip = false;
        group.bench_function(format!("one_change/{lb}"), |b| {
            b.iter_batched(
                || {
                    flip = !flip;
                    let mut list = full.clone();
                    if flip {
                        list.push(extra.clone());
                    }
                    list
                },
                |list| {
                    hub.publish("c", list);
                    let snap = rt.block_on(watch.next()).expect("snapshot");
                    balancer.update(snap.instances());
                    black_box(balancer.endpoints().len())
                },
                criterion::BatchSize::LargeInput,
            )
        });
    }
    group.bench_function("parse_only", |b| b.iter(|| black_box(parse(&base).len())));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
