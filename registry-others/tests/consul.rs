//! The Consul backend against the in-process Consul agent double (meshline-testkit),
//! which really blocks on blocking queries, really expires TTL checks and loses all
//! state on restart: the conformance suite, then what is Consul's own (Seata's
//! service layout, metadata, TCP-checked services, warnings, ACL tokens).

mod common;

use std::net::TcpListener;
use std::time::Duration;

use common::*;
use meshline_registry_core::{Config, Instance, RegistryService};
use meshline_registry_others::ConsulRegistry;
use meshline_testkit::conformance::{
    Expiry, Garbage, Harness, Lifetime, RefuseRemoval, SeataLayout, Secrets, Unreachable,
};
use meshline_testkit::{ConsulDouble, ConsulDoubleOptions};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);
const TTL: Duration = Duration::from_secs(2);

/// A config for the double: TTL 2 s, critical services reaped after 4 s; then `extra`.
fn config(consul: &ConsulDouble, extra: &[(&str, &str)]) -> Config {
    let addr = consul.server_addr();
    let base = [
        ("registry.type", "consul"),
        ("registry.consul.serverAddr", addr.as_str()),
        ("registry.consul.ttl", "2s"),
        ("registry.consul.deregisterCriticalServiceAfter", "4s"),
    ];
    meshline_testkit::config_of(&base, extra)
}

struct ConsulHarness {
    consul: ConsulDouble,
}

async fn harness() -> ConsulHarness {
    init_logs();
    ConsulHarness {
        consul: ConsulDouble::start(ConsulDoubleOptions::default()).unwrap(),
    }
}

const SECRET: &str = "Consul-Token-5d1e9";

/// An agent with ACLs on, whose token is [`SECRET`].
async fn secret_harness() -> ConsulHarness {
    ConsulHarness {
        consul: ConsulDouble::start(ConsulDoubleOptions {
            acl_token: Some(SECRET.into()),
            ..Default::default()
        })
        .unwrap(),
    }
}

meshline_testkit::conformance_harness!(ConsulHarness {
    registry: ConsulRegistry,
    server: consul,
    lifetime: Lifetime::set("registry.consul.ttl", "2s", "60s", TTL),
    resync_within: WAIT,
    config: |h, extra| config(&h.consul, extra),
    // The keeper passes the TTL check every TTL/3; it turns critical TTL after the last
    // pass (the double checks every 100 ms), which ends the watchers' blocking query at
    // once.
    expiry: Expiry::after(TTL, Duration::from_millis(100)),
});

/// Registrations with a port 0, a host that is none and a port out of range, passing.
const GARBAGE: [(&str, &str, u32); 3] = [
    ("port0", "10.2.0.2", 0),
    ("badhost", "not a host!", 8091),
    ("bigport", "10.2.0.3", 70000),
];

impl Garbage for ConsulHarness {
    async fn put_garbage(&self, cluster: &str, round: u32) {
        for (id, addr, port) in GARBAGE {
            let st = raw_put(
                &self.consul,
                "/v1/agent/service/register",
                json!({"ID": format!("{cluster}-{id}-{round}"), "Name": cluster,
                       "Tags": ["services"], "Address": addr, "Port": port,
                       "Check": {"TTL": "60s", "Status": "passing"}}),
            )
            .await;
            assert_eq!(st, 200, "{id}");
        }
    }
}

/// `connect` checks the agent; the error names the address as configured (user info,
/// if any, redacted).
impl Unreachable for ConsulHarness {
    fn address_key(&self) -> &'static str {
        "registry.consul.serverAddr"
    }
    fn refused_within(&self) -> Duration {
        Duration::from_secs(5)
    }
}

const DEREGISTER: &str = "/v1/agent/service/deregister/";
/// The removal client's check TTL.
const REMOVAL_TTL: Duration = Duration::from_secs(3);

