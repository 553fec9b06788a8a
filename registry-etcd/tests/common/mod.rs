//! Helpers shared by the etcd test files (the watch assertions and the conformance
//! suite live in meshline-testkit, shared with the other backends).
#![allow(dead_code)] // each test binary uses its part

use std::time::Duration;

use etcd_client::Client;
use meshline_registry_core::{Config, Snapshot, Watch};

pub fn init_logs() {
    meshline_testkit::watch::init_logs("meshline_registry_etcd=info");
}

/// A config for `endpoints` with a 2 s TTL, then `extra` keys.
pub fn config_2s(endpoints: &str, extra: &[(&str, &str)]) -> Config {
    let base = [
        ("registry.type", "etcd3"),
        ("registry.etcd3.serverAddr", endpoints),
        ("registry.etcd3.ttl", "2s"),
    ];
    meshline_testkit::config_of(&base, extra)
}

/// A plain etcd client of `endpoint`, bypassing the backend.
pub async fn raw(endpoint: &str) -> Client {
    Client::connect([endpoint], None)
        .await
        .expect("raw etcd client")
}

/// Waits up to `within` for `w` to show `n` members (`what` names the wait).
pub async fn until_members(w: &mut Watch, n: usize, within: Duration, what: &str) -> Snapshot {
    meshline_testkit::watch::wait_for(w, within, what, |s| s.len() == n).await
}
