//! The raft backend against the testkit raft double (Seata's TC HTTP API on three
//! loopback ports sharing one cluster state): the conformance suite, then what is the
//! raft registry's own (leader only, leader change, fail-over between TCs, token
//! renewal and re-login, a wrong password).
//!
//! The backend is read-only (a TC joins by being in the raft group), so the
//! conformance harness's client adds and removes members through the double, as a
//! raft configuration change would, and reads through the backend. The double
//! answers with `storeMode` `db` there, where Seata's client lists every node; the
//! tests below use `raft`, where it lists the leader only. There is no TTL in raft
//! (members are raft peers), so the crash/expiry behaviour does not apply.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use common::*;
use meshline_registry_core::{Config, Instance, RegistryError, RegistryService, Watch};
use meshline_registry_others::RaftRegistry;
use meshline_testkit::conformance::{Garbage, Harness, Lifetime, Server};
use meshline_testkit::{RaftDouble, RaftDoubleOptions};

const WAIT: Duration = Duration::from_secs(10);
/// The forced metadata read period the tests configure (`metadataMaxAgeMs`).
const MAX_AGE: Duration = Duration::from_secs(2);
/// A change reaches a watch in one metadata read after the long poll returns: the TC
/// answers the held watch at once when the term moves. One read is at most the
/// client's 3 s request timeout; the rest is margin for a loaded machine.
const LEADER_CHANGE_BOUND: Duration = Duration::from_secs(5);

fn config_with(addr: &str, extra: &[(&str, &str)]) -> Config {
    let max_age = MAX_AGE.as_millis().to_string();
    let base = [
        ("registry.type", "raft"),
        ("registry.raft.serverAddr", addr),
        ("registry.raft.metadataMaxAgeMs", max_age.as_str()),
    ];
    meshline_testkit::config_of(&base, extra)
}

fn lock(d: &Mutex<RaftDouble>) -> std::sync::MutexGuard<'_, RaftDouble> {
    d.lock().unwrap_or_else(|p| p.into_inner())
}

/// The double, shared by the harness (which stops and restarts it) and its clients
/// (which add members through it).
struct Shared(Arc<Mutex<RaftDouble>>);

impl Server for Shared {
    fn go_down(&mut self) {
        lock(&self.0).stop();
    }
    fn come_back(&mut self) -> meshline_testkit::Result<()> {
        lock(&self.0).restart()
    }
}

/// The backend for reads; members added and removed through the double (the raft
/// group's configuration), and removed again on close and drop.
struct RaftUnderTest {
    reg: RaftRegistry,
    double: Arc<Mutex<RaftDouble>>,
    mine: Mutex<Vec<(String, Instance)>>,
}

impl RaftUnderTest {
    /// Adds `instance` to `cluster` (`add`) or removes it through the double, where
    /// the backend refused the write as read-only (`backend`), as it must; any other
    /// answer of the backend (it is closed) is the answer.
    fn through_double(
        &self,
        backend: Result<(), RegistryError>,
        cluster: &str,
        instance: &Instance,
        add: bool,
    ) -> Result<(), RegistryError> {
        match backend {
            Err(RegistryError::ReadOnly { .. }) => {}
            other => return other,
        }
        let addr = instance.to_string();
        if add {
            lock(&self.double).add_node(cluster, &addr);
            let member = (cluster.to_string(), instance.clone());
            self.mine.lock().unwrap().push(member);
        } else {
            lock(&self.double).remove_node(cluster, &addr);
            let mut mine = self.mine.lock().unwrap();
            mine.retain(|(c, i)| !(c == cluster && i == instance));
        }
        Ok(())
    }

    fn remove_mine(&self) {
        let mine = std::mem::take(&mut *self.mine.lock().unwrap());
        let d = lock(&self.double);
        for (c, i) in mine {
            d.remove_node(&c, &i.to_string());
        }
    }
}

impl Drop for RaftUnderTest {
    fn drop(&mut self) {
        self.remove_mine();
    }
}

