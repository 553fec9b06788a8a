//! The Eureka backend against the in-process Eureka server double (meshline-testkit),
//! which really evicts expired leases, answers 404 to unknown heartbeats, serves deltas
//! with `actionType` and `apps__hashcode`, and loses all state on restart: the
//! conformance suite, then what is Eureka's own (Seata's application layout, status
//! filtering, warnings, delta fall-back).

mod common;

use std::time::Duration;

use common::*;
use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Config, RegistryService};
use meshline_registry_others::EurekaRegistry;
use meshline_testkit::conformance::{Crash, Expiry, Garbage, Harness, Opts, Server};
use meshline_testkit::{EurekaDouble, EurekaDoubleOptions};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);
const LEASE: Duration = Duration::from_secs(3);
const EVICTION: Duration = Duration::from_millis(200);

fn double() -> EurekaDouble {
    EurekaDouble::start(EurekaDoubleOptions {
        eviction_interval: EVICTION,
        ..Default::default()
    })
    .unwrap()
}

/// A config for the double: heartbeat every 1 s, 3 s lease, fetch every 200 ms; then
/// `extra` keys.
fn config_with(eureka: &EurekaDouble, extra: &[(&str, &str)]) -> Config {
    let mut l = ConfigLoader::new()
        .set("registry.type", "eureka")
        .set("registry.eureka.serviceUrl", eureka.service_url())
        .set("registry.eureka.renewalInterval", "1s")
        .set("registry.eureka.leaseDuration", "3s")
        .set("registry.eureka.refreshInterval", "200ms");
    for (k, v) in extra {
        l = l.set(*k, *v);
    }
    l.load().unwrap()
}

fn config(eureka: &EurekaDouble) -> Config {
    config_with(eureka, &[])
}

struct EurekaHarness {
    eureka: EurekaDouble,
}

async fn harness() -> EurekaHarness {
    init_logs();
    EurekaHarness { eureka: double() }
}

impl Harness for EurekaHarness {
    type Registry = EurekaRegistry;

    async fn connect(&self, o: Opts) -> EurekaRegistry {
        let extra = o.keys("registry.eureka.leaseDuration", "3s", "60s");
        EurekaRegistry::connect(&config_with(&self.eureka, &extra))
            .await
            .unwrap()
    }
    fn server(&mut self) -> &mut dyn Server {
        &mut self.eureka
    }
    fn ttl(&self) -> Duration {
        LEASE
    }
    fn resync_within(&self) -> Duration {
        WAIT
    }
}

impl Crash for EurekaHarness {
    fn crash(&self, reg: EurekaRegistry) {
        reg.abandon();
        drop(reg);
    }
    /// Heartbeats every 1 s; the double evicts a lease 3 s after its last renewal
    /// (checked every 200 ms), and watchers fetch every 200 ms.
    fn expiry(&self) -> Expiry {
        Expiry {
            not_before: LEASE / 2,
            within: LEASE + EVICTION + Duration::from_millis(200) + Duration::from_secs(2),
        }
    }
}

impl Garbage for EurekaHarness {
    async fn put_garbage(&self, cluster: &str, round: u32) {
        let app = cluster.to_uppercase();
        for (id, ip, port) in malformed() {
            let id = format!("{id}-{round}");
            let st = raw_post(
                &self.eureka,
                &app,
                &java_instance(&app, &id, ip, port, "UP"),
            )
            .await;
            assert_eq!(st, 204, "{id}");
        }
    }
}

/// Instances with a port 0, an address that is none and a port that is no number.
fn malformed() -> [(&'static str, &'static str, Value); 3] {
    [
        ("port0", "10.2.0.3", json!(0)),
        ("badip", "not an ip!", json!(8091)),
        ("portstr", "10.2.0.4", json!("eighty")),
    ]
}

meshline_testkit::conformance_tests!(harness() => round_trip, drop_ends_watches,
    crash_removed_within_ttl, outage_stale_resync, garbage_skipped, empty_protection);

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

