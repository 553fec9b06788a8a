//! The Consul backend against the in-process Consul agent double (meshline-testkit),
//! which really blocks on blocking queries, really expires TTL checks and loses all
//! state on restart.

use std::net::TcpListener;
use std::time::Duration;

use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Config, Health, Instance, RegistryService, Snapshot, Watch};
use meshline_registry_others::ConsulRegistry;
use meshline_testkit::{ConsulDouble, ConsulDoubleOptions};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "meshline=debug,warn".into()),
        )
        .try_init();
}

/// Collects this thread's log lines (for asserting that skipped entries are named).
#[derive(Clone, Default)]
struct LogBuf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogBuf {
    fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let me = self.clone();
        tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .with_ansi(false)
                .with_max_level(tracing::Level::WARN)
                .with_writer(move || me.clone())
                .finish(),
        )
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

fn config(consul: &ConsulDouble, extra: &[(&str, &str)]) -> Config {
    let mut l = ConfigLoader::new()
        .set("registry.type", "consul")
        .set("registry.consul.serverAddr", consul.server_addr())
        .set("registry.consul.ttl", "2s")
        .set("registry.consul.deregisterCriticalServiceAfter", "4s");
    for (k, v) in extra {
        l = l.set(*k, *v);
    }
    l.load().unwrap()
}

fn inst(s: &str) -> Instance {
    Instance::parse(s).unwrap()
}

fn addrs(s: &Snapshot) -> Vec<String> {
    s.instances().iter().map(|i| i.to_string()).collect()
}

/// Waits (up to [`WAIT`]) for a snapshot satisfying `pred`.
async fn wait_for(w: &mut Watch, what: &str, pred: impl Fn(&Snapshot) -> bool) -> Snapshot {
    let cur = w.current();
    if pred(&cur) {
        return cur;
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match tokio::time::timeout_at(deadline, w.next()).await {
            Ok(Ok(s)) if pred(&s) => return s,
            Ok(Ok(_)) => continue,
            Ok(Err(e)) => panic!("watch ended while waiting for {what}: {e}"),
            Err(_) => panic!(
                "timed out waiting for {what}; last snapshot {:?}",
                addrs(&w.current())
            ),
        }
    }
}

async fn wait_health(w: &mut Watch, what: &str, pred: impl Fn(&Health) -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !pred(&w.health()) {
        if tokio::time::timeout_at(deadline, w.health_changed())
            .await
            .is_err()
        {
            panic!("timed out waiting for health {what}; now {:?}", w.health());
        }
    }
}

async fn raw_put(consul: &ConsulDouble, path: &str, body: Value) -> reqwest::StatusCode {
    reqwest::Client::new()
        .put(format!("{}{path}", consul.url()))
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .status()
}

