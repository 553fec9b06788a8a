//! Convergence of the etcd registry, measured against a real etcd from meshline-testkit.
//!
//! 1. Register 200 instances one by one on client A; for each, the time from calling
//!    `register` until client B's watch shows it. Prints p50 / p99 / max.
//! 2. Removal of a crashed registrant: client C registers, then stops without cleaning up
//!    (`abandon`); the time until B's watch drops it (lease TTL 3 s), three times.
//!
//! Run: `cargo run --release -p meshline-registry-etcd --example etcd_convergence`

use std::time::{Duration, Instant};

use meshline_registry_core::{Config, Instance, RegistryService, Watch};
use meshline_registry_etcd::EtcdRegistry;

const N: usize = 200;
const TTL: Duration = Duration::from_secs(3);

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

async fn until(w: &mut Watch, pred: impl Fn(&[Instance]) -> bool) {
    loop {
        if pred(&w.current().instances()[..]) {
            return;
        }
        tokio::time::timeout(Duration::from_secs(30), w.next())
            .await
            .expect("watch stalled for 30 s")
            .expect("watch closed");
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let etcd = meshline_testkit::Etcd::start().expect("etcd (scripts/install-test-deps.sh)");
    let mut cfg = Config::default();
    let etcd3 = cfg.registry.section_mut("etcd3");
    etcd3.set("serverAddr", etcd.endpoint());
    etcd3.set("ttl", format!("{}ms", TTL.as_millis()));
    cfg.registry.empty_protection = false;
    let a = EtcdRegistry::connect(&cfg).await.unwrap();
    let b = EtcdRegistry::connect(&cfg).await.unwrap();
    let mut w = b.watch("conv").await.unwrap();
    w.next().await.unwrap();

    let mut times = Vec::with_capacity(N);
    for i in 0..N {
        let inst = Instance::new("10.20.0.1", 10_000 + i as u16).unwrap();
        let t = Instant::now();
        a.register("conv", &inst).await.unwrap();
        until(&mut w, |s| s.iter().any(|x| x.key() == inst.key())).await;
        times.push(t.elapsed());
    }
    times.sort();
    println!(
        "etcd register->watch over {N}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        percentile(&times, 0.50).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3,
        times[N - 1].as_secs_f64() * 1e3
    );

    for round in 0..3 {
        let c = EtcdRegistry::connect(&cfg).await.unwrap();
        let inst = Instance::new("10.30.0.1", 20_000 + round).unwrap();
        c.register("conv", &inst).await.unwrap();
        until(&mut w, |s| s.iter().any(|x| x.key() == inst.key())).await;
        // Let a keep-alive renew the lease, as in a long-running process.
        tokio::time::sleep(TTL / 2).await;
        let t = Instant::now();
        c.abandon();
        until(&mut w, |s| !s.iter().any(|x| x.key() == inst.key())).await;
        println!(
            "etcd crashed registrant removed after {:.0} ms (lease TTL {} ms)",
            t.elapsed().as_secs_f64() * 1e3,
            TTL.as_millis()
        );
    }
    a.close().await.unwrap();
    b.close().await.unwrap();
}