/// What we register is Seata's layout (application `<CLUSTER>`, instance ID
/// `<ip>:<cluster>:<port>`, weight metadata), weight and zone come back, and cluster
/// names are case-blind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seata_layout_and_metadata() {
    init_logs();
    let eureka = double();
    let a = EurekaRegistry::connect(&config(&eureka)).await.unwrap();
    let b = EurekaRegistry::connect(&config(&eureka)).await.unwrap();
    assert_eq!(a.kind(), "eureka");
    let mut w = b.watch("rt").await.unwrap();
    let i1 = inst("10.1.0.1:8091");
    let i2 = inst("10.1.0.2:8092").with_weight(3).with_zone("z1");
    a.register("rt", &i1).await.unwrap();
    a.register("rt", &i2).await.unwrap();
    let s = wait_for(&mut w, WAIT, "both instances", |s| s.len() == 2).await;
    let got2 = s.instances().iter().find(|i| i.key() == i2.key()).unwrap();
    assert_eq!(got2.weight(), 3);
    assert_eq!(got2.zone(), Some("z1"));

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
    a.close().await.unwrap();
    b.close().await.unwrap();
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
    let bad = malformed().map(|(id, ip, port)| (id, ip, port, "UP"));
    for (id, ip, port, status) in [
        ("good", "10.2.0.1", json!(8091), "UP"),
        ("down", "10.2.0.2", json!(8091), "DOWN"),
    ]
    .into_iter()
    .chain(bad)
    {
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
    // Malformed instances go through the shared, rate-limited report: one line per
    // cluster per period, naming the first bad instance and counting the others.
    assert!(
        text.contains("WARN")
            && text.contains("skipping malformed registry entry")
            && ["port0", "badip", "portstr"]
                .iter()
                .any(|id| text.contains(&format!("key={id}"))),
        "no warning naming a malformed instance: {text}"
    );
    // DOWN is filtered, not malformed: no warning for it.
    assert!(!text.contains("key=down"), "{text}");
    c.close().await.unwrap();
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
        wait_for(&mut w, WAIT, "the member", |s| s.len() == 1).await;
        // Each step changes the status counts, so the hash code differs (a swap of
        // two UP instances within one refresh would not, in Eureka as here: the hash is
        // a consistency check of applied deltas, not of content).
        a.register("d", &inst("10.6.0.2:1")).await.unwrap();
        wait_for(&mut w, WAIT, "two members", |s| s.len() == 2).await;
        a.unregister("d", &inst("10.6.0.1:1")).await.unwrap();
        let s = wait_for(&mut w, WAIT, "the first one gone", |s| s.len() == 1).await;
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

/// Issue #13 item 2: at `trace`, dependencies included, a run with a `serviceUrl`
/// carrying `user:pass@` against a server that checks it (HTTP Basic, as Spring
/// Security): it logs in, another client is refused (401) with a wrong password, the
/// server goes away (the watch goes stale) and comes back empty (the watch is connected
/// again and the heartbeat registers our instance again, logged in); and a client that
/// cannot reach its server at all. The password never shows: not in the log, not in an
/// error's Display, not in a `Health::Stale` reason, not in a `Debug`. A current-thread
/// runtime, so every task logs into the capture.
#[tokio::test]
async fn the_service_url_password_never_reaches_the_log_even_at_trace() {
    const SECRET: &str = "Eureka-Pass-9b4d2";
    const WRONG: &str = "Eureka-Wrong-1f6a8";
    let mut eureka = EurekaDouble::start(EurekaDoubleOptions {
        eviction_interval: EVICTION,
        basic_auth: Some(("meshline".into(), SECRET.into())),
        ..Default::default()
    })
    .unwrap();
    let buf = LogBuf::default();
    let guard = buf.capture_at(tracing::Level::TRACE);
    let with_pass = |url: &str, pass: &str| {
        let url = url.replacen("http://", &format!("http://meshline:{pass}@"), 1);
        config_with(&eureka, &[("registry.eureka.serviceUrl", &url)])
    };
    let good_cfg = with_pass(&eureka.service_url(), SECRET);
    let wrong_cfg = with_pass(&eureka.service_url(), WRONG);
    let closed = meshline_testkit::closed_port().unwrap();
    let unreachable_cfg = with_pass(&format!("http://127.0.0.1:{closed}/eureka"), WRONG);
    let mut shown = vec![
        format!("{good_cfg:?}"),
        format!("{wrong_cfg:?}"),
        format!("{unreachable_cfg:?}"),
    ];
    let reg = EurekaRegistry::connect(&good_cfg).await.unwrap();
    shown.push(format!("{reg:?}"));
    reg.register("secret", &inst("10.9.9.1:8091"))
        .await
        .unwrap();
    let mut w = reg.watch("secret").await.unwrap();
    wait_for(&mut w, Duration::from_secs(10), "registered", |s| {
        addrs(s).len() == 1
    })
    .await;
    // A wrong password: the server refuses the login, and connect says so.
    let refused = match EurekaRegistry::connect(&wrong_cfg).await {
        Err(e) => e.to_string(),
        Ok(bad) => panic!("a wrong password connected: {bad:?}"),
    };
    assert!(
        refused.contains("connect") && refused.contains("401"),
        "not the login refusal at connect: {refused}"
    );
    shown.push(refused);
    match EurekaRegistry::connect(&unreachable_cfg).await {
        Err(e) => shown.push(e.to_string()),
        Ok(bad) => {
            shown.push(bad.lookup("secret").await.unwrap_err().to_string());
            if let Err(e) = bad.register("secret", &inst("10.9.9.3:8091")).await {
                shown.push(e.to_string());
            }
            match bad.watch("secret").await {
                Err(e) => shown.push(e.to_string()),
                Ok(mut bw) => shown.push(format!(
                    "{:?}",
                    wait_health(&mut bw, Duration::from_secs(10), false).await
                )),
            }
            shown.push(format!("{bad:?}"));
            bad.close().await.unwrap();
        }
    }
    // The server goes away while the client runs: the watch goes stale.
    eureka.stop();
    shown.push(format!(
        "{:?}",
        wait_health(&mut w, Duration::from_secs(20), false).await
    ));
    if let Err(e) = reg.lookup("secret").await {
        shown.push(e.to_string());
    }
    // It comes back empty: the client reconnects (the watch is connected again) and
    // its heartbeat, answered 404, registers our instance again with the password.
    eureka.restart().unwrap();
    wait_health(&mut w, Duration::from_secs(30), true).await;
    // (Asked of the server: the watch may still show the snapshot from before.)
    eventually(
        Duration::from_secs(30),
        "registered again after the restart",
        || async {
            reg.lookup("secret")
                .await
                .is_ok_and(|l| l.iter().any(|i| i.to_string() == "10.9.9.1:8091"))
        },
    )
    .await;
    reg.close().await.unwrap();
    drop(guard);
    let text = buf.text();
    assert!(text.contains("TRACE"), "the capture ran at trace");
    assert!(
        text.contains("registered it again"),
        "the log shows no re-registration after the restart"
    );
    for s in [SECRET, WRONG] {
        assert!(!text.contains(s), "a password is in the log");
        for m in &shown {
            assert!(!m.contains(s), "a password is in `{m}`");
        }
    }
}
