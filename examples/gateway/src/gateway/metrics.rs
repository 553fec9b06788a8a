//! The gateway's metrics: Prometheus text on the admin port (`GET /metrics`) and a
//! status page reading it (`GET /status`, examples/gateway/static/status.html, compiled in).
//!
//! Recording goes through the `metrics` facade (the rpc-client records there too) into
//! one process-global [`PrometheusRecorder`](metrics_exporter_prometheus::PrometheusRecorder),
//! installed by the first gateway started and rendered by `metrics-exporter-prometheus`;
//! nothing here writes exposition text. Every gateway metric carries the label
//! `gateway` = the gateway's id, because one process may run several gateways (the
//! tests do): a gateway's `/metrics` keeps its own series and the unlabelled ones (the
//! rpc-client's) and leaves out other gateways'. If another recorder was installed first
//! (a program embedding the gateway with its own exporter), the gateway records into
//! that one and `/metrics` answers 503 saying so.
//!
//! Histograms are drained into their buckets by a scrape and, so that a gateway nobody
//! scrapes does not buffer samples without bound, by an upkeep thread every 5 s.
//!
//! What a gateway records itself (see [`names`]): request latency per module, recorded
//! around the backend call; at scrape time, connections by state, sessions, alive
//! endpoints per backend cluster and the [`GatewayStats`](super::GatewayStats) counters.
//! The names other parts of the gateway record under (rate limits, login queue,
//! breakers, held requests, shedding, drain) are described here, so their HELP text is
//! one place; the exporter prints a HELP line with a metric's first sample.
//!
//! Why the status page is static and reads `/metrics` in the browser rather than being
//! rendered on the server: the exposition is already the one complete view of every
//! metric, whichever part of the gateway recorded it, so the page needs no second
//! source of truth and no HTML templating on the server; a metric nobody recorded
//! simply shows as "n/a".

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use metrics::{Histogram, Unit};
use metrics_exporter_prometheus::formatting::sanitize_label_value;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use super::admission::Refusal;
use super::core::Shared;
use super::settings::GatewaySettings;

/// The status page: fetches `/metrics` every 2 s (`?every=<ms>`) and shows live charts of
/// the last 5 minutes (messages/s, request p99, sessions, drawn in SVG by the page's own
/// script), backends alive of total per cluster, breaker states, refusals by reason,
/// connections, the login queue, rate-limit rejections and drain.
pub const STATUS_HTML: &str = include_str!("../../static/status.html");

