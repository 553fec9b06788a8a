//! The Consul and Eureka doubles behave as docs/registry-wire.md §2 / §3 say: blocking queries
//! block and wake, TTL checks and leases expire, unknown heartbeats are 404, deltas carry
//! `actionType`, and a restart loses everything. Driven with plain HTTP/1.1 over std
//! sockets, independent of meshline's clients.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use meshline_testkit::{ConsulDouble, ConsulDoubleOptions, EurekaDouble, EurekaDoubleOptions};
use serde_json::{Value, json};

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Resp {
        status,
        headers,
        body: body.to_string(),
    }
}

/// `method path` with no headers and no body.
fn call(addr: SocketAddr, method: &str, path: &str) -> Resp {
    http(addr, method, path, &[], "")
}

fn index_of(r: &Resp) -> u64 {
    r.header("x-consul-index").unwrap().parse().unwrap()
}

fn consul_register(addr: SocketAddr, id: &str, name: &str, check: Value) -> Resp {
    http(
        addr,
        "PUT",
        "/v1/agent/service/register",
        &[],
        &json!({"ID": id, "Name": name, "Tags": ["services"], "Address": "10.0.0.1", "Port": 8091, "Check": check})
            .to_string(),
    )
}

#[test]
fn consul_blocking_queries_block_and_wake() {
    let c = ConsulDouble::start(ConsulDoubleOptions::default()).unwrap();
    let addr = c.addr();
    let r = call(addr, "GET", "/v1/health/service/web?passing");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, "[]");
    let idx = index_of(&r);
    assert!(idx >= 1);

    // Nothing changes: the query waits for `wait`.
    let t = Instant::now();
    let r = call(
        addr,
        "GET",
        &format!("/v1/health/service/web?index={idx}&wait=1s"),
    );
    assert!(
        t.elapsed() >= Duration::from_millis(950),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(index_of(&r), idx);

    // A registration wakes it at once.
    let waker = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        consul_register(
            addr,
            "web-1",
            "web",
            json!({"TTL": "30s", "Status": "passing"}),
        )
    });
    let t = Instant::now();
    let r = call(
        addr,
        "GET",
        &format!("/v1/health/service/web?index={idx}&wait=10s"),
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(waker.join().unwrap().status, 200);
    assert!(index_of(&r) > idx);
    let v = r.json();
    assert_eq!(v[0]["Service"]["ID"], "web-1");
    assert_eq!(v[0]["Node"]["Address"], "127.0.0.1");
    assert_eq!(v[0]["Checks"][0]["CheckID"], "serfHealth");
    assert_eq!(v[0]["Checks"][1]["CheckID"], "service:web-1");

    // Invalid parameters are rejected as Consul does.
    for query in ["passing=maybe", "index=x", "index=1&wait=10"] {
        let path = format!("/v1/health/service/web?{query}");
        assert_eq!(call(addr, "GET", &path).status, 400, "{path}");
    }
}