/// The agent answers our deregistration 500. The keeper passes the check every TTL/3
/// (3 s here) and Consul would reap the service 2 min after the check turned
/// critical: only our retry removes it in time.
impl RefuseRemoval for ConsulHarness {
    async fn removal_client(&self) -> ConsulRegistry {
        let cfg = self.config(&[
            ("registry.consul.ttl", "3s"),
            ("registry.consul.deregisterCriticalServiceAfter", "2m"),
        ]);
        ConsulRegistry::connect(&cfg).await.unwrap()
    }
    async fn refuse_removals(&mut self) {
        self.consul.fail("PUT", DEREGISTER, 500).unwrap();
    }
    async fn allow_removals(&mut self) {
        self.consul.clear_faults();
    }
    /// The agent holds the service, passing or not.
    async fn holds(&self, cluster: &str, member: &Instance) -> bool {
        holds(&self.consul, cluster, member).await
    }
    /// The backend's request timeout (`consul::agent::REQUEST_TIMEOUT`).
    fn attempt_timeout(&self) -> Duration {
        Duration::from_secs(5)
    }
    fn refusal(&self) -> &'static str {
        "deregister: HTTP 500 Internal Server Error"
    }
    /// Nobody passes the check any more: it turns critical one TTL later.
    async fn not_renewed(&self, cluster: &str, member: &Instance) {
        let passing = format!("/v1/health/service/{cluster}?passing");
        eventually(
            REMOVAL_TTL + Duration::from_secs(2),
            "the check to turn critical",
            || async {
                raw_get(&self.consul, &passing)
                    .await
                    .as_array()
                    .unwrap()
                    .is_empty()
            },
        )
        .await;
        assert!(self.holds(cluster, member).await, "refused, yet gone");
    }
}

/// A wrong token is refused (403) at connect or at the first write; after the agent's
/// restart (empty) the keeper, its TTL pass answered 404, registers our instance
/// again with the token.
impl Secrets for ConsulHarness {
    fn secrets(&self) -> [&'static str; 2] {
        [SECRET, "Consul-Wrong-7a3c2"]
    }
    fn with_secret(&self, secret: &str) -> Config {
        self.config(&[("registry.consul.aclToken", secret)])
    }
    fn refusal(&self) -> &'static str {
        "403"
    }
    fn logged(&self) -> &'static [&'static str] {
        &["registered it again"]
    }
}

/// Services named after their cluster with Seata's tag `services`.
impl SeataLayout for ConsulHarness {
    async fn put_member(&self, cluster: &str, addr: &str) {
        tagged(&self.consul, cluster, addr, "services", "passing").await;
    }
    /// Another application's service (not Seata's tag), and a tagged one with no
    /// passing member.
    async fn put_foreign(&self) {
        tagged(&self.consul, "web", "10.0.0.3:80", "http", "passing").await;
        tagged(
            &self.consul,
            "down",
            "10.0.0.4:8091",
            "services",
            "critical",
        )
        .await;
    }
    fn address(&self) -> String {
        self.consul.server_addr()
    }
}

/// Registers `addr` in service `name` with `tag`, its TTL check in `status`.
async fn tagged(consul: &ConsulDouble, name: &str, addr: &str, tag: &str, status: &str) {
    let (ip, port) = addr.rsplit_once(':').unwrap();
    let body = json!({"ID": format!("{name}-{addr}"), "Name": name, "Tags": [tag],
        "Address": ip, "Port": port.parse::<u16>().unwrap(),
        "Check": {"TTL": "60s", "Status": status}});
    let st = raw_put(consul, "/v1/agent/service/register", body).await;
    assert_eq!(st, 200);
}

meshline_testkit::conformance_tests!(harness() => round_trip, drop_ends_watches,
    crash_removed_within_ttl, outage_stale_resync, garbage_skipped, empty_protection,
    unreachable_is_named, refused_removal_retried, close_removes_a_refused_removal,
    close_meets_a_held_refusal, nearby_lists_other_clusters);
meshline_testkit::conformance_tests!(mod secrets: secret_harness() => secrets_never_shown);

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