#[async_trait]
impl RegistryService for RaftUnderTest {
    fn kind(&self) -> &'static str {
        self.reg.kind()
    }
    async fn register(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        let backend = self.reg.register(cluster, instance).await;
        self.through_double(backend, cluster, instance, true)
    }
    async fn unregister(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        let backend = self.reg.unregister(cluster, instance).await;
        self.through_double(backend, cluster, instance, false)
    }
    async fn lookup(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        self.reg.lookup(cluster).await
    }
    async fn watch(&self, cluster: &str) -> Result<Watch, RegistryError> {
        self.reg.watch(cluster).await
    }
    async fn close(&self) -> Result<(), RegistryError> {
        self.remove_mine();
        self.reg.close().await
    }
}

struct RaftHarness {
    double: Shared,
    addr: String,
}

async fn harness() -> RaftHarness {
    init_logs();
    let d = RaftDouble::start(RaftDoubleOptions {
        store_mode: "db".into(),
        ..Default::default()
    })
    .unwrap();
    let addr = d.server_addr();
    RaftHarness {
        double: Shared(Arc::new(Mutex::new(d))),
        addr,
    }
}

impl Harness for RaftHarness {
    type Registry = RaftUnderTest;
    /// No TTL in raft: the span the suite keeps a list unchanged is the forced
    /// metadata read period, so at least one read happens in it.
    const LIFETIME: Lifetime = Lifetime::fixed(MAX_AGE);
    /// Backoff (at most 10 s) plus one read, with margin.
    const RESYNC_WITHIN: Duration = Duration::from_secs(20);

    fn config(&self, extra: &[(&str, &str)]) -> Config {
        config_with(&self.addr, extra)
    }
    async fn connect_config(&self, cfg: &Config) -> Result<RaftUnderTest, RegistryError> {
        Ok(RaftUnderTest {
            reg: RaftRegistry::connect(cfg).await?,
            double: self.double.0.clone(),
            mine: Mutex::new(Vec::new()),
        })
    }
    fn server(&mut self) -> &mut dyn Server {
        &mut self.double
    }
}

impl Garbage for RaftHarness {
    async fn put_garbage(&self, cluster: &str, round: u32) {
        lock(&self.double.0).put_garbage(cluster, round);
    }
}

meshline_testkit::conformance_tests!(harness() => round_trip, drop_ends_watches,
    outage_stale_resync, garbage_skipped, empty_protection);

fn raft_double(opts: RaftDoubleOptions) -> RaftDouble {
    RaftDouble::start(opts).unwrap()
}

/// Makes `leader` the leader of group `default`: `w` shows it alone (`what`) within
/// [`LEADER_CHANGE_BOUND`].
async fn lead(d: &RaftDouble, w: &mut Watch, leader: &str, what: &str) {
    d.set_leader("default", leader);
    wait_for(w, LEADER_CHANGE_BOUND, what, |s| addrs(s) == [leader]).await;
}