async fn raw_get(consul: &ConsulDouble, path: &str) -> Value {
    let r = reqwest::Client::new()
        .get(format!("{}{path}", consul.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{path}");
    serde_json::from_slice(&r.bytes().await.unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_lookup_watch_unregister_round_trip() {
    init_logs();
    let consul = ConsulDouble::start(ConsulDoubleOptions::default()).unwrap();
    let a = ConsulRegistry::connect(&config(&consul, &[]))
        .await
        .unwrap();
    let b = ConsulRegistry::connect(&config(&consul, &[]))
        .await
        .unwrap();
    assert_eq!(a.kind(), "consul");

    let mut w = b.watch("rt").await.unwrap();
    assert!(w.next().await.unwrap().is_empty());

    let i1 = inst("10.1.0.1:8091");
    let i2 = inst("[2001:db8::7]:8092").with_weight(3).with_zone("z1");
    a.register("rt", &i1).await.unwrap();
    a.register("rt", &i2).await.unwrap();
    let s = wait_for(&mut w, "both instances", |s| s.len() == 2).await;
    let got2 = s.instances().iter().find(|i| i.key() == i2.key()).unwrap();
    assert_eq!(got2.weight(), 3);
    assert_eq!(got2.zone(), Some("z1"));
    assert_eq!(addrs(&s), ["10.1.0.1:8091", "[2001:db8::7]:8092"]);

    // What we wrote is Seata's layout, readable by a Seata client (tag + passing).
    let raw = raw_get(&consul, "/v1/health/service/rt?passing=true&tag=services").await;
    let ids: Vec<&str> = raw
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["Service"]["ID"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["rt-10.1.0.1:8091", "rt-2001:db8:0:0:0:0:0:7:8092"]);

    let mut looked = a.lookup("rt").await.unwrap();
    looked.sort_by(|x, y| x.key().cmp(y.key()));
    assert_eq!(looked.len(), 2);
    assert_eq!(looked[0].key(), i1.key());

    a.unregister("rt", &i1).await.unwrap();
    let s = wait_for(&mut w, "i1 removed", |s| s.len() == 1).await;
    assert_eq!(addrs(&s), ["[2001:db8::7]:8092"]);

    // close() deregisters what it registered.
    a.close().await.unwrap();
    assert!(b.lookup("rt").await.unwrap().is_empty());
    // Empty protection (default): the watcher keeps the last member.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(w.current().len(), 1);
    assert!(matches!(
        a.register("rt", &i1).await,
        Err(meshline_registry_core::RegistryError::Closed { .. })
    ));
    b.close().await.unwrap();
    // Once any snapshot not yet read is taken, the closed registry's watch ends.
    let ended = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            if let Err(e) = w.next().await {
                return e;
            }
        }
    })
    .await
    .expect("the watch of a closed registry must end");
    assert!(
        matches!(ended, meshline_registry_core::RegistryError::Closed { .. }),
        "{ended}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_registered_like_a_seata_tc_is_discovered() {
    init_logs();
    let consul = ConsulDouble::start(ConsulDoubleOptions::default()).unwrap();
    // The "TC": something listening, so the agent's TCP check passes.
    let tc = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tc.local_addr().unwrap().port();
    // ConsulRegistryServiceImpl's registration, sent as raw HTTP.
    let status = raw_put(
        &consul,
        "/v1/agent/service/register",
        json!({
            "ID": format!("default-127.0.0.1:{port}"),
            "Name": "default",
            "Tags": ["services"],
            "Address": "127.0.0.1",
            "Port": port,
            "Check": {"TCP": format!("127.0.0.1:{port}"), "Interval": "10s", "Timeout": "1s",
                      "DeregisterCriticalServiceAfter": "20s"}
        }),
    )
    .await;
    assert_eq!(status, 200);
    let c = ConsulRegistry::connect(&config(&consul, &[]))
        .await
        .unwrap();
    let mut w = c.watch("default").await.unwrap();
    let s = wait_for(&mut w, "the Seata TC", |s| s.len() == 1).await;
    assert_eq!(addrs(&s), [format!("127.0.0.1:{port}")]);
    assert_eq!(c.lookup("default").await.unwrap().len(), 1);
    drop(tc);
    c.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_entries_are_skipped() {
    init_logs();
    let consul = ConsulDouble::start(ConsulDoubleOptions::default()).unwrap();
    for (id, addr, port) in [
        ("m-good", "10.2.0.1", 8091),
        ("m-port0", "10.2.0.2", 0),
        ("m-badhost", "not a host!", 8091),
        ("m-bigport", "10.2.0.3", 70000),
    ] {
        let st = raw_put(
            &consul,
            "/v1/agent/service/register",
            json!({"ID": id, "Name": "m", "Tags": ["services"], "Address": addr, "Port": port,
                   "Check": {"TTL": "60s", "Status": "passing"}}),
        )
        .await;
        assert_eq!(st, 200, "{id}");
    }
    let c = ConsulRegistry::connect(&config(&consul, &[]))
        .await
        .unwrap();
    let logs = LogBuf::default();
    let guard = logs.capture();
    let mut w = c.watch("m").await.unwrap();
    let s = w.next().await.unwrap();
    assert_eq!(addrs(&s), ["10.2.0.1:8091"]);
    assert_eq!(c.lookup("m").await.unwrap().len(), 1);
    drop(guard);
    let text = logs.text();
    for id in ["m-port0", "m-badhost", "m-bigport"] {
        assert!(
            text.contains("WARN") && text.contains(&format!("service_id=\"{id}\"")),
            "no warning naming {id}: {text}"
        );
    }
    assert!(!text.contains("m-good"), "{text}");
    c.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ttl_check_is_kept_passing_and_expires_without_us() {
    init_logs();
    let consul = ConsulDouble::start(ConsulDoubleOptions::default()).unwrap();
    let cfg = config(&consul, &[]); // TTL 2 s
    let a = ConsulRegistry::connect(&cfg).await.unwrap();
    let b = ConsulRegistry::connect(&cfg).await.unwrap();
    a.register("ttl", &inst("10.3.0.1:1")).await.unwrap();
    // For over two TTLs it stays passing: the keeper passes the check every TTL/3.
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(b.lookup("ttl").await.unwrap().len(), 1);
    }
    // A crashed client (abandoned: no deregistration) stops passing: the check expires.
    a.abandon();
    drop(a);
    let deadline = tokio::time::Instant::now() + WAIT;
    while !b.lookup("ttl").await.unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the TTL check never expired"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let checks = raw_get(&consul, "/v1/agent/checks").await;
    assert_eq!(checks["service:ttl-10.3.0.1:1"]["Status"], "critical");
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_restart_keeps_snapshot_goes_stale_resyncs_and_reregisters() {
    init_logs();
    let mut consul = ConsulDouble::start(ConsulDoubleOptions::default()).unwrap();
    let a = ConsulRegistry::connect(&config(&consul, &[]))
        .await
        .unwrap();
    let b = ConsulRegistry::connect(&config(&consul, &[]))
        .await
        .unwrap();
    a.register("f", &inst("10.4.0.1:1")).await.unwrap();
    a.register("f", &inst("10.4.0.2:1")).await.unwrap();
    let mut w = b.watch("f").await.unwrap();
    wait_for(&mut w, "two members", |s| s.len() == 2).await;
    // Push the service's index well above what the restarted (empty) agent will have,
    // so a client that kept its old index would sit in a blocking query until `wait`
    // (30 s) ran out instead of noticing the restart.
    for _ in 0..20 {
        a.register("f", &inst("10.4.0.1:1")).await.unwrap();
    }

    consul.stop();
    wait_health(&mut w, "stale", |h| matches!(h, Health::Stale { .. })).await;
    assert_eq!(
        w.current().len(),
        2,
        "the last snapshot is kept while stale"
    );

    consul.restart().unwrap();
    wait_health(&mut w, "connected", Health::is_connected).await;
    // Our registrations come back by themselves (the agent lost them).
    let c = ConsulRegistry::connect(&config(&consul, &[]))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while c.lookup("f").await.unwrap().len() != 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "registrations were not restored"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The watch follows the new agent (its index went backwards and was reset).
    c.register("f", &inst("10.4.0.3:1")).await.unwrap();
    let s = wait_for(&mut w, "three members after restart", |s| s.len() == 3).await;
    assert_eq!(addrs(&s), ["10.4.0.1:1", "10.4.0.2:1", "10.4.0.3:1"]);
    for r in [a, b, c] {
        r.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acl_token_is_sent() {
    init_logs();
    let consul = ConsulDouble::start(ConsulDoubleOptions {
        acl_token: Some("s3cret".into()),
        ..Default::default()
    })
    .unwrap();
    let good = ConsulRegistry::connect(&config(&consul, &[("registry.consul.aclToken", "s3cret")]))
        .await
        .unwrap();
    good.register("acl", &inst("10.5.0.1:1")).await.unwrap();
    assert_eq!(good.lookup("acl").await.unwrap().len(), 1);
    let bad = ConsulRegistry::connect(&config(&consul, &[]))
        .await
        .unwrap();
    let err = bad.lookup("acl").await.unwrap_err().to_string();
    assert!(err.contains("403"), "{err}");
    let err = bad
        .register("acl", &inst("10.5.0.2:1"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("Permission denied"), "{err}");
    good.close().await.unwrap();
}

/// `connect` checks the agent: a closed port fails it with the address and the cause.
#[tokio::test]
async fn an_unreachable_agent_is_an_error_naming_it() {
    let port = meshline_testkit::closed_port().unwrap();
    let cfg = ConfigLoader::new()
        .set("registry.type", "consul")
        .set("registry.consul.serverAddr", format!("127.0.0.1:{port}"))
        .load()
        .unwrap();
    let err = ConsulRegistry::connect(&cfg).await.unwrap_err().to_string();
    assert!(
        err.contains(&format!(
            "consul registry at http://127.0.0.1:{port} unavailable"
        )),
        "{err}"
    );
    assert!(err.contains("connect"), "{err}");
    assert!(err.contains("Connection refused"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_registry_deregisters_at_once_and_ends_its_watches() {
    init_logs();
    let consul = ConsulDouble::start(ConsulDoubleOptions::default()).unwrap();
    // A TTL far longer than the test: only an explicit deregistration removes it.
    let cfg = config(&consul, &[("registry.consul.ttl", "60s")]);
    let a = ConsulRegistry::connect(&cfg).await.unwrap();
    let b = ConsulRegistry::connect(&cfg).await.unwrap();
    a.register("drop", &inst("10.7.0.1:1")).await.unwrap();
    let mut own = a.watch("drop").await.unwrap();
    assert_eq!(own.next().await.unwrap().len(), 1);
    drop(a);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while !b.lookup("drop").await.unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "drop did not deregister"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ended = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            if own.next().await.is_err() {
                return;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the dropped registry's watch did not end");
    b.close().await.unwrap();
}
