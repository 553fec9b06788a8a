//! The namingserver backend (`registry.type=seata`) against the testkit namingserver
//! double (Seata's namingserver HTTP API: register with vGroup metadata, discovery and
//! watch by vGroup, eviction, and a restart that keeps nothing): the conformance
//! suite, then what is the namingserver's own.
//!
//! The suite's cluster names are looked up as vGroups: an instance registered in
//! cluster `c` announces vGroup `c` (and every tx group mapped to `c`).

mod common;

use std::time::{Duration, Instant};

use common::*;
use meshline_registry_core::{Config, RegistryError, RegistryService};
use meshline_registry_others::NamingserverRegistry;
use meshline_registry_others::namingserver::NamingserverSettings;
use meshline_testkit::conformance::{Expiry, Garbage, Lifetime};
use meshline_testkit::{NamingserverDouble, NamingserverDoubleOptions};

/// The double evicts nodes not heard from for 3 s, checking every 200 ms.
const THRESHOLD: Duration = Duration::from_secs(3);
const CHECK: Duration = Duration::from_millis(200);
/// Our registrants send their registrations every 500 ms.
const HEARTBEAT: Duration = Duration::from_millis(500);
const WAIT: Duration = Duration::from_secs(10);

fn double() -> NamingserverDouble {
    NamingserverDouble::start(NamingserverDoubleOptions {
        heartbeat_threshold: THRESHOLD,
        check_period: CHECK,
        ..Default::default()
    })
    .unwrap()
}

fn config_with(addr: &str, extra: &[(&str, &str)]) -> Config {
    let base = [
        ("registry.type", "seata"),
        ("registry.seata.server-addr", addr),
    ];
    meshline_testkit::config_of(&base, extra)
}

async fn connect(cfg: &Config) -> NamingserverRegistry {
    try_connect(cfg).await.unwrap()
}

/// A client with `cfg`, heartbeating every [`HEARTBEAT`].
async fn try_connect(cfg: &Config) -> Result<NamingserverRegistry, RegistryError> {
    let mut s = NamingserverSettings::from_config(cfg).unwrap();
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    s.heartbeat_period = HEARTBEAT;
    NamingserverRegistry::connect_with(cfg, s).await
}

/// Two clients with `cfg`: one that has registered `addr` in `cluster`, and one to
/// watch it.
async fn registered(
    cfg: &Config,
    cluster: &str,
    addr: &str,
) -> (NamingserverRegistry, NamingserverRegistry) {
    let registrant = connect(cfg).await;
    let watcher = connect(cfg).await;
    registrant.register(cluster, &inst(addr)).await.unwrap();
    (registrant, watcher)
}

struct NsHarness {
    ns: NamingserverDouble,
}

async fn harness() -> NsHarness {
    init_logs();
    NsHarness { ns: double() }
}

meshline_testkit::conformance_harness!(NsHarness {
    registry: NamingserverRegistry,
    server: ns,
    // The eviction threshold; registrations are heartbeats with no TTL of their own.
    lifetime: Lifetime::fixed(THRESHOLD),
    // Backoff (at most 10 s) plus a heartbeat and a discovery, with margin.
    resync_within: Duration::from_secs(20),
    config: |h, extra| config_with(&h.ns.server_addr(), extra),
    connect: try_connect,
    expiry: Expiry {
        // The last heartbeat was at most one period before the crash.
        not_before: THRESHOLD - HEARTBEAT - CHECK,
        // Past the threshold at the next check, then one watch answer and one
        // discovery; 3 s of margin.
        within: THRESHOLD + CHECK + Duration::from_secs(3),
    },
});

impl Garbage for NsHarness {
    async fn put_garbage(&self, cluster: &str, round: u32) {
        self.ns.put_garbage("public", cluster, cluster, round);
    }
}

meshline_testkit::conformance_tests!(harness() => round_trip, drop_ends_watches,
    crash_removed_within_ttl, outage_stale_resync, garbage_skipped, empty_protection);