const TX: [&str; 3] = ["10.1.0.1:8091", "10.1.0.2:8091", "10.1.0.3:8091"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_is_listed_and_a_leader_change_is_followed() {
    init_logs();
    let mut d = raft_double(RaftDoubleOptions::default());
    d.set_members("default", &TX, Some(0));
    let reg = RaftRegistry::connect(&config_with(&d.server_addr(), &[]))
        .await
        .unwrap();
    assert_eq!(addrs_of(&reg.lookup("default").await.unwrap()), [TX[0]]);
    let mut w = reg.watch("default").await.unwrap();
    assert_eq!(addrs(&w.next().await.unwrap()), [TX[0]]);

    let t = Instant::now();
    lead(&d, &mut w, TX[1], "the new leader").await;
    tracing::info!(after = ?t.elapsed(), "leader change followed");

    // The TC that answered so far goes away: the next one is asked.
    d.stop_node(0);
    let t = Instant::now();
    lead(&d, &mut w, TX[2], "the leader after a TC failed").await;
    tracing::info!(after = ?t.elapsed(), "leader change followed through another TC");
    assert!(w.health().is_connected());

    // An election (no leader): no nodes; the unprotected watch shows it empty.
    d.set_members("default", &TX, None);
    assert!(reg.lookup("default").await.unwrap().is_empty());
    // A group the TCs do not have: empty, not an error.
    assert!(reg.lookup("nope").await.unwrap().is_empty());
    reg.close().await.unwrap();
}

fn addrs_of(l: &[Instance]) -> Vec<String> {
    l.iter().map(|i| i.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_is_refused_as_read_only() {
    init_logs();
    let d = raft_double(RaftDoubleOptions::default());
    let reg = RaftRegistry::connect(&config_with(&d.server_addr(), &[]))
        .await
        .unwrap();
    let e = reg.register("default", &inst("10.0.0.1:8091")).await;
    assert!(
        matches!(e, Err(RegistryError::ReadOnly { kind: "raft", .. })),
        "{e:?}"
    );
    reg.close().await.unwrap();
}

const USER: &str = "seata";
const SECRET: &str = "Raft-Secret-7f3a";

fn with_login(validity: Duration, hold: Duration) -> RaftDouble {
    raft_double(RaftDoubleOptions {
        credentials: Some((USER.into(), SECRET.into())),
        token_validity: validity,
        watch_hold: hold,
        ..Default::default()
    })
}

/// The token is renewed before it expires (the TC never refuses one), and a token the
/// TC stops accepting (401) is replaced by a new login at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_renewed_and_a_refused_token_logs_in_again() {
    init_logs();
    // Tokens live 3 s; watches are held 300 ms, so the client calls often. The renewal
    // comes at nine tenths of the lifetime: 300 ms before expiry, a margin a loaded
    // 2-core machine keeps.
    let d = with_login(Duration::from_millis(3000), Duration::from_millis(300));
    d.set_members("default", &TX, Some(0));
    let cfg = config_with(
        &d.server_addr(),
        &[
            ("registry.raft.username", USER),
            ("registry.raft.password", SECRET),
            ("registry.raft.tokenValidityInMilliseconds", "3000"),
        ],
    );
    let reg = RaftRegistry::connect(&cfg).await.unwrap();
    let mut w = reg.watch("default").await.unwrap();
    assert_eq!(addrs(&w.next().await.unwrap()), [TX[0]]);
    // Three token lifetimes: renewed at 90 % each time, never refused.
    eventually(WAIT, "two renewals", || async { d.logins() >= 3 }).await;
    assert_eq!(d.refused(), 0, "a token expired before it was renewed");

    let before = d.logins();
    d.expire_tokens();
    lead(&d, &mut w, TX[1], "the new leader after re-login").await;
    assert!(d.refused() >= 1, "the expired token was never refused");
    assert!(d.logins() > before, "no new login after the 401");
    assert!(w.health().is_connected());
    reg.close().await.unwrap();
}

/// A wrong password fails `connect` with an error naming the TC and the user, and
/// the password appears in no error, Debug output or log line (trace level).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_refused_without_showing_it() {
    init_logs();
    const WRONG: &str = "Wrong-Secret-91bd";
    let d = with_login(Duration::from_secs(60), Duration::from_secs(1));
    d.set_members("default", &TX, Some(0));
    let buf = LogBuf::default();
    let guard = buf.capture_at(tracing::Level::TRACE);
    let good = config_with(
        &d.server_addr(),
        &[
            ("registry.raft.username", USER),
            ("registry.raft.password", SECRET),
        ],
    );
    let wrong = config_with(
        &d.server_addr(),
        &[
            ("registry.raft.username", USER),
            ("registry.raft.password", WRONG),
        ],
    );
    let reg = RaftRegistry::connect(&good).await.unwrap();
    let mut w = reg.watch("default").await.unwrap();
    assert_eq!(addrs(&w.next().await.unwrap()), [TX[0]]);
    let e = RaftRegistry::connect(&wrong).await.unwrap_err().to_string();
    let first = d.control_addrs()[0].clone();
    assert!(e.contains(&first), "the error does not name the TC: {e}");
    assert!(e.contains("refused") && e.contains(USER), "{e}");
    let settings = meshline_registry_others::raft::RaftSettings::from_config(&wrong).unwrap();
    let shown = [
        e,
        format!("{good:?}"),
        format!("{wrong:?}"),
        format!("{settings:?}"),
        format!("{reg:?}"),
    ];
    reg.close().await.unwrap();
    drop(guard);
    let logs = buf.text();
    for s in shown.iter().chain(std::iter::once(&logs)) {
        assert!(
            !s.contains(SECRET) && !s.contains(WRONG),
            "a password is shown: {s}"
        );
    }
}