/// The metric names, for whoever records them (each with the label `gateway`).
pub mod names {
    /// Gauge, `state` = `unauthenticated` | `authenticated`: client connections.
    pub const CONNECTIONS: &str = "gateway_connections";
    /// Gauge: sessions held (connected or detached awaiting resume).
    pub const SESSIONS: &str = "gateway_sessions";
    /// Histogram, `module` = module name: seconds from routing a client message to its
    /// answer being queued to the client.
    pub const REQUEST_SECONDS: &str = "gateway_request_seconds";
    /// Gauge, `cluster`: alive endpoints of a backend cluster.
    pub const BACKEND_ALIVE: &str = "gateway_backend_alive_endpoints";
    /// Gauge, `cluster`: endpoints of a backend cluster the registry lists (alive or
    /// not): the page shows "alive of total".
    pub const BACKEND_ENDPOINTS: &str = "gateway_backend_endpoints";
    /// Counter: clients admitted (AUTH or RESUME accepted).
    pub const ADMITTED: &str = "gateway_admitted_total";
    /// Counter, `reason` = the refusal's name in lower case (`forged`, `late`, ...; see
    /// `docs/gateway-protocol.md`): clients refused at admission.
    pub const REFUSED: &str = "gateway_refused_total";
    /// Counter: session bindings released, their backend gone (`REBOUND` sent).
    pub const REBOUND: &str = "gateway_rebound_total";
    /// Counter: keys of keyed modules moved to another backend (`MOVED` sent).
    pub const KEYS_MOVED: &str = "gateway_keys_moved_total";
    /// Counter: WebSocket connections cut in their handshake by the auth deadline.
    pub const HANDSHAKE_TIMEOUTS: &str = "gateway_handshake_timeouts_total";
    /// Counter: connections that closed before sending a frame (not refusals).
    pub const CLOSED_BEFORE_FRAME: &str = "gateway_closed_before_frame_total";
    /// Counter: session store operations that failed (writes are retried).
    pub const SESSION_STORE_FAILURES: &str = "gateway_session_store_failures_total";
    /// Counter: client messages forwarded to backends.
    pub const FORWARDED: &str = "gateway_forwarded_total";
    /// Counter: frames pushed to clients by backends (after fan-out).
    pub const PUSHED: &str = "gateway_pushed_total";
    /// Counter: backend broadcast commands received.
    pub const FANOUTS: &str = "gateway_fanouts_total";
    /// Counter: unreliable frames dropped from slow clients' send queues.
    pub const SEND_QUEUE_DROPS: &str = "gateway_send_queue_drops_total";
    /// Counter: clients disconnected for overflowing their send queue.
    pub const SEND_QUEUE_OVERFLOWS: &str = "gateway_send_queue_overflows_total";
    /// Counter, `kind`: connections or messages refused by a rate limit.
    pub const RATE_LIMITED: &str = "gateway_rate_limited_total";
    /// Gauge: clients waiting in the login queue.
    pub const LOGIN_QUEUE_LENGTH: &str = "gateway_login_queue_length";
    /// Counter: clients admitted from the login queue.
    pub const LOGIN_QUEUE_ADMITTED: &str = "gateway_login_queue_admitted_total";
    /// Gauge, `cluster`: circuit breaker state, 0 closed, 1 half-open, 2 open.
    pub const BREAKER_STATE: &str = "gateway_breaker_state";
    /// Counter, `cluster`, `kind`: failed backend calls.
    pub const BACKEND_ERRORS: &str = "gateway_backend_errors_total";
    /// Gauge, `cluster`: requests held while the cluster has no alive endpoint.
    pub const HELD_REQUESTS: &str = "gateway_held_requests";
    /// Counter, `cluster`: held requests answered "busy" after the hold bound.
    pub const HELD_EXPIRED: &str = "gateway_held_expired_total";
    /// Counter, `module`: sheddable requests dropped under overload.
    pub const SHED: &str = "gateway_shed_total";
    /// Gauge: 1 while the gateway drains, else 0.
    pub const DRAINING: &str = "gateway_draining";
}

/// Bucket bounds of [`names::REQUEST_SECONDS`]: 100 µs to 10 s, about three per decade
/// (a loopback backend answers in well under a millisecond; the backend timeout is
/// seconds).
pub const REQUEST_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// The handle of the recorder the gateway installed, or `None` if another recorder was
/// installed first (then nothing here can render what is recorded).
static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process's Prometheus handle, installing the recorder on first use.
pub fn handle() -> Option<&'static PrometheusHandle> {
    RECORDER.get_or_init(install).as_ref()
}

fn install() -> Option<PrometheusHandle> {
    let builder = match PrometheusBuilder::new().set_buckets_for_metric(
        Matcher::Full(names::REQUEST_SECONDS.to_string()),
        REQUEST_BUCKETS,
    ) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "metrics recorder not configured; /metrics disabled");
            return None;
        }
    };
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    let installed = metrics::set_global_recorder(recorder).is_ok();
    // Into whichever recorder is installed: ours, or the one that was there first.
    describe();
    if !installed {
        tracing::warn!("another metrics recorder is installed; /metrics cannot render it");
        return None;
    }
    let upkeep = handle.clone();
    let spawned = std::thread::Builder::new()
        .name("gateway-metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(Duration::from_secs(5));
                upkeep.run_upkeep();
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "metrics upkeep thread not started; scrapes drain histograms");
    }
    Some(handle)
}

