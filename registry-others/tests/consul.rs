//! The Consul backend against the in-process Consul agent double (meshline-testkit),
//! which really blocks on blocking queries, really expires TTL checks and loses all
//! state on restart: the conformance suite, then what is Consul's own (Seata's
//! service layout, metadata, TCP-checked services, warnings, ACL tokens).

mod common;

use std::net::TcpListener;
use std::time::Duration;

use common::*;
use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Config, RegistryService};
use meshline_registry_others::ConsulRegistry;
use meshline_testkit::conformance::{Crash, Expiry, Garbage, Harness, Opts, Server};
use meshline_testkit::{ConsulDouble, ConsulDoubleOptions};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);
const TTL: Duration = Duration::from_secs(2);

/// A config for the double: TTL 2 s, critical services reaped after 4 s; then `extra`.
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

struct ConsulHarness {
    consul: ConsulDouble,
}

async fn harness() -> ConsulHarness {
    init_logs();
    ConsulHarness {
        consul: ConsulDouble::start(ConsulDoubleOptions::default()).unwrap(),
    }
}

impl Harness for ConsulHarness {
    type Registry = ConsulRegistry;

    async fn connect(&self, o: Opts) -> ConsulRegistry {
        let extra = o.keys("registry.consul.ttl", "2s", "60s");
        ConsulRegistry::connect(&config(&self.consul, &extra))
            .await
            .unwrap()
    }
    fn server(&mut self) -> &mut dyn Server {
        &mut self.consul
    }
    fn ttl(&self) -> Duration {
        TTL
    }
    fn resync_within(&self) -> Duration {
        WAIT
    }
}

impl Crash for ConsulHarness {
    fn crash(&self, reg: ConsulRegistry) {
        reg.abandon();
        drop(reg);
    }
    /// The keeper passes the TTL check every TTL/3; it turns critical TTL after the
    /// last pass (the double checks every 100 ms), which ends the watchers' blocking
    /// query at once.
    fn expiry(&self) -> Expiry {
        Expiry {
            not_before: TTL / 2,
            within: TTL + Duration::from_millis(100) + Duration::from_secs(2),
        }
    }
}

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

meshline_testkit::conformance_tests!(harness() => round_trip, drop_ends_watches,
    crash_removed_within_ttl, outage_stale_resync, garbage_skipped, empty_protection);

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
    let logs = LogBuf::default();
    let guard = logs.capture();
    let mut w = c.watch("m").await.unwrap();
    let s = w.next().await.unwrap();
    assert_eq!(addrs(&s), ["10.2.0.1:8091"]);
    assert_eq!(c.lookup("m").await.unwrap().len(), 1);
    drop(guard);
    let text = logs.text();
    // Malformed entries go through the shared, rate-limited report: one line per
    // cluster per period, naming the first bad entry and counting the others.
    assert!(
        text.contains("WARN")
            && text.contains("skipping malformed registry entry")
            && text.contains("cluster=\"m\"")
            && ["m-port0", "m-badhost", "m-bigport"]
                .iter()
                .any(|id| text.contains(&format!("key={id}"))),
        "no warning naming a malformed entry: {text}"
    );
    assert!(!text.contains("m-good"), "{text}");
    c.close().await.unwrap();
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
    // The address as configured (user info, if any, redacted).
    assert!(
        err.contains(&format!("consul registry at 127.0.0.1:{port} unavailable")),
        "{err}"
    );
    assert!(err.contains("connect"), "{err}");
    assert!(err.contains("Connection refused"), "{err}");
}

/// Issue #13 item 2: at `trace`, dependencies included, a run that connects with the
/// ACL token, is refused (403) with a wrong one, loses the agent (the watch goes stale)
/// and reconnects after its restart (connected again, our instance registered again
/// with the token) never prints either token: not in the log, not in an error's Display, not in
/// a `Health::Stale` reason, not in a `Debug`. A current-thread runtime, so every task
/// logs into the capture.
#[tokio::test]
async fn the_acl_token_never_reaches_the_log_even_at_trace() {
    const SECRET: &str = "Consul-Token-5d1e9";
    const WRONG: &str = "Consul-Wrong-7a3c2";
    let mut consul = ConsulDouble::start(ConsulDoubleOptions {
        acl_token: Some(SECRET.into()),
        ..Default::default()
    })
    .unwrap();
    let buf = LogBuf::default();
    let guard = buf.capture_at(tracing::Level::TRACE);
    let with = |t: &str| config(&consul, &[("registry.consul.aclToken", t)]);
    let good_cfg = with(SECRET);
    let wrong_cfg = with(WRONG);
    let reg = ConsulRegistry::connect(&good_cfg).await.unwrap();
    reg.register("secret", &inst("10.9.9.1:8091"))
        .await
        .unwrap();
    let mut w = reg.watch("secret").await.unwrap();
    wait_for(&mut w, Duration::from_secs(10), "registered", |s| {
        addrs(s).len() == 1
    })
    .await;
    let mut shown = vec![format!("{good_cfg:?}"), format!("{reg:?}")];
    match ConsulRegistry::connect(&wrong_cfg).await {
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("403"), "not the ACL refusal: {e}");
            shown.push(e);
        }
        Ok(bad) => {
            shown.push(bad.lookup("secret").await.unwrap_err().to_string());
            shown.push(
                bad.register("secret", &inst("10.9.9.3:8091"))
                    .await
                    .unwrap_err()
                    .to_string(),
            );
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
    consul.stop();
    shown.push(format!(
        "{:?}",
        wait_health(&mut w, Duration::from_secs(20), false).await
    ));
    shown.push(reg.lookup("secret").await.unwrap_err().to_string());
    // It comes back empty: the watch is connected again, and the keeper (its TTL pass
    // answered 404) registers our instance again with the token.
    consul.restart().unwrap();
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
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while let Err(e) = reg.register("secret", &inst("10.9.9.2:8091")).await {
        shown.push(e.to_string());
        assert!(std::time::Instant::now() < deadline, "no reconnect: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    reg.close().await.unwrap();
    drop(guard);
    let text = buf.text();
    assert!(text.contains("TRACE"), "the capture ran at trace");
    assert!(
        text.contains("registered it again"),
        "the log shows no re-registration after the restart"
    );
    for s in [SECRET, WRONG] {
        assert!(!text.contains(s), "a token is in the log");
        for m in &shown {
            assert!(!m.contains(s), "a token is in `{m}`");
        }
    }
}
