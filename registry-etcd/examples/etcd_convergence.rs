//! Convergence of the etcd registry, measured against a real etcd from meshline-testkit
//! (`meshline_testkit::convergence`, shared with the other backends' examples).
//!
//! 1. Register 200 instances one by one on client A; for each, the time from calling
//!    `register` until client B's watch shows it. Prints p50 / p90 / p99 / max.
//! 2. Removal of a crashed registrant: client C registers, then stops without cleaning up
//!    (`abandon`); the time until B's watch drops it (lease TTL 3 s), three times.
//!
//! Run: `cargo run --release -p meshline-registry-etcd --example etcd_convergence`

use std::time::Duration;

use meshline_registry_etcd::EtcdRegistry;
use meshline_testkit::convergence::measure;

const N: usize = 200;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), String> {
    let etcd = meshline_testkit::Etcd::start().expect("etcd (scripts/install-test-deps.sh)");
    let endpoint = etcd.endpoint();
    let c = measure(
        &[
            ("registry.type", "etcd3"),
            ("registry.etcd3.serverAddr", endpoint.as_str()),
            ("registry.etcd3.ttl", "3s"),
        ],
        N,
        Duration::ZERO,
        Duration::from_millis(1500),
        EtcdRegistry::connect,
        EtcdRegistry::abandon,
    )
    .await?;
    println!("{}", c.report("etcd", "watch stream", "lease TTL 3 s"));
    Ok(())
}
