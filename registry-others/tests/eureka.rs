//! The Eureka backend against the in-process Eureka server double (meshline-testkit),
//! which really evicts expired leases, answers 404 to unknown heartbeats, serves deltas
//! with `actionType` and `apps__hashcode`, and loses all state on restart: the
//! conformance suite, then what is Eureka's own (Seata's application layout, status
//! filtering, warnings, delta fall-back).

mod common;

use std::time::Duration;

use common::*;
use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Config, Instance, RegistryService};
use meshline_registry_others::EurekaRegistry;
use meshline_testkit::conformance::{
    Expiry, Garbage, Harness, Lifetime, RefuseRemoval, SeataLayout, Secrets, Unreachable,
};
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
    let url = eureka.service_url();
    let base = [
        ("registry.type", "eureka"),
        ("registry.eureka.serviceUrl", url.as_str()),
        ("registry.eureka.renewalInterval", "1s"),
        ("registry.eureka.leaseDuration", "3s"),
        ("registry.eureka.refreshInterval", "200ms"),
    ];
    meshline_testkit::config_of(&base, extra)
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

const SECRET: &str = "Eureka-Pass-9b4d2";

/// A server behind HTTP Basic auth (as Spring Security puts it), user `meshline`,
/// password [`SECRET`].
async fn secret_harness() -> EurekaHarness {
    EurekaHarness {
        eureka: EurekaDouble::start(EurekaDoubleOptions {
            eviction_interval: EVICTION,
            basic_auth: Some(("meshline".into(), SECRET.into())),
            ..Default::default()
        })
        .unwrap(),
    }
}

meshline_testkit::conformance_harness!(EurekaHarness {
    registry: EurekaRegistry,
    server: eureka,
    lifetime: Lifetime::set("registry.eureka.leaseDuration", "3s", "60s", LEASE),
    resync_within: WAIT,
    config: |h, extra| config_with(&h.eureka, extra),
    // Heartbeats every 1 s; the double evicts a lease 3 s after its last renewal
    // (checked every 200 ms), and watchers fetch every 200 ms.
    expiry: Expiry::after(LEASE, EVICTION + Duration::from_millis(200)),
});

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

/// `connect` checks the server.
impl Unreachable for EurekaHarness {
    fn address_key(&self) -> &'static str {
        "registry.eureka.serviceUrl"
    }
    fn address_of(&self, port: u16) -> String {
        format!("http://127.0.0.1:{port}/eureka")
    }
    fn refused_within(&self) -> Duration {
        Duration::from_secs(4)
    }
}

/// The removal client's renewal interval.
const RENEWAL: Duration = Duration::from_millis(500);

/// The server answers our cancel 500. A 60 s lease renewed every 500 ms: only our
/// retry removes the instance in time.
impl RefuseRemoval for EurekaHarness {
    async fn removal_client(&self) -> EurekaRegistry {
        let cfg = self.config(&[
            ("registry.eureka.renewalInterval", "500ms"),
            ("registry.eureka.leaseDuration", "60s"),
        ]);
        EurekaRegistry::connect(&cfg).await.unwrap()
    }
    async fn refuse_removals(&mut self) {
        self.eureka.fail("DELETE", "/eureka/apps/", 500).unwrap();
    }
    async fn allow_removals(&mut self) {
        self.eureka.clear_faults();
    }
    async fn holds(&self, cluster: &str, member: &Instance) -> bool {
        instance_doc(&self.eureka, cluster, member).await.is_some()
    }
    /// The backend's request bound: 3 s connect timeout, answered at once by the
    /// double.
    fn attempt_timeout(&self) -> Duration {
        Duration::from_secs(3)
    }
    fn refusal(&self) -> &'static str {
        "500"
    }
    /// No heartbeat over four renewal intervals (one may have been in flight).
    async fn not_renewed(&self, cluster: &str, member: &Instance) {
        let renewed = || async {
            let v = instance_doc(&self.eureka, cluster, member)
                .await
                .expect("refused, yet gone");
            v.pointer("/instance/leaseInfo/lastRenewalTimestamp")
                .and_then(|t| t.as_u64())
                .unwrap_or_else(|| panic!("no lastRenewalTimestamp in {v}"))
        };
        tokio::time::sleep(RENEWAL).await;
        let before = renewed().await;
        tokio::time::sleep(RENEWAL * 4).await;
        assert_eq!(
            renewed().await,
            before,
            "the lease was renewed after its unregister"
        );
    }
}

