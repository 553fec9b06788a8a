//! The etcd backend against an etcd with its **default** keep-alive policy, which
//! closes a connection whose HTTP/2 keep-alive pings come more often than it allows:
//! idle streams stay up, and the keep-alive etcd accepts still finds a frozen server.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{config_2s, init_logs, raw, until_members};
use meshline_registry_core::RegistryService;
use meshline_registry_etcd::{EtcdRegistry, instance_key};
use meshline_testkit::Etcd;
use meshline_testkit::watch::{addrs, inst};

/// How long the idle test holds its watch and registration: several times etcd's
/// 5 s minimum ping interval, and long enough for the old 2 s keep-alive to be cut
/// (it was, after about 8 s, three times in 30 s).
const IDLE: Duration = Duration::from_secs(30);

/// An idle watch and an idle registration stay up against an etcd with its **default**
/// keep-alive policy (testkit passes no `--grpc-keepalive-*` flag: pings at most every
/// 5 s, none without an open stream). Zero breaks: the watch's health never leaves
/// `Connected`, etcd sees no new watch stream, lease keep-alive stream or range request
/// (no resync, no re-listing), and the registered key is the same write on the same
/// lease at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_watch_and_registration_survive_etcd_default_keepalive_policy() {
    init_logs();
    let etcd = Etcd::start().expect("etcd");
    let ep = etcd.endpoint();
    // The registrant's lease (TTL 30 s) is kept alive every 10 s: its connection is
    // idle between keep-alives, as the watcher's connection is all the time.
    let registrant_config = config_2s(&ep, &[("registry.etcd3.ttl", "30s")]);
    let registrant = EtcdRegistry::connect(&registrant_config).await.unwrap();
    let watcher = EtcdRegistry::connect(&config_2s(&ep, &[])).await.unwrap();
    let me = inst("10.7.7.7:8091");
    registrant.register("default", &me).await.unwrap();
    let lease = registrant.lease_id().await.unwrap();
    let mut w = watcher.watch("default").await.unwrap();
    until_members(&mut w, 1, Duration::from_secs(5), "registered").await;
    assert!(w.health().is_connected());

    // Every health change of the watch during the idle period (there must be none).
    let changes = Arc::new(Mutex::new(Vec::new()));
    let mut hw = w.clone();
    let log = changes.clone();
    let health_log = tokio::spawn(async move {
        while let Ok(h) = hw.health_changed().await {
            eprintln!("watch health changed: {h:?}");
            log.lock().unwrap().push(h);
        }
    });

    let mut raw = raw(&ep).await;
    let key = instance_key("default", &me);
    let before = raw.get(key.as_str(), None).await.unwrap().kvs()[0].clone();
    assert_eq!(before.lease(), lease);
    // The watch and lease keep-alive streams are opened by background tasks: wait for
    // both before taking the counters (the raw client's get above is in them too).
    let deadline = Instant::now() + Duration::from_secs(10);
    while etcd.grpc_started("Watch").unwrap() == 0
        || etcd.grpc_started("LeaseKeepAlive").unwrap() == 0
    {
        assert!(Instant::now() < deadline, "the streams were never opened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let counters = |etcd: &Etcd| {
        ["Watch", "LeaseKeepAlive", "Range", "LeaseGrant", "Put"]
            .map(|m| (m, etcd.grpc_started(m).expect("etcd metrics")))
    };
    let started_before = counters(&etcd);
    eprintln!("etcd gRPC calls started before the idle period: {started_before:?}");

    tokio::time::sleep(IDLE).await;

    let started_after = counters(&etcd);
    eprintln!("etcd gRPC calls started after {IDLE:?} idle: {started_after:?}");
    let seen = changes.lock().unwrap().clone();
    assert!(
        seen.is_empty(),
        "the watch's health changed while idle (it went stale {} time(s)): {seen:?}",
        seen.iter().filter(|h| !h.is_connected()).count()
    );
    assert!(w.health().is_connected(), "{:?}", w.health());
    assert_eq!(
        started_before, started_after,
        "the clients re-opened streams or re-listed while idle (a break and a resync)"
    );
    let after = raw.get(key.as_str(), None).await.unwrap();
    let after = after.kvs().first().expect("registration gone after idling");
    assert_eq!(after.lease(), lease, "registration moved to another lease");
    assert_eq!(
        after.mod_revision(),
        before.mod_revision(),
        "registration re-written (the lease keep-alive stream broke)"
    );
    assert_eq!(registrant.lease_id().await, Some(lease));
    assert_eq!(addrs(&w.current()), vec!["10.7.7.7:8091"]);

    health_log.abort();
    registrant.close().await.unwrap();
    watcher.close().await.unwrap();
}

/// The keep-alive that etcd's default policy accepts still finds a dead peer fast:
/// with etcd frozen (SIGSTOP: the kernel keeps the connection open, nothing answers),
/// the idle watch goes stale within `keepaliveTime + keepaliveTimeout` (1 s + 1 s by
/// default; 3 s allowed), and is live again once etcd resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_pings_find_a_frozen_etcd() {
    init_logs();
    let mut etcd = Etcd::start().expect("etcd");
    let watcher = EtcdRegistry::connect(&config_2s(&etcd.endpoint(), &[]))
        .await
        .unwrap();
    let mut w = watcher.watch("default").await.unwrap();
    w.next().await.unwrap();
    // The watch stream is opened in the background: freeze etcd only once it is open.
    let deadline = Instant::now() + Duration::from_secs(10);
    while etcd.grpc_started("Watch").unwrap() == 0 {
        assert!(
            Instant::now() < deadline,
            "the watch stream was never opened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = Instant::now();
    etcd.pause().expect("SIGSTOP etcd");
    let stale = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let h = w.health_changed().await.unwrap();
            if !h.is_connected() {
                return h;
            }
        }
    })
    .await;
    let noticed = t.elapsed();
    etcd.resume().expect("SIGCONT etcd");
    let stale = stale.expect("a frozen etcd was not noticed within 20 s");
    meshline_testkit::figures::report(
        "etcd_keepalive",
        &format!("frozen etcd noticed after {noticed:?}: {stale:?}"),
    );
    assert!(
        noticed <= Duration::from_secs(3),
        "noticed after {noticed:?}"
    );
    meshline_testkit::watch::wait_health(&mut w, Duration::from_secs(15), true).await;
    watcher.close().await.unwrap();
}
