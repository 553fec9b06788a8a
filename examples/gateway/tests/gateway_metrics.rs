//! Observability, in-process on loopback: the admin port's Prometheus text moves with
//! traffic and keeps to its gateway, the admin port answers only what it serves, and
//! every forwarded message reaches its backend with a trace id of its own.
mod gateway_world;

use std::collections::HashSet;

use gateway_world::*;

/// One HTTP/1.1 request to the admin port; returns the status line and the body.
async fn get(addr: std::net::SocketAddr, request: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut all))
        .await
        .expect("the admin port answers within 10 s")
        .unwrap();
    let text = String::from_utf8(all).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// A scrape: `name{labels}` (as written) -> value, checking every sample line parses.
async fn scrape(addr: std::net::SocketAddr) -> HashMap<String, f64> {
    let (status, body) = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    let mut samples = HashMap::new();
    for line in body.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("not a sample line: {line:?}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("not a number: {line:?}"));
        samples.insert(series.to_string(), value);
    }
    samples
}

fn value(samples: &HashMap<String, f64>, series: &str) -> f64 {
    *samples
        .get(series)
        .unwrap_or_else(|| panic!("no {series} among {:#?}", samples.keys()))
}

fn with_admin(id: &'static str) -> impl FnOnce(&mut GatewaySettings) {
    move |s| {
        s.id = id.into();
        s.admin_listen = Some("127.0.0.1:0".parse().unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_carry_the_gateway_label_and_move_with_traffic() {
    let w = world(2, with_admin("gw-metrics")).await;
    // A second gateway in the same process (the recorder is process-global): its series
    // must not show on the first one's port.
    let other = world(1, with_admin("gw-metrics-other")).await;
    let admin = w.gateway.admin_addr().unwrap();
    let before = scrape(admin).await;
    assert_eq!(
        value(&before, r#"gateway_forwarded_total{gateway="gw-metrics"}"#),
        0.0
    );
    assert_eq!(
        value(&before, r#"gateway_sessions{gateway="gw-metrics"}"#),
        0.0
    );
    for cluster in CLUSTERS {
        for metric in [
            "gateway_backend_alive_endpoints",
            "gateway_backend_endpoints",
        ] {
            let series = format!(r#"{metric}{{gateway="gw-metrics",cluster="{cluster}"}}"#);
            assert_eq!(value(&before, &series), 2.0, "{series}");
        }
    }

    let alice = w.player("alice").await;
    let _bob = other.player("bob").await;
    for _ in 0..5 {
        alice
            .request(modules::LOBBY, 1, Bytes::new())
            .await
            .unwrap();
    }
    // One broadcast: one backend send to this gateway, one push (alice is alone here).
    alice.request(modules::CHAT, 1, &b"hi"[..]).await.unwrap();
    alice
        .next_push(Duration::from_secs(2))
        .await
        .expect("the chat push");
    // One refusal, for a forged token.
    let forged = TokenMinter::new("not-the-secret").mint("mallory", Duration::from_secs(60));
    let e = GatewayClient::auth(w.gateway.local_addr(), &forged)
        .await
        .unwrap_err();
    assert_eq!(refusal(e), Refusal::Forged);
    let after = scrape(admin).await;
    let g = r#"gateway="gw-metrics""#;
    assert_eq!(
        value(&after, &format!("gateway_forwarded_total{{{g}}}")),
        6.0
    );
    assert_eq!(
        value(&after, &format!("gateway_admitted_total{{{g}}}")),
        1.0
    );
    assert_eq!(value(&after, &format!("gateway_sessions{{{g}}}")), 1.0);
    assert_eq!(
        value(
            &after,
            &format!(r#"gateway_connections{{{g},state="authenticated"}}"#)
        ),
        1.0
    );
    assert_eq!(
        value(
            &after,
            &format!(r#"gateway_connections{{{g},state="unauthenticated"}}"#)
        ),
        0.0
    );
    for (counter, want) in [
        ("pushed", 1.0),
        ("fanouts", 1.0),
        ("send_queue_drops", 0.0),
        ("send_queue_overflows", 0.0),
        ("rebound", 0.0),
        ("keys_moved", 0.0),
        ("handshake_timeouts", 0.0),
    ] {
        assert_eq!(
            value(&after, &format!("gateway_{counter}_total{{{g}}}")),
            want,
            "{counter}"
        );
    }
    // Refusals by reason: every reason has its series, one forged.
    for r in Refusal::ALL {
        let series = format!(
            r#"gateway_refused_total{{{g},reason="{}"}}"#,
            r.name().to_ascii_lowercase()
        );
        let want = if r == Refusal::Forged { 1.0 } else { 0.0 };
        assert_eq!(value(&after, &series), want, "{series}");
    }
    // The latency histogram: five lobby messages, each in some bucket under 10 s.
    let lobby = format!(r#"{g},module="lobby""#);
    assert_eq!(
        value(&after, &format!("gateway_request_seconds_count{{{lobby}}}")),
        5.0
    );
    assert_eq!(
        value(
            &after,
            &format!(r#"gateway_request_seconds_bucket{{{lobby},le="10"}}"#)
        ),
        5.0
    );
    assert!(value(&after, &format!("gateway_request_seconds_sum{{{lobby}}}")) > 0.0);
    assert!(
        after.keys().all(|k| !k.contains("gw-metrics-other")),
        "another gateway's series on this port"
    );
    assert!(
        scrape(other.gateway.admin_addr().unwrap())
            .await
            .contains_key(r#"gateway_sessions{gateway="gw-metrics-other"}"#)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_port_serves_its_pages_and_refuses_the_rest() {
    let w = world(1, with_admin("gw-admin-pages")).await;
    let admin = w.gateway.admin_addr().unwrap();
    let (status, body) = get(admin, "GET /status HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(body.contains("fetch(\"/metrics\""), "{body}");
    let (status, body) = get(admin, "HEAD /metrics HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(body.is_empty(), "HEAD has no body: {body}");
    let (status, _) = get(admin, "GET /metricsx HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    let (status, _) = get(admin, "POST /metrics HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
    // A head past the 8 KiB cap is cut short, not buffered.
    let huge = format!(
        "GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(16 * 1024)
    );
    let (status, _) = get(admin, &huge).await;
    assert_eq!(status, "HTTP/1.1 400 Bad Request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_forwarded_message_reaches_the_backend_with_its_own_trace_id() {
    let w = world(2, |_| {}).await;
    let alice = w.player("alice").await;
    let mut seen = HashSet::new();
    for _ in 0..50 {
        // Lobby opcode 7: the backend answers the trace id it received.
        let trace = alice
            .request(modules::LOBBY, 7, Bytes::new())
            .await
            .unwrap();
        let trace = String::from_utf8(trace.to_vec()).unwrap();
        assert_eq!(trace.len(), 16, "16 hex digits: {trace:?}");
        assert!(trace.chars().all(|c| c.is_ascii_hexdigit()), "{trace:?}");
        assert!(seen.insert(trace.clone()), "trace id {trace} seen twice");
    }
    // Both backends got some (round robin), each message with its own id.
    assert!(w.backends.iter().all(|b| b.requests() > 0));
}

/// `GET /status.json`: the gateway's counters and its own last minutes, a sample a
/// second (the status page draws its charts from it, so a page opened late shows the
/// minutes before it was opened).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_json_holds_the_gateways_recent_history_for_any_reader() {
    let w = world(2, |s| {
        s.admin_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let admin = w.gateway.admin_addr().unwrap();
    let p = w.player("history").await;
    let started = tokio::time::Instant::now();
    let mut sent = 0u64;
    // Requests for a little over two samples; nothing reads the page meanwhile.
    while started.elapsed() < Duration::from_millis(2500) {
        p.request(modules::LOBBY, 1, &b"x"[..]).await.unwrap();
        sent += 1;
    }
    let (status, body) = get(admin, "GET /status.json HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(v["gateway"], "gw-a", "{v}");
    assert_eq!(v["sessions"], 1, "{v}");
    assert!(v["forwarded"].as_u64().unwrap() >= sent, "{v}");
    assert_eq!(v["refused"]["forged"], 0, "{v}");
    let history = v["history"].as_array().expect("history");
    assert!(history.len() >= 2, "a sample a second: {v}");
    let busy: Vec<&serde_json::Value> = history
        .iter()
        .filter(|s| s["msgs"].as_f64().unwrap_or(0.0) > 0.0)
        .collect();
    assert!(!busy.is_empty(), "{v}");
    for s in &busy {
        let p99 = s["p99_ms"].as_f64().expect("a p99 where messages went");
        assert!(p99 > 0.0 && p99 < 1000.0, "{s}");
    }
    assert_eq!(history.last().unwrap()["sessions"], 1, "{v}");
    let times: Vec<u64> = history.iter().map(|s| s["t"].as_u64().unwrap()).collect();
    assert!(times.windows(2).all(|t| t[1] > t[0]), "{times:?}");
}

/// Every endpoint docs/gateway-protocol.md's admin table lists answers as it says: the
/// table is the operator's reference, so it is run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_endpoint_the_protocol_doc_lists_answers() {
    const DOC: &str = include_str!("../../../docs/gateway-protocol.md");
    let rows: Vec<(String, String)> = DOC
        .split("<!-- table: admin -->")
        .nth(1)
        .expect("the admin table")
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[1].to_string(), cells[2].trim_matches('`').to_string())
        })
        .collect();
    assert_eq!(rows.len(), 5, "{rows:?}");
    let w = world(1, with_admin("gw-admin-doc")).await;
    let admin = w.gateway.admin_addr().unwrap();
    for (method, path) in &rows {
        let (status, body) = get(admin, &format!("{method} {path} HTTP/1.1\r\n\r\n")).await;
        let want = if method == "POST" {
            "HTTP/1.1 202 Accepted"
        } else {
            "HTTP/1.1 200 OK"
        };
        assert_eq!(status, want, "{method} {path}: {body}");
    }
}
