//! Helpers shared by the backend tests of this crate (the watch assertions and the
//! conformance suite live in meshline-testkit, shared with the other backends).
#![allow(dead_code)]

#[allow(unused_imports)] // each test binary uses a different subset
pub use meshline_testkit::watch::{
    LogBuf, addrs, assert_unchanged_for, eventually, inst, wait_for, wait_health,
};

pub fn init_logs() {
    meshline_testkit::watch::init_logs("meshline_registry_others=info");
}

/// A TLS test's start: the logs, and the certificates generated for this run.
pub fn tls_pki() -> meshline_testkit::TestPki {
    init_logs();
    meshline_testkit::TestPki::generate().unwrap()
}

/// A client that got through over TLS works: the TLS round trip on `cluster`, then a
/// clean close.
pub async fn serves_over_tls<R: meshline_registry_core::RegistryService>(
    connected: Result<R, meshline_registry_core::RegistryError>,
    cluster: &str,
) {
    let r = connected.unwrap_or_else(|e| panic!("TLS connect for {cluster}: {e:?}"));
    meshline_testkit::tls_round_trip(&r, cluster).await;
    r.close().await.unwrap();
}

/// Watches and looks up `cluster` through `c` while capturing the logs: both show the
/// member `good` alone (the rest of the cluster is malformed), and a warning names
/// one of the malformed entries (`bad`, their keys). Returns the captured logs.
pub async fn skips_malformed(
    c: &dyn meshline_registry_core::RegistryService,
    cluster: &str,
    good: &str,
    bad: &[&str],
) -> String {
    let logs = LogBuf::default();
    let guard = logs.capture();
    let mut w = c.watch(cluster).await.unwrap();
    assert_eq!(addrs(&w.next().await.unwrap()), [good]);
    assert_eq!(c.lookup(cluster).await.unwrap().len(), 1);
    drop(guard);
    let text = logs.text();
    // Malformed entries go through the shared, rate-limited report: one line per
    // cluster per period, naming the first bad entry and counting the others.
    assert!(
        text.contains("WARN")
            && text.contains("skipping malformed registry entry")
            && bad.iter().any(|id| text.contains(&format!("key={id}"))),
        "no warning naming a malformed entry: {text}"
    );
    text
}
