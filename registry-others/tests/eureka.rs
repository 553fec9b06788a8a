//! The Eureka backend against the in-process Eureka server double (meshline-testkit),
//! which really evicts expired leases, answers 404 to unknown heartbeats, serves deltas
//! with `actionType` and `apps__hashcode`, and loses all state on restart.

use std::time::Duration;

use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{
    Config, Health, Instance, RegistryError, RegistryService, Snapshot, Watch,
};
use meshline_registry_others::EurekaRegistry;
use meshline_testkit::{EurekaDouble, EurekaDoubleOptions};
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

fn double() -> EurekaDouble {
    EurekaDouble::start(EurekaDoubleOptions {
        eviction_interval: Duration::from_millis(200),
        ..Default::default()
    })
    .unwrap()
}

fn config(eureka: &EurekaDouble) -> Config {
    ConfigLoader::new()
        .set("registry.type", "eureka")
        .set("registry.eureka.serviceUrl", eureka.service_url())
        .set("registry.eureka.renewalInterval", "1s")
        .set("registry.eureka.leaseDuration", "3s")
        .set("registry.eureka.refreshInterval", "200ms")
        .load()
        .unwrap()
}

fn inst(s: &str) -> Instance {
    Instance::parse(s).unwrap()
}

fn addrs(s: &Snapshot) -> Vec<String> {
    s.instances().iter().map(|i| i.to_string()).collect()
}

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

/// A registration as a Java Eureka client (Seata's TC) sends it.
fn java_instance(app: &str, id: &str, ip: &str, port: Value, status: &str) -> Value {
    json!({"instance": {
        "instanceId": id, "hostName": ip, "app": app, "ipAddr": ip, "status": status,
        "overriddenstatus": "UNKNOWN",
        "port": {"$": port, "@enabled": "true"}, "securePort": {"$": 443, "@enabled": "false"},
        "countryId": 1,
        "dataCenterInfo": {"@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", "name": "MyOwn"},
        "leaseInfo": {"renewalIntervalInSecs": 30, "durationInSecs": 90},
        "metadata": {"weight": "1"},
        "vipAddress": app.to_lowercase(), "secureVipAddress": app.to_lowercase(),
        "lastDirtyTimestamp": "1700000000000"
    }})
}

async fn raw_post(eureka: &EurekaDouble, app: &str, body: &Value) -> reqwest::StatusCode {
    reqwest::Client::new()
        .post(format!("{}/apps/{app}", eureka.service_url()))
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .status()
}

