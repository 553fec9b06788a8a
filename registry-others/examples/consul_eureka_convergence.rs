//! Convergence of the Consul and Eureka backends: how long after `register` on one
//! client another client's `watch` shows the new instance
//! (`meshline_testkit::convergence`, shared with the other backends' examples).
//!
//! Each backend runs against its in-process double (meshline-testkit). Client A
//! registers `N` instances one after the other; for each, the time from calling
//! `register` to client B's watch delivering a snapshot that contains it is recorded.
//! Prints p50 / p90 / p99 / max per backend, then three times the time a crashed
//! registrant (abandoned: no deregistration) takes to leave the other client's watch (Consul
//! TTL 2 s; Eureka lease 3 s). Registrations are spread over the poll
//! interval so that they do not all land at the same phase of Eureka's fetch cycle.
//!
//! ```text
//! cargo run --release -p meshline-registry-others --features consul,eureka \
//!     --example consul_eureka_convergence -- [N] [EUREKA_REFRESH_MS]
//! ```
//!
//! Defaults: N = 200, Eureka refresh interval 100 ms. Consul watches are blocking
//! queries, so Consul converges as soon as the agent wakes the query; Eureka watches poll
//! (delta fetch every refresh interval), so its figures scale with that interval (the
//! Seata default is 5 s); the ratio to the interval is printed too.

use std::time::Duration;

use meshline_registry_others::{ConsulRegistry, EurekaRegistry};
use meshline_testkit::convergence::measure;
use meshline_testkit::{ConsulDouble, ConsulDoubleOptions, EurekaDouble, EurekaDoubleOptions};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .map_or(Ok(200), |s| s.parse())
        .map_err(|e| format!("N: {e}"))?;
    let refresh_ms: u64 = args
        .next()
        .map_or(Ok(100), |s| s.parse())
        .map_err(|e| format!("EUREKA_REFRESH_MS: {e}"))?;
    if n == 0 || refresh_ms == 0 {
        return Err("N and EUREKA_REFRESH_MS must be greater than 0".into());
    }

    let consul = ConsulDouble::start(ConsulDoubleOptions::default()).map_err(|e| e.to_string())?;
    let addr = consul.server_addr();
    let c = measure(
        &[
            ("registry.type", "consul"),
            ("registry.consul.serverAddr", addr.as_str()),
            ("registry.consul.ttl", "2s"),
        ],
        n,
        Duration::from_millis(5),
        Duration::from_secs(1),
        ConsulRegistry::connect,
        ConsulRegistry::abandon,
    )
    .await?;
    println!("{}", c.report("consul", "blocking queries", "TTL 2 s"));

    let eureka = EurekaDouble::start(EurekaDoubleOptions::default()).map_err(|e| e.to_string())?;
    let (url, refresh) = (eureka.service_url(), format!("{refresh_ms}ms"));
    let c = measure(
        &[
            ("registry.type", "eureka"),
            ("registry.eureka.serviceUrl", url.as_str()),
            ("registry.eureka.refreshInterval", refresh.as_str()),
            ("registry.eureka.renewalInterval", "1s"),
            ("registry.eureka.leaseDuration", "3s"),
        ],
        n,
        Duration::from_millis(refresh_ms),
        Duration::from_millis(1500),
        EurekaRegistry::connect,
        EurekaRegistry::abandon,
    )
    .await?;
    let mut sorted = c.registered.clone();
    sorted.sort();
    let p50 = sorted[sorted.len() / 2].as_secs_f64() * 1000.0;
    let how = format!(
        "delta fetch every {refresh_ms} ms; p50 = {:.2} x the interval",
        p50 / refresh_ms as f64
    );
    let expiry = format!(
        "lease 3 s, eviction every {:?}, refresh {refresh_ms} ms",
        EurekaDoubleOptions::default().eviction_interval
    );
    println!("{}", c.report("eureka", &how, &expiry));
    Ok(())
}