/// The instance document the server holds for `member` of `cluster` (`None` once it
/// is gone), read past our client.
async fn instance_doc(eureka: &EurekaDouble, cluster: &str, member: &Instance) -> Option<Value> {
    let (app, ip, port) = (cluster.to_uppercase(), member.host(), member.port());
    raw_find(eureka, &format!("/apps/{app}/{ip}:{cluster}:{port}")).await
}

/// A wrong password in `serviceUrl` is refused (401) at connect; after the server's
/// restart (empty) the heartbeat, answered 404, registers our instance again, logged
/// in.
impl Secrets for EurekaHarness {
    fn secrets(&self) -> [&'static str; 2] {
        [SECRET, "Eureka-Wrong-1f6a8"]
    }
    fn with_secret(&self, secret: &str) -> Config {
        let url =
            self.eureka
                .service_url()
                .replacen("http://", &format!("http://meshline:{secret}@"), 1);
        self.config(&[("registry.eureka.serviceUrl", &url)])
    }
    fn refusal(&self) -> &'static str {
        "401"
    }
    fn logged(&self) -> &'static [&'static str] {
        &["registered it again"]
    }
}

/// Applications named after their cluster, as a Java Eureka client registers them.
impl SeataLayout for EurekaHarness {
    async fn put_member(&self, cluster: &str, addr: &str) {
        let (ip, port) = addr.rsplit_once(':').unwrap();
        let app = cluster.to_uppercase();
        let port = json!(port.parse::<u16>().unwrap());
        let body = java_instance(&app, &format!("{ip}:{cluster}:{port}"), ip, port, "UP");
        assert_eq!(raw_post(&self.eureka, &app, &body).await, 204);
    }
    /// An application whose only instance is not UP: nothing a client could use.
    async fn put_foreign(&self) {
        let body = java_instance("DRAINING", "d-1", "10.0.0.4", json!(8091), "OUT_OF_SERVICE");
        assert_eq!(raw_post(&self.eureka, "DRAINING", &body).await, 204);
    }
    fn address(&self) -> String {
        self.eureka.service_url()
    }
    fn place_names(&self, cluster: &str) -> String {
        format!("application `{}`", cluster.to_uppercase())
    }
}

meshline_testkit::conformance_tests!(harness() => round_trip, drop_ends_watches,
    crash_removed_within_ttl, outage_stale_resync, garbage_skipped, empty_protection,
    unreachable_is_named, refused_removal_retried, close_removes_a_refused_removal,
    nearby_lists_other_clusters);
meshline_testkit::conformance_tests!(mod secrets: secret_harness() => secrets_never_shown);

/// Instances with a port 0, an address that is none and a port that is no number.
fn malformed() -> [(&'static str, &'static str, Value); 3] {
    [
        ("port0", "10.2.0.3", json!(0)),
        ("badip", "not an ip!", json!(8091)),
        ("portstr", "10.2.0.4", json!("eighty")),
    ]
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
    raw_find(eureka, path)
        .await
        .unwrap_or_else(|| panic!("{path}: 404"))
}

/// The JSON document at `path`, `None` on 404.
async fn raw_find(eureka: &EurekaDouble, path: &str) -> Option<Value> {
    let r = reqwest::Client::new()
        .get(format!("{}{path}", eureka.service_url()))
        .header("Accept", "application/json")
        .send()
        .await
        .unwrap();
    if r.status() == reqwest::StatusCode::NOT_FOUND {
        return None;
    }
    assert_eq!(r.status(), 200, "{path}");
    Some(serde_json::from_slice(&r.bytes().await.unwrap()).unwrap())
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
    let bad = ["port0", "badip", "portstr"];
    let text = skips_malformed(&c, "m", "10.2.0.1:8091", &bad).await;
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
async fn a_missing_service_url_is_an_error() {
    let cfg = ConfigLoader::new()
        .set("registry.type", "eureka")
        .load()
        .unwrap();
    let err = EurekaRegistry::connect(&cfg).await.unwrap_err().to_string();
    assert!(err.contains("serviceUrl is required"), "{err}");
}