fn describe() {
    use metrics::{describe_counter as counter, describe_gauge as gauge};
    use names::*;
    gauge!(
        CONNECTIONS,
        "Client connections by state (unauthenticated, authenticated)."
    );
    gauge!(
        SESSIONS,
        "Sessions held: connected, or detached awaiting resume."
    );
    metrics::describe_histogram!(
        REQUEST_SECONDS,
        Unit::Seconds,
        "Client message latency through the gateway, per module: backend call and reply."
    );
    gauge!(BACKEND_ALIVE, "Alive endpoints of each backend cluster.");
    gauge!(
        BACKEND_ENDPOINTS,
        "Endpoints of each backend cluster the registry lists, alive or not."
    );
    counter!(ADMITTED, "Clients admitted (AUTH or RESUME accepted).");
    counter!(REFUSED, "Clients refused at admission, by reason.");
    counter!(
        REBOUND,
        "Session bindings released because their backend was gone."
    );
    counter!(
        KEYS_MOVED,
        "Keys of keyed modules moved to another backend."
    );
    counter!(
        HANDSHAKE_TIMEOUTS,
        "WebSocket connections cut in their handshake by the auth deadline."
    );
    counter!(
        CLOSED_BEFORE_FRAME,
        "Connections that closed before sending a frame (not refusals)."
    );
    counter!(
        SESSION_STORE_FAILURES,
        "Session store operations that failed (writes are retried)."
    );
    counter!(FORWARDED, "Client messages forwarded to backends.");
    counter!(
        PUSHED,
        "Frames pushed to clients by backends, after fan-out."
    );
    counter!(FANOUTS, "Backend broadcast commands received.");
    counter!(
        SEND_QUEUE_DROPS,
        "Unreliable frames dropped for slow clients."
    );
    counter!(
        SEND_QUEUE_OVERFLOWS,
        "Clients disconnected for not keeping up."
    );
    counter!(
        RATE_LIMITED,
        "Connections or messages refused by a rate limit, by kind."
    );
    gauge!(LOGIN_QUEUE_LENGTH, "Clients waiting in the login queue.");
    counter!(
        LOGIN_QUEUE_ADMITTED,
        "Clients admitted from the login queue."
    );
    gauge!(
        BREAKER_STATE,
        "Backend cluster circuit breaker: 0 closed, 1 half-open, 2 open."
    );
    counter!(BACKEND_ERRORS, "Failed backend calls, by cluster and kind.");
    gauge!(
        HELD_REQUESTS,
        "Requests held while their cluster has no alive endpoint."
    );
    counter!(
        HELD_EXPIRED,
        "Held requests answered busy after the hold bound."
    );
    counter!(
        SHED,
        "Sheddable requests dropped under overload, by module."
    );
    gauge!(DRAINING, "1 while the gateway drains, else 0.");
}

/// The metrics one gateway records on its hot path: a latency histogram per module,
/// registered once (a lookup by name and labels per message would cost more than the
/// recording).
pub(crate) struct GatewayMetrics {
    requests: HashMap<u16, Histogram>,
    /// Every module's latencies together, for the gateway's own history.
    pub(crate) latencies: super::history::Latencies,
}

impl GatewayMetrics {
    /// Installs the recorder if no gateway did yet and registers `settings`' modules.
    pub(crate) fn new(settings: &GatewaySettings) -> GatewayMetrics {
        let _ = handle();
        let requests = settings
            .modules
            .values()
            .map(|m| {
                let h = metrics::histogram!(names::REQUEST_SECONDS,
                    "gateway" => settings.id.clone(), "module" => m.name.clone());
                (m.id, h)
            })
            .collect();
        GatewayMetrics {
            requests,
            latencies: Default::default(),
        }
    }

    /// Times one message of `module` until the returned guard is dropped.
    pub(crate) fn time(&self, module: u16) -> RequestTimer<'_> {
        RequestTimer {
            histogram: self.requests.get(&module),
            latencies: &self.latencies,
            started: Instant::now(),
        }
    }
}

/// Records the time since its creation into a module's latency histogram when dropped
/// (whichever way the forwarding ends).
pub(crate) struct RequestTimer<'a> {
    histogram: Option<&'a Histogram>,
    latencies: &'a super::history::Latencies,
    started: Instant,
}

impl Drop for RequestTimer<'_> {
    fn drop(&mut self) {
        let took = self.started.elapsed();
        if let Some(h) = self.histogram {
            h.record(took.as_secs_f64());
        }
        self.latencies.record(took);
    }
}