/// What a registration sends, as a TC: the cluster, the vGroups (the cluster name and
/// the tx groups `service.vgroupMapping` maps to it), `close` unregisters at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_like_a_tc_and_close_unregisters_at_once() {
    init_logs();
    let ns = double();
    let cfg = config_with(
        &ns.server_addr(),
        &[
            ("service.vgroupMapping.my_tx_group", "tc-cluster"),
            ("service.vgroupMapping.other_group", "elsewhere"),
        ],
    );
    let reg = connect(&cfg).await;
    assert!(reg.resolves_groups());
    reg.register("tc-cluster", &inst("10.5.0.1:8091"))
        .await
        .unwrap();
    assert_eq!(ns.instances("public", "tc-cluster"), ["10.5.0.1:8091"]);
    for vgroup in ["tc-cluster", "my_tx_group"] {
        let l = reg.lookup(vgroup).await.unwrap();
        assert_eq!(l.len(), 1, "{vgroup}");
        assert_eq!(l[0].to_string(), "10.5.0.1:8091");
    }
    assert!(reg.lookup("other_group").await.unwrap().is_empty());
    let d = ns.discovery("my_tx_group", "public");
    assert_eq!(d["clusterList"][0]["clusterName"], "tc-cluster");
    // Another namespace sees nothing.
    let other = connect(&config_with(
        &ns.server_addr(),
        &[("registry.seata.namespace", "dev")],
    ))
    .await;
    assert!(other.lookup("my_tx_group").await.unwrap().is_empty());
    reg.close().await.unwrap();
    assert!(
        ns.instances("public", "tc-cluster").is_empty(),
        "close did not unregister"
    );
    other.close().await.unwrap();
}

/// A restarted namingserver keeps nothing: our instance is registered again within a
/// heartbeat period (plus the health check that sees it back), and a watch that lost
/// its connection resumes and follows new changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namingserver_restart_is_survived() {
    init_logs();
    let mut ns = double();
    let cfg = config_with(&ns.server_addr(), &[("registry.empty-protection", "false")]);
    let (registrant, watcher) = registered(&cfg, "g", "10.6.0.1:8091").await;
    let mut w = watcher.watch("g").await.unwrap();
    wait_for(&mut w, WAIT, "registered", |s| s.len() == 1).await;

    ns.stop();
    wait_health(&mut w, WAIT, false).await;
    let t = Instant::now();
    tokio::task::block_in_place(|| ns.restart()).unwrap();
    assert!(
        ns.instances("public", "g").is_empty(),
        "the restart kept state"
    );
    eventually(WAIT, "registered again", || async {
        ns.instances("public", "g") == ["10.6.0.1:8091"]
    })
    .await;
    tracing::info!(after = ?t.elapsed(), "re-registered after the namingserver restart");
    wait_health(&mut w, Duration::from_secs(20), true).await;
    registrant
        .register("g", &inst("10.6.0.2:8091"))
        .await
        .unwrap();
    let s = wait_for(&mut w, WAIT, "a change after the restart", |s| s.len() == 2).await;
    assert_eq!(addrs(&s), ["10.6.0.1:8091", "10.6.0.2:8091"]);
    tracing::info!(after = ?t.elapsed(), "watch followed a change after the restart");
    registrant.close().await.unwrap();
    watcher.close().await.unwrap();
}

/// Two namingservers: registrations go to both; with the one that answered stopped,
/// reads go to the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_over_between_namingservers() {
    init_logs();
    let mut a = double();
    let b = double();
    let list = format!("{},{}", a.server_addr(), b.server_addr());
    let cfg = config_with(&list, &[]);
    let (registrant, watcher) = registered(&cfg, "f", "10.7.0.1:8091").await;
    assert_eq!(a.instances("public", "f"), ["10.7.0.1:8091"]);
    assert_eq!(b.instances("public", "f"), ["10.7.0.1:8091"]);
    let mut w = watcher.watch("f").await.unwrap();
    wait_for(&mut w, WAIT, "registered", |s| s.len() == 1).await;
    a.stop();
    registrant
        .register("f", &inst("10.7.0.2:8091"))
        .await
        .unwrap();
    wait_for(&mut w, WAIT, "a change seen through the second", |s| {
        s.len() == 2
    })
    .await;
    assert_eq!(watcher.lookup("f").await.unwrap().len(), 2);
    registrant.close().await.unwrap();
    watcher.close().await.unwrap();
}

/// No namingserver answers: `connect` fails naming the addresses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_namingservers_fail_connect() {
    init_logs();
    let port = meshline_testkit::closed_port().unwrap();
    let cfg = config_with(&format!("127.0.0.1:{port}"), &[]);
    let e = NamingserverRegistry::connect(&cfg)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains(&port.to_string()) && e.contains("health"), "{e}");
}

