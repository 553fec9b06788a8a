//! Convergence of the ZooKeeper and Redis registries, measured against real servers
//! from meshline-testkit (`meshline_testkit::convergence`, shared with the other
//! backends' examples).
//!
//! 1. Register 200 instances one by one on client A; for each, the time from calling
//!    `register` until client B's watch shows it. Prints p50 / p90 / p99 / max.
//! 2. Removal of a crashed registrant: client C registers, then stops without cleaning up
//!    (`abandon`); the time until B's watch drops it (ZooKeeper session 4 s, Redis TTL
//!    3 s), three times.
//!
//! Run: `cargo run --release -p meshline-registry-others --features zookeeper,redis --example zk_redis_convergence [zookeeper|redis]`

use std::time::Duration;

use meshline_registry_others::{RedisRegistry, ZookeeperRegistry};
use meshline_testkit::convergence::measure;

const N: usize = 200;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), String> {
    let which = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    if which == "all" || which == "zookeeper" {
        let zk =
            meshline_testkit::ZooKeeper::start().expect("zookeeper (scripts/install-test-deps.sh)");
        let connect = zk.connect_string();
        let c = measure(
            &[
                ("registry.type", "zk"),
                ("registry.zk.serverAddr", connect.as_str()),
                ("registry.zk.sessionTimeout", "4s"),
            ],
            N,
            Duration::ZERO,
            Duration::from_secs(2),
            ZookeeperRegistry::connect,
            ZookeeperRegistry::abandon,
        )
        .await?;
        println!("{}", c.report("zk", "child watches", "session 4 s"));
    }
    if which == "all" || which == "redis" {
        let r = meshline_testkit::Redis::start().expect("redis (scripts/install-test-deps.sh)");
        let addr = r.addr();
        let c = measure(
            &[
                ("registry.type", "redis"),
                ("registry.redis.serverAddr", addr.as_str()),
                ("registry.redis.ttl", "3s"),
                ("registry.redis.refreshPeriod", "1s"),
            ],
            N,
            Duration::ZERO,
            Duration::from_millis(1500),
            RedisRegistry::connect,
            RedisRegistry::abandon,
        )
        .await?;
        let how = "pub/sub; changes under 200 ms apart share one rescan";
        println!("{}", c.report("redis", how, "TTL 3 s"));
    }
    Ok(())
}
