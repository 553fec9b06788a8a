//! Assertions on registry [`Watch`]es shared by every backend's tests: wait for a
//! snapshot that satisfies a predicate, wait for a health state, poll a condition,
//! assert nothing changes over a span, capture log lines. The behaviours every backend
//! shares are in [`crate::conformance`].
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

/// Asserts the watch delivers no new snapshot for `span` (a change at any moment of it
/// fails, not only one still there at the end); for what must hold over a span the
/// protocol defines, such as a TTL a keep-alive must outlive.
pub async fn assert_unchanged_for(w: &mut Watch, span: Duration, what: &str) {
    let before = w.current();
    // The first `next` of a fresh watch returns the current snapshot at once.
    if let Ok(Ok(s)) = tokio::time::timeout(Duration::ZERO, w.next()).await {
        assert_eq!(
            s.revision(),
            before.revision(),
            "{what}: changed from {:?} to {:?}",
            addrs(&before),
            addrs(&s)
        );
    }
    match tokio::time::timeout(span, w.next()).await {
        Err(_) => {}
        Ok(Ok(s)) => panic!(
            "{what}: the watch changed within {span:?}, from {:?} to {:?}",
            addrs(&before),
            addrs(&s)
        ),
        Ok(Err(e)) => panic!("{what}: the watch ended within {span:?}: {e}"),
    }
}

/// Asserts that the captured log `text` saw `seen` (without it the check proves
/// nothing) and holds no `secret`; a failure shows the first lines that hold it. The
/// secret-leak tests of several crates check their captures so.
pub fn assert_log_keeps(text: &str, seen: &str, secret: &str) {
    assert!(
        text.contains(seen),
        "the log capture saw nothing of `{seen}`; it proves nothing"
    );
    assert!(
        !text.contains(secret),
        "the secret reached the log:\n{}",
        text.lines()
            .filter(|l| l.contains(secret))
            .take(3)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Collects `tracing` output of the current thread, to assert that a skipped entry was
/// logged and named: `let guard = logs.capture(); ...; drop(guard); logs.text()`.
#[derive(Clone, Default)]
pub struct LogBuf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogBuf {
    /// Installs the process-wide subscriber, writing what `filter` (an `EnvFilter`
    /// directive, e.g. `meshline_registry_nacos=warn`) lets through into a new buffer:
    /// events from every thread, a client's background tasks included. Once per test
    /// binary (it panics if a global subscriber is already set).
    pub fn global(filter: &str) -> LogBuf {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::{EnvFilter, Layer};
        let logs = LogBuf::default();
        let w = logs.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || w.clone())
                .with_filter(EnvFilter::new(filter)),
        );
        tracing::subscriber::set_global_default(subscriber)
            .expect("the only process-wide subscriber of this test binary");
        logs
    }

    /// Sends this thread's `WARN` and worse to the buffer until the guard is dropped.
    pub fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let me = self.clone();
        tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .with_ansi(false)
                .with_max_level(tracing::Level::WARN)
                .with_writer(move || me.clone())
                .finish(),
        )
    }

    /// Sends this thread's events at `level` and worse to the buffer until the guard
    /// is dropped. With a current-thread runtime that covers every task the test
    /// spawns: the secret-leak tests capture at `TRACE`, dependencies included.
    pub fn capture_at(&self, level: tracing::Level) -> tracing::subscriber::DefaultGuard {
        let me = self.clone();
        tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .with_ansi(false)
                .with_max_level(level)
                .with_writer(move || me.clone())
                .finish(),
        )
    }

    /// What was captured so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}
