//! Convergence of the ZooKeeper and Redis registries, measured against real servers
//! from meshline-testkit.
//!
//! 1. Register 200 instances one by one on client A; for each, the time from calling
//!    `register` until client B's watch shows it. Prints p50 / p99 / max.
//! 2. Removal of a crashed registrant: client C registers, then stops without cleaning up
//!    (`abandon`); the time until B's watch drops it (ZooKeeper session 4 s, Redis TTL
//!    3 s), three times.
//!
//! Run: `cargo run --release -p meshline-registry-others --features zookeeper,redis --example zk_redis_convergence [zookeeper|redis]`

use std::future::Future;
use std::time::{Duration, Instant};

use meshline_registry_core::{Config, Instance, RegistryError, RegistryService, Watch};
use meshline_registry_others::{RedisRegistry, ZookeeperRegistry};

const N: usize = 200;

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

/// Runs both measurements with registries made by `connect`; `abandon` crashes one.
async fn measure<R, F, Fut>(name: &str, expiry: Duration, connect: F, abandon: fn(&R))
where
    R: RegistryService,
    F: Fn() -> Fut,
    Fut: Future<Output = Result<R, RegistryError>>,
{
    let a = connect().await.unwrap();
    let b = connect().await.unwrap();
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
        "{name} register->watch over {N}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        percentile(&times, 0.50).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3,
        times[N - 1].as_secs_f64() * 1e3
    );
    for round in 0..3 {
        let c = connect().await.unwrap();
        let inst = Instance::new("10.30.0.1", 20_000 + round).unwrap();
        c.register("conv", &inst).await.unwrap();
        until(&mut w, |s| s.iter().any(|x| x.key() == inst.key())).await;
        tokio::time::sleep(expiry / 2).await;
        let t = Instant::now();
        abandon(&c);
        drop(c);
        until(&mut w, |s| !s.iter().any(|x| x.key() == inst.key())).await;
        println!(
            "{name} crashed registrant removed after {:.0} ms (expiry {} ms)",
            t.elapsed().as_secs_f64() * 1e3,
            expiry.as_millis()
        );
    }
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let which = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    if which == "all" || which == "zookeeper" {
        let zk =
            meshline_testkit::ZooKeeper::start().expect("zookeeper (scripts/install-test-deps.sh)");
        let session = Duration::from_secs(4);
        let mut cfg = Config::default();
        let section = cfg.registry.section_mut("zk");
        section.set("serverAddr", zk.connect_string());
        section.set("sessionTimeout", format!("{}ms", session.as_millis()));
        cfg.registry.empty_protection = false;
        measure(
            "zookeeper",
            session,
            || ZookeeperRegistry::connect(&cfg),
            ZookeeperRegistry::abandon,
        )
        .await;
    }
    if which == "all" || which == "redis" {
        let r = meshline_testkit::Redis::start().expect("redis (scripts/install-test-deps.sh)");
        let ttl = Duration::from_secs(3);
        let mut cfg = Config::default();
        let section = cfg.registry.section_mut("redis");
        section.set("serverAddr", r.addr());
        section.set("ttl", format!("{}ms", ttl.as_millis()));
        section.set("refreshPeriod", "1s");
        cfg.registry.empty_protection = false;
        measure(
            "redis",
            ttl,
            || RedisRegistry::connect(&cfg),
            RedisRegistry::abandon,
        )
        .await;
    }
}
