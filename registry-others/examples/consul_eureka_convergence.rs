//! Convergence of the Consul and Eureka backends: how long after `register` on one
//! client another client's `watch` shows the new instance.
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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Config, Instance, InstanceKey, RegistryService};
use meshline_registry_others::{ConsulRegistry, EurekaRegistry};
use meshline_testkit::{ConsulDouble, ConsulDoubleOptions, EurekaDouble, EurekaDoubleOptions};

type Seen = Arc<Mutex<HashMap<InstanceKey, Instant>>>;

async fn measure(
    a: &dyn RegistryService,
    b: &dyn RegistryService,
    cluster: &str,
    n: usize,
    spread: Duration,
) -> Result<Vec<Duration>, String> {
    let mut watch = b.watch(cluster).await.map_err(|e| e.to_string())?;
    watch.next().await.map_err(|e| e.to_string())?;
    let seen: Seen = Arc::new(Mutex::new(HashMap::new()));
    let notify = Arc::new(tokio::sync::Notify::new());
    let (s2, n2) = (seen.clone(), notify.clone());
    let follower = tokio::spawn(async move {
        while let Ok(snap) = watch.next().await {
            let now = Instant::now();
            let mut g = s2.lock().unwrap_or_else(|p| p.into_inner());
            for i in snap.instances().iter() {
                g.entry(i.key().clone()).or_insert(now);
            }
            drop(g);
            n2.notify_waiters();
        }
    });
    let mut out = Vec::with_capacity(n);
    for k in 0..n {
        let inst = Instance::new(&format!("10.77.{}.{}", k / 250, k % 250 + 1), 9000)
            .map_err(|e| e.to_string())?;
        // Registering right after the previous one was seen would always land just
        // after a poll; spread the start over `spread` (deterministically) instead.
        tokio::time::sleep(spread * ((k * 37 % 100) as u32) / 100).await;
        let start = Instant::now();
        a.register(cluster, &inst)
            .await
            .map_err(|e| e.to_string())?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let wait = notify.notified();
            if let Some(at) = seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(inst.key())
            {
                out.push(at.saturating_duration_since(start));
                break;
            }
            if tokio::time::timeout_at(deadline, wait).await.is_err() {
                return Err(format!("{inst} never showed up in the watch"));
            }
        }
    }
    follower.abort();
    Ok(out)
}

/// A crashed registrant: `C` registers, then is abandoned (its keeper / heartbeat stops,
/// nothing is deleted). Timed from then until B's watch loses it.
async fn crash(
    c: &dyn RegistryService,
    abandon: impl FnOnce(),
    b: &dyn RegistryService,
    cluster: &str,
    k: usize,
    settle: Duration,
) -> Result<Duration, String> {
    let inst = Instance::new(&format!("10.78.0.{}", k + 1), 9000).map_err(|e| e.to_string())?;
    let mut w = b.watch(cluster).await.map_err(|e| e.to_string())?;
    c.register(cluster, &inst)
        .await
        .map_err(|e| e.to_string())?;
    loop {
        let s = w.next().await.map_err(|e| e.to_string())?;
        if s.instances().iter().any(|i| i.key() == inst.key()) {
            break;
        }
    }
    tokio::time::sleep(settle).await;
    abandon();
    let start = Instant::now();
    loop {
        let s = tokio::time::timeout(Duration::from_secs(60), w.next())
            .await
            .map_err(|_| format!("{inst} was never removed"))?
            .map_err(|e| e.to_string())?;
        if !s.instances().iter().any(|i| i.key() == inst.key()) {
            return Ok(start.elapsed());
        }
    }
}

fn report(name: &str, mut d: Vec<Duration>, note: &str) {
    d.sort();
    let pct = |p: f64| d[((d.len() as f64 * p).ceil() as usize).clamp(1, d.len()) - 1];
    let ms = |x: Duration| x.as_secs_f64() * 1000.0;
    println!(
        "{name:<7} n={:<4} p50={:>8.2} ms  p90={:>8.2} ms  p99={:>8.2} ms  max={:>8.2} ms  {note}",
        d.len(),
        ms(pct(0.50)),
        ms(pct(0.90)),
        ms(pct(0.99)),
        ms(*d.last().unwrap_or(&Duration::ZERO)),
    );
}

fn consul_config(double: &ConsulDouble) -> Result<Config, String> {
    ConfigLoader::new()
        .set("registry.type", "consul")
        .set("registry.consul.serverAddr", double.server_addr())
        .set("registry.consul.ttl", "2s")
        .load()
        .map_err(|e| e.to_string())
}

fn eureka_config(double: &EurekaDouble, refresh_ms: u64) -> Result<Config, String> {
    ConfigLoader::new()
        .set("registry.type", "eureka")
        .set("registry.eureka.serviceUrl", double.service_url())
        .set("registry.eureka.refreshInterval", format!("{refresh_ms}ms"))
        .set("registry.eureka.renewalInterval", "1s")
        .set("registry.eureka.leaseDuration", "3s")
        .load()
        .map_err(|e| e.to_string())
}

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
    let cfg = consul_config(&consul)?;
    let a = ConsulRegistry::connect(&cfg)
        .await
        .map_err(|e| e.to_string())?;
    let b = ConsulRegistry::connect(&cfg)
        .await
        .map_err(|e| e.to_string())?;
    let d = measure(&a, &b, "conv", n, Duration::from_millis(5)).await?;
    report("consul", d, "(blocking queries)");
    let mut runs = Vec::new();
    for k in 0..3 {
        let c = ConsulRegistry::connect(&cfg)
            .await
            .map_err(|e| e.to_string())?;
        runs.push(crash(&c, || c.abandon(), &b, "conv", k, Duration::from_secs(1)).await?);
    }
    println!("consul  crashed registrant removed after {runs:.2?} (TTL 2 s)");
    a.close().await.map_err(|e| e.to_string())?;
    b.close().await.map_err(|e| e.to_string())?;

    let eureka = EurekaDouble::start(EurekaDoubleOptions::default()).map_err(|e| e.to_string())?;
    let cfg = eureka_config(&eureka, refresh_ms)?;
    let a = EurekaRegistry::connect(&cfg)
        .await
        .map_err(|e| e.to_string())?;
    let b = EurekaRegistry::connect(&cfg)
        .await
        .map_err(|e| e.to_string())?;
    let d = measure(&a, &b, "conv", n, Duration::from_millis(refresh_ms)).await?;
    let mut sorted = d.clone();
    sorted.sort();
    let p50 = sorted[sorted.len() / 2].as_secs_f64() * 1000.0;
    report(
        "eureka",
        d,
        &format!(
            "(delta fetch every {refresh_ms} ms; p50 = {:.2} x the interval)",
            p50 / refresh_ms as f64
        ),
    );
    let mut runs = Vec::new();
    for k in 0..3 {
        let c = EurekaRegistry::connect(&cfg)
            .await
            .map_err(|e| e.to_string())?;
        runs.push(
            crash(
                &c,
                || c.abandon(),
                &b,
                "conv",
                k,
                Duration::from_millis(1500),
            )
            .await?,
        );
    }
    println!(
        "eureka  crashed registrant removed after {runs:.2?} (lease 3 s, eviction every {:?}, refresh {refresh_ms} ms)",
        EurekaDoubleOptions::default().eviction_interval
    );
    a.close().await.map_err(|e| e.to_string())?;
    b.close().await.map_err(|e| e.to_string())?;
    Ok(())
}
