//! Convergence measurements shared by the backends' `*_convergence` examples: how long
//! after `register` on one client another client's watch shows the instance, and how
//! long a crashed registrant takes to leave it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use meshline_registry_core::{Config, Instance, InstanceKey, RegistryError, RegistryService};

type Seen = Arc<Mutex<HashMap<InstanceKey, Instant>>>;

/// Client `a` registers `n` instances in `cluster` one after the other; for each, the
/// time from calling `register` until `b`'s watch delivers a snapshot holding it (the
/// snapshot's arrival is stamped by a task reading the watch, so a late look does not
/// add to it). Each registration starts after a pause spread deterministically over
/// `spread`, so that a polling backend is not always hit at the same phase of its poll.
pub async fn register_to_watch(
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
                follower.abort();
                return Err(format!("{inst} never showed up in the watch"));
            }
        }
    }
    follower.abort();
    Ok(out)
}

/// A crashed registrant: `c` registers instance number `k` in `cluster`, keeps it for
/// `settle` (a renewal or two, as in a long-running process), then `abandon` stops it
/// without deregistering and it is dropped (a client library's own session task, as
/// ZooKeeper's, ends only then). Timed from then until `b`'s watch loses it.
pub async fn crash_removal<R: RegistryService>(
    c: R,
    abandon: fn(&R),
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
    abandon(&c);
    drop(c);
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

/// `n=… p50=… p90=… p99=… max=…` of `d`, in milliseconds (nearest-rank percentiles).
pub fn summary(mut d: Vec<Duration>) -> String {
    if d.is_empty() {
        return "n=0".into();
    }
    d.sort();
    let pct = |p: f64| d[((d.len() as f64 * p).ceil() as usize).clamp(1, d.len()) - 1];
    let ms = |x: Duration| x.as_secs_f64() * 1000.0;
    format!(
        "n={:<4} p50={:>8.2} ms  p90={:>8.2} ms  p99={:>8.2} ms  max={:>8.2} ms",
        d.len(),
        ms(pct(0.50)),
        ms(pct(0.90)),
        ms(pct(0.99)),
        ms(d[d.len() - 1]),
    )
}

/// What [`measure`] found.
#[derive(Debug, Clone)]
pub struct Convergence {
    /// Register -> the other client's watch, per instance.
    pub registered: Vec<Duration>,
    /// Abandon -> the other client's watch loses it, per crashed registrant.
    pub crashes: Vec<Duration>,
}

impl Convergence {
    /// The two lines the examples print for the backend `label`: the [`summary`] of
    /// the registrations and how the watch learns of them (`how`), then the crash
    /// removals and what removes a crashed registrant (`expiry`).
    pub fn report(&self, label: &str, how: &str, expiry: &str) -> String {
        format!(
            "{label:<8}{}  ({how})\n{label:<8}crashed registrant removed after {:.2?} ({expiry})",
            summary(self.registered.clone()),
            self.crashes
        )
    }
}

/// Both measurements with clients made by `connect` (the backend's own, e.g.
/// `EtcdRegistry::connect`) from the config of `keys`: [`register_to_watch`] of `n`
/// instances (spread over `spread`), then three [`crash_removal`]s (each registrant
/// held for `settle`, then crashed by `abandon`) in the same cluster, so the removal
/// never empties it (empty protection, on by default, would keep the last member).
pub async fn measure<R: RegistryService>(
    keys: &[(&str, &str)],
    n: usize,
    spread: Duration,
    settle: Duration,
    connect: impl AsyncFn(&Config) -> Result<R, RegistryError>,
    abandon: fn(&R),
) -> Result<Convergence, String> {
    let cfg = crate::config_of(keys, &[]);
    let a = connect(&cfg).await.map_err(|e| e.to_string())?;
    let b = connect(&cfg).await.map_err(|e| e.to_string())?;
    let registered = register_to_watch(&a, &b, "conv", n, spread).await?;
    let mut crashes = Vec::new();
    for k in 0..3 {
        let c = connect(&cfg).await.map_err(|e| e.to_string())?;
        crashes.push(crash_removal(c, abandon, &b, "conv", k, settle).await?);
    }
    a.close().await.map_err(|e| e.to_string())?;
    b.close().await.map_err(|e| e.to_string())?;
    Ok(Convergence {
        registered,
        crashes,
    })
}