#[test]
fn consul_ttl_checks_expire_and_critical_services_are_reaped() {
    let c = ConsulDouble::start(ConsulDoubleOptions {
        tick: Duration::from_millis(20),
        ..Default::default()
    })
    .unwrap();
    let addr = c.addr();
    // Without Status, a TTL check starts critical.
    consul_register(addr, "a", "svc", json!({"TTL": "300ms"}));
    let r = call(addr, "GET", "/v1/health/service/svc?passing");
    assert_eq!(r.json(), json!([]));
    assert_eq!(
        call(addr, "GET", "/v1/health/service/svc")
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Passing it makes it visible, and keeps it so while heart-beaten.
    for _ in 0..5 {
        assert_eq!(
            call(addr, "PUT", "/v1/agent/check/pass/service:a?note=ok").status,
            200
        );
        std::thread::sleep(Duration::from_millis(150));
    }
    let r = call(addr, "GET", "/v1/health/service/svc?passing=true");
    assert_eq!(r.json().as_array().unwrap().len(), 1);
    // Without heart-beats it expires.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        call(addr, "GET", "/v1/health/service/svc?passing=1").json(),
        json!([])
    );
    let checks = call(addr, "GET", "/v1/agent/checks").json();
    assert_eq!(checks["service:a"]["Status"], "critical");
    // check/update works too; unknown IDs are 404.
    let r = http(
        addr,
        "PUT",
        "/v1/agent/check/update/service:a",
        &[],
        r#"{"Status":"passing","Output":"fine"}"#,
    );
    assert_eq!(r.status, 200);
    let r = call(addr, "PUT", "/v1/agent/check/pass/service:nope");
    assert_eq!(r.status, 404);
    assert!(r.body.contains("Unknown check ID"), "{}", r.body);

    // DeregisterCriticalServiceAfter: the reaper removes the service.
    consul_register(
        addr,
        "b",
        "svc2",
        json!({"TTL": "100ms", "Status": "passing", "DeregisterCriticalServiceAfter": "200ms"}),
    );
    let t = Instant::now();
    loop {
        let all = call(addr, "GET", "/v1/health/service/svc2").json();
        if all.as_array().unwrap().is_empty() {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "never reaped");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Deregistering an unknown ID is a 404 with Consul's text.
    let r = call(addr, "PUT", "/v1/agent/service/deregister/none");
    assert_eq!(r.status, 404);
    assert_eq!(
        r.body,
        "Unknown service ID \"none\". Ensure that the service ID is passed, not the service name."
    );
}

#[test]
fn consul_restart_loses_state_and_the_index_goes_back() {
    let mut c = ConsulDouble::start(ConsulDoubleOptions::default()).unwrap();
    let addr = c.addr();
    for i in 0..5 {
        consul_register(
            addr,
            &format!("x-{i}"),
            "x",
            json!({"TTL": "30s", "Status": "passing"}),
        );
    }
    let before = index_of(&call(addr, "GET", "/v1/health/service/x"));
    c.stop();
    assert!(TcpStream::connect(addr).is_err(), "stopped means refused");
    c.restart().unwrap();
    assert_eq!(c.addr(), addr);
    let r = call(addr, "GET", "/v1/health/service/x");
    assert_eq!(r.json(), json!([]));
    assert!(index_of(&r) < before);
}

#[test]
fn consul_acl_token_is_enforced() {
    let c = ConsulDouble::start(ConsulDoubleOptions {
        acl_token: Some("t0k".into()),
        ..Default::default()
    })
    .unwrap();
    let addr = c.addr();
    for (query, status) in [("", 403), ("?token=bad", 403), ("?token=t0k", 200)] {
        let path = format!("/v1/health/service/x{query}");
        assert_eq!(call(addr, "GET", &path).status, status, "{path}");
    }
    assert_eq!(
        http(
            addr,
            "GET",
            "/v1/health/service/x",
            &[("X-Consul-Token", "t0k")],
            ""
        )
        .status,
        200
    );
    assert_eq!(call(addr, "GET", "/v1/status/leader").status, 200);
}

fn eureka_instance(app: &str, id: &str, lease_secs: u64) -> String {
    json!({"instance": {
        "instanceId": id, "hostName": "10.0.0.1", "app": app, "ipAddr": "10.0.0.1", "status": "UP",
        "port": {"$": 8091, "@enabled": "true"},
        "dataCenterInfo": {"@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", "name": "MyOwn"},
        "leaseInfo": {"renewalIntervalInSecs": 1, "durationInSecs": lease_secs},
        "metadata": {"weight": "1"}, "vipAddress": "x"
    }})
    .to_string()
}

const JSON: (&str, &str) = ("Accept", "application/json");
const CT: (&str, &str) = ("Content-Type", "application/json");

/// `GET path` asking for JSON (a Eureka server answers XML otherwise).
fn get_json(addr: SocketAddr, path: &str) -> Resp {
    http(addr, "GET", path, &[JSON], "")
}

/// `POST path` with a JSON body.
fn post_json(addr: SocketAddr, path: &str, body: &str) -> Resp {
    http(addr, "POST", path, &[CT], body)
}

#[test]
fn eureka_register_heartbeat_delta_and_eviction() {
    let e = EurekaDouble::start(EurekaDoubleOptions {
        eviction_interval: Duration::from_millis(100),
        ..Default::default()
    })
    .unwrap();
    let addr = e.addr();
    let r = post_json(addr, "/eureka/apps/svc", &eureka_instance("svc", "i-1", 1));
    assert_eq!(r.status, 204);
    // The Netflix prefix works too, and the app name is upper-cased.
    let r = get_json(addr, "/eureka/v2/apps/SVC");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["application"]["name"], "SVC");
    assert_eq!(r.json()["application"]["instance"][0]["instanceId"], "i-1");

    assert_eq!(
        call(addr, "PUT", "/eureka/apps/SVC/i-1?status=UP").status,
        200
    );
    assert_eq!(call(addr, "PUT", "/eureka/apps/SVC/unknown").status, 404);

    let d = get_json(addr, "/eureka/apps/delta").json();
    let inst = &d["applications"]["application"][0]["instance"][0];
    assert_eq!(inst["actionType"], "ADDED");
    assert_eq!(d["applications"]["apps__hashcode"], "UP_1_");

    // Heart-beats keep it past its 1 s lease; then it is evicted.
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(call(addr, "PUT", "/eureka/apps/SVC/i-1").status, 200);
    }
    let t = Instant::now();
    while get_json(addr, "/eureka/apps/SVC").status != 404 {
        assert!(t.elapsed() < Duration::from_secs(5), "never evicted");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "evicted too early"
    );
    let d = get_json(addr, "/eureka/apps/delta").json();
    let list = d["applications"]["application"][0]["instance"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(list.last().unwrap()["actionType"], "DELETED");
    assert_eq!(d["applications"]["apps__hashcode"], "");
    assert_eq!(call(addr, "PUT", "/eureka/apps/SVC/i-1").status, 404);
    assert_eq!(call(addr, "DELETE", "/eureka/apps/SVC/i-1").status, 404);
}

