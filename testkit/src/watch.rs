//! Assertions on registry [`Watch`]es shared by every backend's tests: wait for a
//! snapshot that satisfies a predicate, wait for a health state, poll a condition.
//! Each panics with what it was waiting for and the last state seen, so a failing
//! test says why.

use std::future::Future;
use std::time::{Duration, Instant};

use meshline_registry_core::{Health, Instance, Snapshot, Watch};

/// Sends `tracing` output to the test harness (shown for failing tests), filtered by
/// `MESHLINE_LOG` or else `default_filter` (e.g. `"meshline_registry_etcd=info"`).
pub fn init_logs(default_filter: &str) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MESHLINE_LOG")
                .unwrap_or_else(|_| default_filter.into()),
        )
        .with_test_writer()
        .try_init();
}

/// Parses an address the test wrote; panics on a typo in the test.
pub fn inst(s: &str) -> Instance {
    Instance::parse(s).unwrap_or_else(|e| panic!("bad test address {s:?}: {e}"))
}

/// The snapshot's members as `host:port` text, in snapshot order.
pub fn addrs(s: &Snapshot) -> Vec<String> {
    s.instances().iter().map(|i| i.to_string()).collect()
}

/// Reads the watch until `pred` holds for a snapshot (the current one included), or
/// panics after `within`.
pub async fn wait_for(
    w: &mut Watch,
    within: Duration,
    what: &str,
    pred: impl Fn(&Snapshot) -> bool,
) -> Snapshot {
    let deadline = Instant::now() + within;
    let cur = w.current();
    if pred(&cur) {
        return cur;
    }
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, w.next()).await {
            Ok(Ok(s)) if pred(&s) => return s,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("watch ended while waiting for {what}: {e}"),
            Err(_) => panic!(
                "timed out after {within:?} waiting for {what}; last snapshot {:?}",
                addrs(&w.current())
            ),
        }
    }
}

/// Waits until the watch's health is (`connected`) or is not connected, or panics
/// after `within`.
pub async fn wait_health(w: &mut Watch, within: Duration, connected: bool) -> Health {
    let deadline = Instant::now() + within;
    loop {
        let h = w.health();
        if h.is_connected() == connected {
            return h;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if tokio::time::timeout(left, w.health_changed())
            .await
            .is_err()
        {
            panic!("health did not become connected={connected} within {within:?}: {h:?}");
        }
    }
}

/// Polls `check` every 50 ms until it returns true, or panics after `within`.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A test server that can crash and come back: the real servers of this crate.
pub trait Restartable: Send + 'static {
    /// Stops the server abruptly (`SIGKILL`).
    fn kill(&mut self);
    /// Starts it again on the same ports (and data dir where it has one); blocks until
    /// it answers.
    fn restart(&mut self) -> crate::Result<()>;
}

macro_rules! restartable {
    ($($t:ty),*) => {$(
        impl Restartable for $t {
            fn kill(&mut self) {
                <$t>::kill(self)
            }
            fn restart(&mut self) -> crate::Result<()> {
                <$t>::restart(self)
            }
        }
    )*};
}
restartable!(crate::Etcd, crate::ZooKeeper, crate::Redis, crate::Rnacos);

/// The outage every backend must survive: kills `server` while `w` is live, checks the
/// watch reports [`Health::Stale`] within 10 s and still serves the same snapshot after
/// `down`, restarts the server and waits (up to `resync_within`) for the watch to
/// report connected again. Returns the restarted server for the backend-specific checks
/// that follow (our registration is back, the watch is live).
pub async fn survive_outage<S: Restartable>(
    w: &mut Watch,
    mut server: S,
    down: Duration,
    resync_within: Duration,
) -> S {
    let before = addrs(&w.current());
    server.kill();
    let h = wait_health(w, Duration::from_secs(10), false).await;
    assert!(matches!(h, Health::Stale { .. }), "{h:?}");
    tokio::time::sleep(down).await;
    assert_eq!(
        addrs(&w.current()),
        before,
        "the last snapshot must be kept while down"
    );
    assert!(!w.health().is_connected(), "still down, still stale");
    let started = Instant::now();
    let server = tokio::task::spawn_blocking(move || {
        server.restart().expect("restart the server");
        server
    })
    .await
    .expect("restart task");
    wait_health(w, resync_within, true).await;
    tracing::info!(after = ?started.elapsed(), "watch resynced after the restart began");
    server
}

/// Crashes a registrant with `crash` (which must stop it without deregistering, as a
/// killed process would), waits for the watch to show one member fewer, and asserts that
/// took at most `limit` (the backend's TTL or session timeout + 1 s). Returns the time
/// taken, also logged under `what`.
pub async fn assert_crash_removed_within(
    w: &mut Watch,
    what: &str,
    limit: Duration,
    crash: impl FnOnce(),
) -> Duration {
    let before = w.current().len();
    assert!(before > 0, "{what}: nothing registered to crash");
    let started = Instant::now();
    crash();
    // Wait longer than the limit so a slow removal is measured, then judged.
    wait_for(w, limit + Duration::from_secs(3), "crash seen", |s| {
        s.len() + 1 == before
    })
    .await;
    let took = started.elapsed();
    tracing::info!(?took, ?limit, "{what}: crashed registrant removed");
    assert!(
        took <= limit,
        "{what}: removal took {took:?}, more than {limit:?}"
    );
    took
}