/// Sets the values a gateway keeps elsewhere (its counters, sessions, connections,
/// alive endpoints), read when scraped.
fn refresh(shared: &Shared) {
    let gw = shared.settings.id.clone();
    let stats = &shared.stats;
    for r in Refusal::ALL {
        metrics::counter!(names::REFUSED, "gateway" => gw.clone(),
            "reason" => r.name().to_ascii_lowercase())
        .absolute(stats.refused_for(r));
    }
    metrics::counter!(names::KEYS_MOVED, "gateway" => gw.clone())
        .absolute(shared.keys.moved_total());
    metrics::counter!(names::SESSION_STORE_FAILURES, "gateway" => gw.clone())
        .absolute(shared.sessions.store_failures());
    for (name, value) in [
        (names::ADMITTED, &stats.admitted),
        (names::REBOUND, &stats.rebound),
        (names::HANDSHAKE_TIMEOUTS, &stats.handshake_timeouts),
        (names::CLOSED_BEFORE_FRAME, &stats.closed_before_frame),
        (names::FORWARDED, &stats.forwarded),
        (names::PUSHED, &stats.pushed),
        (names::FANOUTS, &stats.fanouts),
        (names::SEND_QUEUE_DROPS, &stats.dropped),
        (names::SEND_QUEUE_OVERFLOWS, &stats.overflowed),
    ] {
        metrics::counter!(name, "gateway" => gw.clone()).absolute(value.load(Ordering::Relaxed));
    }
    let sessions = shared.sessions.members("*");
    let connected = sessions.iter().filter(|s| s.link().is_some()).count();
    metrics::gauge!(names::SESSIONS, "gateway" => gw.clone()).set(sessions.len() as f64);
    // Permits taken = connections still authenticating.
    let cap = shared.settings.max_unauthenticated.max(1);
    let authenticating = cap.saturating_sub(shared.unauthenticated.available_permits());
    metrics::gauge!(names::CONNECTIONS, "gateway" => gw.clone(), "state" => "unauthenticated")
        .set(authenticating as f64);
    metrics::gauge!(names::CONNECTIONS, "gateway" => gw.clone(), "state" => "authenticated")
        .set(connected as f64);
    for (cluster, client) in shared.backends.get().into_iter().flatten() {
        metrics::gauge!(names::BACKEND_ALIVE, "gateway" => gw.clone(), "cluster" => cluster.clone())
            .set(client.alive().len() as f64);
        metrics::gauge!(names::BACKEND_ENDPOINTS, "gateway" => gw.clone(), "cluster" => cluster.clone())
            .set(client.endpoints().len() as f64);
    }
}