#[test]
fn eureka_status_override_xml_etag_and_validation() {
    let mut e = EurekaDouble::start(EurekaDoubleOptions::default()).unwrap();
    let addr = e.addr();
    post_json(addr, "/eureka/apps/A", &eureka_instance("A", "a-1", 90));
    post_json(addr, "/eureka/apps/A", &eureka_instance("A", "a-2", 90));
    assert_eq!(
        call(
            addr,
            "PUT",
            "/eureka/apps/A/a-2/status?value=OUT_OF_SERVICE"
        )
        .status,
        200
    );
    let full = get_json(addr, "/eureka/apps");
    assert_eq!(
        full.json()["applications"]["apps__hashcode"],
        "OUT_OF_SERVICE_1_UP_1_"
    );
    let d = get_json(addr, "/eureka/apps/delta").json();
    let last = d["applications"]["application"][0]["instance"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (last["actionType"].as_str(), last["status"].as_str()),
        (Some("MODIFIED"), Some("OUT_OF_SERVICE"))
    );

    // XML unless JSON is asked for.
    let xml = call(addr, "GET", "/eureka/apps/A");
    assert!(xml.header("content-type").unwrap().contains("xml"));
    assert!(
        xml.body.contains("<application><instance>") && xml.body.contains("<name>A</name>"),
        "{}",
        xml.body
    );
    assert!(
        xml.body.contains("<port enabled=\"true\">8091</port>"),
        "{}",
        xml.body
    );

    // ETag / If-None-Match.
    let etag = full.header("etag").unwrap().to_string();
    let r = http(
        addr,
        "GET",
        "/eureka/apps",
        &[JSON, ("If-None-Match", &etag)],
        "",
    );
    assert_eq!(r.status, 304);

    // The server's own checks.
    let r = post_json(addr, "/eureka/apps/B", &eureka_instance("A", "x", 90));
    assert_eq!(r.status, 400);
    assert!(r.body.contains("Mismatched appName"));
    let r = post_json(
        addr,
        "/eureka/apps/B",
        r#"{"instance":{"instanceId":"x","hostName":"h","app":"B"}}"#,
    );
    assert_eq!(r.status, 400);

    e.restart().unwrap();
    assert_eq!(get_json(addr, "/eureka/apps/A").status, 404);
    let no_delta = EurekaDouble::start(EurekaDoubleOptions {
        delta_enabled: false,
        ..Default::default()
    })
    .unwrap();
    assert_eq!(get_json(no_delta.addr(), "/eureka/apps/delta").status, 403);
}