/// What we register is Seata's layout (service `<cluster>`, ID `<cluster>-<ip>:<port>`
/// in Java's address form, tag `services`), and weight and zone come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seata_layout_and_metadata() {
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
    let i1 = inst("10.1.0.1:8091");
    let i2 = inst("[2001:db8::7]:8092").with_weight(3).with_zone("z1");
    a.register("rt", &i1).await.unwrap();
    a.register("rt", &i2).await.unwrap();
    let s = wait_for(&mut w, WAIT, "both instances", |s| s.len() == 2).await;
    let got2 = s.instances().iter().find(|i| i.key() == i2.key()).unwrap();
    assert_eq!(got2.weight(), 3);
    assert_eq!(got2.zone(), Some("z1"));
    assert_eq!(addrs(&s), ["10.1.0.1:8091", "[2001:db8::7]:8092"]);
    let looked = a.lookup("rt").await.unwrap();
    let got2 = looked.iter().find(|i| i.key() == i2.key()).unwrap();
    assert_eq!((got2.weight(), got2.zone()), (3, Some("z1")));

    // Readable by a Seata client (tag + passing).
    let raw = raw_get(&consul, "/v1/health/service/rt?passing=true&tag=services").await;
    let ids: Vec<&str> = raw
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["Service"]["ID"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["rt-10.1.0.1:8091", "rt-2001:db8:0:0:0:0:0:7:8092"]);
    a.close().await.unwrap();
    b.close().await.unwrap();
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
    let s = wait_for(&mut w, WAIT, "the Seata TC", |s| s.len() == 1).await;
    assert_eq!(addrs(&s), [format!("127.0.0.1:{port}")]);
    assert_eq!(c.lookup("default").await.unwrap().len(), 1);
    drop(tc);
    c.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_entries_are_skipped() {
    init_logs();
    let consul = ConsulDouble::start(ConsulDoubleOptions::default()).unwrap();
    let entries = GARBAGE.map(|(id, addr, port)| (format!("m-{id}"), addr, port));
    for (id, addr, port) in [("m-good".to_string(), "10.2.0.1", 8091)]
        .into_iter()
        .chain(entries)
    {
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
    let bad = ["m-port0", "m-badhost", "m-bigport"];
    let text = skips_malformed(&c, "m", "10.2.0.1:8091", &bad).await;
    assert!(
        text.contains("cluster=\"m\""),
        "the warning names no cluster: {text}"
    );
    assert!(!text.contains("m-good"), "{text}");
    c.close().await.unwrap();
}

/// An agent restarted without its data has forgotten our services: it answers their
/// deregistration 404 "Unknown service ID" (as Consul does), which means they are
/// already gone. `unregister` and `close` both succeed, and nothing is left to retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_the_agent_forgot_are_unregistered_and_closed() {
    init_logs();
    let mut consul = ConsulDouble::start(ConsulDoubleOptions::default()).unwrap();
    // A 60 s TTL: the keeper passes the checks every 20 s, so it does not meet the
    // restarted agent's 404 (and register the services again) during the test.
    let long = [
        ("registry.consul.ttl", "60s"),
        ("registry.consul.deregisterCriticalServiceAfter", "2m"),
    ];
    let a = ConsulRegistry::connect(&config(&consul, &long))
        .await
        .unwrap();
    let b = ConsulRegistry::connect(&config(&consul, &long))
        .await
        .unwrap();
    let (ia, ib) = (inst("10.6.0.1:8091"), inst("10.6.0.2:8091"));
    a.register("forgot", &ia).await.unwrap();
    b.register("forgot", &ib).await.unwrap();
    tokio::task::block_in_place(|| consul.restart()).unwrap();
    assert!(
        !holds(&consul, "forgot", &ia).await,
        "the restart kept state"
    );

    // unregister: the agent's 404 is "already gone".
    a.unregister("forgot", &ia).await.unwrap();
    // close: the same for what is still registered.
    b.close().await.unwrap();
    // Nothing of `a` is pending: from now on every deregistration is refused, and
    // `close` has none to send.
    consul.fail("PUT", DEREGISTER, 500).unwrap();
    a.close().await.unwrap();
    let services = raw_get(&consul, "/v1/agent/services").await;
    assert_eq!(services, json!({}), "nothing was registered again");
}

/// Whether the agent holds `member` of `cluster` (Seata's service ID), passing or not.
async fn holds(consul: &ConsulDouble, cluster: &str, member: &Instance) -> bool {
    let services = raw_get(consul, "/v1/agent/services").await;
    services.get(format!("{cluster}-{member}")).is_some()
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