async fn raw_get(eureka: &EurekaDouble, path: &str) -> Value {
    let r = reqwest::Client::new()
        .get(format!("{}{path}", eureka.service_url()))
        .header("Accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{path}");
    serde_json::from_slice(&r.bytes().await.unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_lookup_watch_unregister_round_trip() {
    init_logs();
    let eureka = double();
    let a = EurekaRegistry::connect(&config(&eureka)).await.unwrap();
    let b = EurekaRegistry::connect(&config(&eureka)).await.unwrap();
    assert_eq!(a.kind(), "eureka");
    let mut w = b.watch("rt").await.unwrap();
    assert!(w.next().await.unwrap().is_empty());

    let i1 = inst("10.1.0.1:8091");
    let i2 = inst("10.1.0.2:8092").with_weight(3).with_zone("z1");
    a.register("rt", &i1).await.unwrap();
    a.register("rt", &i2).await.unwrap();
    let s = wait_for(&mut w, "both instances", |s| s.len() == 2).await;
    let got2 = s.instances().iter().find(|i| i.key() == i2.key()).unwrap();
    assert_eq!(got2.weight(), 3);
    assert_eq!(got2.zone(), Some("z1"));

    // Seata's layout: application RT, instance ID <ip>:<cluster>:<port>, weight metadata.
    let raw = raw_get(&eureka, "/apps/RT").await;
    let ids: Vec<&str> = raw["application"]["instance"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["instanceId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["10.1.0.1:rt:8091", "10.1.0.2:rt:8092"]);
    assert_eq!(raw["application"]["instance"][1]["metadata"]["weight"], "3");

    assert_eq!(a.lookup("rt").await.unwrap().len(), 2);
    assert_eq!(
        a.lookup("RT").await.unwrap().len(),
        2,
        "cluster names are case-blind"
    );

    a.unregister("rt", &i1).await.unwrap();
    let s = wait_for(&mut w, "i1 removed", |s| s.len() == 1).await;
    assert_eq!(addrs(&s), ["10.1.0.2:8092"]);

    a.close().await.unwrap();
    assert!(b.lookup("rt").await.unwrap().is_empty());
    assert!(matches!(
        a.register("rt", &i1).await,
        Err(RegistryError::Closed { .. })
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
    assert!(matches!(ended, RegistryError::Closed { .. }), "{ended}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_registered_like_a_seata_tc_is_discovered() {
    init_logs();
    let eureka = double();
    let st = raw_post(
        &eureka,
        "DEFAULT",
        &java_instance(
            "DEFAULT",
            "127.0.0.1:default:8091",
            "127.0.0.1",
            json!(8091),
            "UP",
        ),
    )
    .await;
    assert_eq!(st, 204);
    let c = EurekaRegistry::connect(&config(&eureka)).await.unwrap();
    let mut w = c.watch("default").await.unwrap();
    let s = w.next().await.unwrap();
    assert_eq!(addrs(&s), ["127.0.0.1:8091"]);
    assert_eq!(s.instances()[0].weight(), 1);
    assert_eq!(c.lookup("default").await.unwrap().len(), 1);
    c.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_not_up_instances_are_skipped() {
    init_logs();
    let eureka = double();
    for (id, ip, port, status) in [
        ("good", "10.2.0.1", json!(8091), "UP"),
        ("down", "10.2.0.2", json!(8091), "DOWN"),
        ("port0", "10.2.0.3", json!(0), "UP"),
        ("badip", "not an ip!", json!(8091), "UP"),
        ("portstr", "10.2.0.4", json!("eighty"), "UP"),
    ] {
        let st = raw_post(&eureka, "M", &java_instance("M", id, ip, port, status)).await;
        assert_eq!(st, 204, "{id}");
    }
    let c = EurekaRegistry::connect(&config(&eureka)).await.unwrap();
    let logs = LogBuf::default();
    let guard = logs.capture();
    let mut w = c.watch("m").await.unwrap();
    assert_eq!(addrs(&w.next().await.unwrap()), ["10.2.0.1:8091"]);
    assert_eq!(c.lookup("m").await.unwrap().len(), 1);
    drop(guard);
    let text = logs.text();
    for id in ["port0", "badip", "portstr"] {
        assert!(
            text.contains("WARN") && text.contains(&format!("instance=\"{id}\"")),
            "no warning naming {id}: {text}"
        );
    }
    // DOWN is filtered, not malformed: no warning for it.
    assert!(!text.contains("instance=\"down\""), "{text}");
    c.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_the_lease_and_a_dead_client_is_evicted() {
    init_logs();
    let eureka = double();
    let a = EurekaRegistry::connect(&config(&eureka)).await.unwrap();
    let b = EurekaRegistry::connect(&config(&eureka)).await.unwrap();
    a.register("lease", &inst("10.3.0.1:1")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await; // longer than the 3 s lease
    assert_eq!(b.lookup("lease").await.unwrap().len(), 1);
    a.abandon(); // a crash: no cancel, the lease must run out
    drop(a);
    let deadline = tokio::time::Instant::now() + WAIT;
    while !b.lookup("lease").await.unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lease never expired"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_keeps_snapshot_goes_stale_resyncs_and_reregisters() {
    init_logs();
    let mut eureka = double();
    let a = EurekaRegistry::connect(&config(&eureka)).await.unwrap();
    let b = EurekaRegistry::connect(&config(&eureka)).await.unwrap();
    a.register("f", &inst("10.4.0.1:1")).await.unwrap();
    a.register("f", &inst("10.4.0.2:1")).await.unwrap();
    let mut w = b.watch("f").await.unwrap();
    wait_for(&mut w, "two members", |s| s.len() == 2).await;

    eureka.stop();
    wait_health(&mut w, "stale", |h| matches!(h, Health::Stale { .. })).await;
    assert_eq!(
        w.current().len(),
        2,
        "the last snapshot is kept while stale"
    );

    eureka.restart().unwrap();
    wait_health(&mut w, "connected", Health::is_connected).await;
    let c = EurekaRegistry::connect(&config(&eureka)).await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while c.lookup("f").await.unwrap().len() != 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "registrations were not restored after the restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.register("f", &inst("10.4.0.3:1")).await.unwrap();
    let s = wait_for(&mut w, "three members after restart", |s| s.len() == 3).await;
    assert_eq!(addrs(&s), ["10.4.0.1:1", "10.4.0.2:1", "10.4.0.3:1"]);
    for r in [a, b, c] {
        r.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_delta_or_with_a_stale_delta_the_full_fetch_takes_over() {
    init_logs();
    // 403 on /apps/delta.
    let no_delta = EurekaDouble::start(EurekaDoubleOptions {
        delta_enabled: false,
        ..Default::default()
    })
    .unwrap();
    // Deltas that never hold anything: the hash code check must catch the changes.
    let empty_delta = EurekaDouble::start(EurekaDoubleOptions {
        retention: Duration::ZERO,
        ..Default::default()
    })
    .unwrap();
    for eureka in [&no_delta, &empty_delta] {
        let a = EurekaRegistry::connect(&config(eureka)).await.unwrap();
        let b = EurekaRegistry::connect(&config(eureka)).await.unwrap();
        let mut w = b.watch("d").await.unwrap();
        a.register("d", &inst("10.6.0.1:1")).await.unwrap();
        wait_for(&mut w, "the member", |s| s.len() == 1).await;
        // Each step changes the status counts, so the hash code differs (a swap of
        // two UP instances within one refresh would not, in Eureka as here: the hash is
        // a consistency check of applied deltas, not of content).
        a.register("d", &inst("10.6.0.2:1")).await.unwrap();
        wait_for(&mut w, "two members", |s| s.len() == 2).await;
        a.unregister("d", &inst("10.6.0.1:1")).await.unwrap();
        let s = wait_for(&mut w, "the first one gone", |s| s.len() == 1).await;
        assert_eq!(addrs(&s), ["10.6.0.2:1"]);
        a.close().await.unwrap();
        b.close().await.unwrap();
    }
}

#[tokio::test]
async fn a_missing_service_url_or_server_is_an_error() {
    let cfg = ConfigLoader::new()
        .set("registry.type", "eureka")
        .load()
        .unwrap();
    let err = EurekaRegistry::connect(&cfg).await.unwrap_err().to_string();
    assert!(err.contains("serviceUrl is required"), "{err}");
    // `connect` checks the server: a closed port fails it with the address and the cause.
    let port = meshline_testkit::closed_port().unwrap();
    let url = format!("http://127.0.0.1:{port}/eureka");
    let cfg = ConfigLoader::new()
        .set("registry.type", "eureka")
        .set("registry.eureka.serviceUrl", url.as_str())
        .load()
        .unwrap();
    let err = EurekaRegistry::connect(&cfg).await.unwrap_err().to_string();
    assert!(
        err.contains(&format!("eureka registry at {url} unavailable")),
        "{err}"
    );
    assert!(err.contains("Connection refused"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_registry_cancels_at_once_and_ends_its_watches() {
    init_logs();
    let eureka = double();
    // A lease far longer than the test: only an explicit cancel removes it.
    let cfg = ConfigLoader::new()
        .set("registry.type", "eureka")
        .set("registry.eureka.serviceUrl", eureka.service_url())
        .set("registry.eureka.leaseDuration", "60s")
        .set("registry.eureka.refreshInterval", "200ms")
        .load()
        .unwrap();
    let a = EurekaRegistry::connect(&cfg).await.unwrap();
    let b = EurekaRegistry::connect(&cfg).await.unwrap();
    a.register("drop", &inst("10.7.0.1:1")).await.unwrap();
    let mut own = a.watch("drop").await.unwrap();
    assert_eq!(own.next().await.unwrap().len(), 1);
    drop(a);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while !b.lookup("drop").await.unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "drop did not cancel"
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