const USER: &str = "seata";
const SECRET: &str = "Naming-Secret-7e21";

fn with_login() -> NamingserverDouble {
    NamingserverDouble::start(NamingserverDoubleOptions {
        heartbeat_threshold: THRESHOLD,
        check_period: CHECK,
        credentials: Some((USER.into(), SECRET.into())),
        ..Default::default()
    })
    .unwrap()
}

/// Seata 2.4+'s namingserver login: without credentials every call but the health
/// check is refused with an error naming the keys; a wrong password fails `connect`
/// naming them, never showing it; with the right ones every call carries the token,
/// and a token the server no longer takes is renewed at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_guards_every_call_and_a_wrong_password_names_the_keys() {
    init_logs();
    const WRONG: &str = "Wrong-Secret-4f0a";
    let d = with_login();
    let login = |pass: &str| {
        config_with(
            &d.server_addr(),
            &[
                ("registry.seata.username", USER),
                ("registry.seata.password", pass),
            ],
        )
    };
    let none = connect(&config_with(&d.server_addr(), &[])).await;
    let e = none.lookup("g").await.unwrap_err().to_string();
    assert!(
        e.contains("HTTP 401") && e.contains("registry.seata.username and registry.seata.password"),
        "{e}"
    );
    let wrong = login(WRONG);
    let e = try_connect(&wrong).await.unwrap_err().to_string();
    assert!(
        e.contains("refused") && e.contains(USER) && e.contains("registry.seata.password"),
        "{e}"
    );
    let settings = format!("{:?}", NamingserverSettings::from_config(&wrong).unwrap());
    for shown in [&e, &settings] {
        assert!(!shown.contains(WRONG), "the password is shown: {shown}");
    }

    let reg = connect(&login(SECRET)).await;
    assert_eq!(d.logins(), 1, "one login at connect");
    let tc = inst("127.0.0.1:18091");
    reg.register("g", &tc).await.unwrap();
    let mut w = reg.watch("g").await.unwrap();
    assert_eq!(addrs(&w.next().await.unwrap()), ["127.0.0.1:18091"]);
    let refused = d.refused();
    // The server forgets its tokens: the next call is refused once, logs in again and
    // goes through.
    d.expire_tokens();
    let other = inst("127.0.0.1:18092");
    reg.register("g", &other).await.unwrap();
    let got = wait_for(&mut w, WAIT, "both TCs", |s| s.len() == 2).await;
    assert_eq!(addrs(&got), ["127.0.0.1:18091", "127.0.0.1:18092"]);
    assert!(d.refused() > refused, "the expired token was never refused");
    assert!(d.logins() >= 2, "no new login after the 401");
    reg.close().await.unwrap();
}

/// A TC of a Seata raft cluster registers with its role and the raft term: a client
/// lists the leader of the current term only, and the new leader after a change
/// (`handleMetadata`); a cluster of `MEMBER`s lists every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raft_cluster_lists_its_leader_of_the_term() {
    init_logs();
    let d = double();
    let tc = |port: u16, role: &str, term: i64| {
        serde_json::json!({
            "control": {"host": "127.0.0.1", "port": port - 1000},
            "transaction": {"host": "127.0.0.1", "port": port},
            "role": role, "term": term, "weight": 1.0, "healthy": true,
            "metadata": {"cluster-type": "raft", "vGroup": {"g": "u"}},
        })
    };
    for (port, role) in [(19091, "LEADER"), (19092, "FOLLOWER"), (19093, "LEARNER")] {
        assert!(d.register_raw("public", "raft", "u", tc(port, role, 5)));
    }
    let reg = connect(&config_with(&d.server_addr(), &[])).await;
    let mut w = reg.watch("g").await.unwrap();
    assert_eq!(addrs(&w.next().await.unwrap()), ["127.0.0.1:19091"]);
    // A new leader in term 6: it and the old one re-register with their new roles.
    assert!(d.register_raw("public", "raft", "u", tc(19092, "LEADER", 6)));
    assert!(d.register_raw("public", "raft", "u", tc(19091, "FOLLOWER", 6)));
    let got = wait_for(&mut w, WAIT, "the new leader", |s| {
        addrs(s) == ["127.0.0.1:19092"]
    })
    .await;
    assert_eq!(addrs(&got), ["127.0.0.1:19092"]);
    reg.close().await.unwrap();
}