/// Keeps the exposition's lines that are `gateway`'s or nobody's (unlabelled by
/// `gateway`: the rpc-client's, comments).
pub fn only_gateway(text: &str, gateway: &str) -> String {
    let ours = format!("gateway=\"{}\"", sanitize_label_value(gateway));
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let labels = line.find('{').map(|i| &line[i..]).unwrap_or("");
        if line.starts_with('#') || !labels_have(labels, "gateway=\"") || labels_have(labels, &ours)
        {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Whether the label block `{a="x",b="y"} ...` has `pair` as a whole label (`pair` is
/// `name="value"`) or, if `pair` ends in `"`, a label starting so (`name="`).
fn labels_have(labels: &str, pair: &str) -> bool {
    labels.match_indices(pair).any(|(i, _)| {
        let before = labels[..i].chars().next_back();
        let after = labels[i + pair.len()..].chars().next();
        let whole = pair.ends_with("=\"") || matches!(after, Some(',' | '}'));
        matches!(before, Some('{' | ',')) && whole
    })
}

/// The admin port's `/metrics` and `/status`, for one gateway.
#[derive(Clone)]
pub(crate) struct Pages {
    shared: Weak<Shared>,
}

impl Pages {
    /// The pages of `shared`'s gateway (held weakly: the admin port does not keep a
    /// stopped gateway alive).
    pub(crate) fn new(shared: &Arc<Shared>) -> Pages {
        Pages {
            shared: Arc::downgrade(shared),
        }
    }

    /// The response to a request for `/metrics` or `/status` whose head is `head`;
    /// `None` for any other request.
    pub(crate) fn answer(&self, head: &[u8]) -> Option<Vec<u8>> {
        let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
        let line = String::from_utf8_lossy(line);
        let mut parts = line.split(' ');
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let path = target.split('?').next().unwrap_or("");
        if !matches!(method, "GET" | "HEAD") {
            return None;
        }
        let response = match path {
            "/status" => super::admin::respond("200 OK", "text/html; charset=utf-8", STATUS_HTML),
            "/status.json" => self.status_json(),
            "/metrics" => self.metrics(),
            _ => return None,
        };
        Some(if method == "HEAD" {
            head_only(response)
        } else {
            response
        })
    }

    /// `GET /status.json`: the gateway's id, its counters now, and its last five
    /// minutes ([`history`](super::history)).
    fn status_json(&self) -> Vec<u8> {
        let Some(shared) = self.shared.upgrade() else {
            return super::admin::respond(
                "503 Service Unavailable",
                "text/plain",
                "gateway stopped\n",
            );
        };
        let stats = &shared.stats;
        let refused: serde_json::Map<String, serde_json::Value> = Refusal::ALL
            .iter()
            .map(|r| (r.name().to_ascii_lowercase(), stats.refused_for(*r).into()))
            .collect();
        let body = serde_json::json!({
            "gateway": shared.settings.id,
            "draining": shared.drain.is_draining(),
            "sessions": shared.sessions.len(),
            "admitted": stats.admitted.load(Ordering::Relaxed),
            "forwarded": stats.forwarded.load(Ordering::Relaxed),
            "pushed": stats.pushed.load(Ordering::Relaxed),
            "refused": refused,
            "history_every_ms": super::history::EVERY.as_millis() as u64,
            "history": shared.history.samples(),
        });
        super::admin::respond("200 OK", "application/json", &body.to_string())
    }

    fn metrics(&self) -> Vec<u8> {
        let Some(shared) = self.shared.upgrade() else {
            return super::admin::respond(
                "503 Service Unavailable",
                "text/plain",
                "gateway stopped\n",
            );
        };
        let Some(handle) = handle() else {
            return super::admin::respond(
                "503 Service Unavailable",
                "text/plain",
                "another metrics recorder is installed in this process: it exports the \
                 gateway's metrics, this port cannot\n",
            );
        };
        refresh(&shared);
        let text = only_gateway(&handle.render(), &shared.settings.id);
        super::admin::respond("200 OK", "text/plain; version=0.0.4; charset=utf-8", &text)
    }
}

fn head_only(mut response: Vec<u8>) -> Vec<u8> {
    if let Some(end) = response.windows(4).position(|w| w == b"\r\n\r\n") {
        response.truncate(end + 4);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gateway_sees_its_own_series_and_the_unlabelled_ones() {
        let text = "# HELP gateway_sessions Sessions.\n\
                    # TYPE gateway_sessions gauge\n\
                    gateway_sessions{gateway=\"gw-1\"} 3\n\
                    gateway_sessions{gateway=\"gw-10\"} 4\n\
                    gateway_sessions{gateway=\"x\",note=\"gateway=\\\"gw-1\\\"\"} 5\n\
                    gateway_request_seconds_bucket{module=\"lobby\",gateway=\"gw-1\",le=\"0.001\"} 2\n\
                    meshline_rpc_alive_endpoints{target=\"lobby\"} 2\n\
                    other_total{fromgateway=\"gw-2\"} 6\n";
        let kept = only_gateway(text, "gw-1");
        assert!(kept.contains("# TYPE gateway_sessions gauge"));
        assert!(kept.contains("gateway_sessions{gateway=\"gw-1\"} 3"));
        assert!(!kept.contains("gw-10"), "{kept}");
        assert!(
            !kept.contains("} 5"),
            "a quoted look-alike is not the label: {kept}"
        );
        assert!(kept.contains("le=\"0.001\"} 2"));
        assert!(kept.contains("meshline_rpc_alive_endpoints"));
        assert!(
            kept.contains("fromgateway"),
            "not the gateway label: {kept}"
        );
    }

    #[test]
    fn only_metrics_and_status_are_answered_here() {
        let pages = Pages {
            shared: Weak::new(),
        };
        let status = pages.answer(b"GET /status HTTP/1.1\r\n\r\n").unwrap();
        assert!(String::from_utf8_lossy(&status).starts_with("HTTP/1.1 200 OK"));
        assert!(String::from_utf8_lossy(&status).contains("/metrics"));
        let head = pages.answer(b"HEAD /status HTTP/1.1\r\n\r\n").unwrap();
        assert!(head.ends_with(b"\r\n\r\n"));
        let gone = pages.answer(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n").unwrap();
        assert!(String::from_utf8_lossy(&gone).starts_with("HTTP/1.1 503"));
        assert!(
            pages
                .answer(b"GET /gateway.html HTTP/1.1\r\n\r\n")
                .is_none()
        );
        assert!(pages.answer(b"POST /metrics HTTP/1.1\r\n\r\n").is_none());
        assert!(pages.answer(b"\xff\xfe").is_none());
    }
}
