//! A protocol-faithful Eureka server double (in-process HTTP server).
//!
//! The Eureka server is only published on Maven, which cannot be reached from the build
//! machines ([docs/registry-wire.md §1](https://github.com/meshline/meshline/blob/main/docs/registry-wire.md#1-why-test-doubles)), so the Eureka backend is tested against this
//! double. It serves the REST API under both `/eureka/...` (Spring Cloud) and
//! `/eureka/v2/...` (Netflix) with the behaviours of [docs/registry-wire.md §3](https://github.com/meshline/meshline/blob/main/docs/registry-wire.md#3-eureka):
//!
//! - `POST /apps/{APP}` (JSON `{"instance":{...}}`) → **204**. The application name is
//!   upper-cased as Eureka does; the instance ID is `instanceId`, else `hostName`. The
//!   server's own checks give 400 (`Missing instanceId`, `Missing hostname`, `Missing ip
//!   address`, `Missing dataCenterInfo`, `Mismatched appName`).
//! - `PUT /apps/{APP}/{id}[?status=&lastDirtyTimestamp=]` (heartbeat) → 200, **404 when
//!   the instance is unknown** (the client must re-register) or when the client's
//!   `lastDirtyTimestamp` is newer than the server's.
//! - `DELETE /apps/{APP}/{id}` → 200, or 404 when unknown.
//! - `PUT|DELETE /apps/{APP}/{id}/status[?value=]`, `PUT /apps/{APP}/{id}/metadata?k=v`.
//! - `GET /apps`, `GET /apps/{APP}`, `GET /apps/{APP}/{id}`, `GET /instances/{id}`,
//!   `GET /vips/{vip}`, `GET /svips/{svip}`: JSON when `Accept` contains
//!   `application/json`, **XML otherwise** (as the real server). `ETag` / `If-None-Match`
//!   answer 304.
//! - `GET /apps/delta`: the instances changed within the retention window (default 3
//!   min), each with `actionType` `ADDED` / `MODIFIED` / `DELETED`, and `apps__hashcode`
//!   of the whole registry (`UP_2_DOWN_1_`-style, statuses sorted) so clients can check
//!   their merged copy; 403 when delta is disabled
//!   ([`EurekaDoubleOptions::delta_enabled`]).
//! - **Leases really expire**: an instance not renewed within its
//!   `leaseInfo.durationInSecs` (default 90) is evicted by a task running every
//!   [`EurekaDoubleOptions::eviction_interval`] (real server: 60 s), and the eviction
//!   shows in the delta as `DELETED`. (The real server's eviction check effectively
//!   waits twice the lease, a long-standing quirk; the double waits one lease.)
//!
//! Differences from the real server, on purpose: no read-only response cache (writes
//! are visible at once, the real server lags up to 30 s), no self-preservation, no
//! peer replication, JSON registrations only (an XML body is a 415).

use std::collections::{BTreeMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use serde_json::{Map, Value, json};

use crate::Result;
use crate::http_double::{Built, HttpDouble};

/// Settings of a [`EurekaDouble`].
#[derive(Debug, Clone)]
pub struct EurekaDoubleOptions {
    /// Port to bind on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// How often expired leases are evicted (real server: 60 s).
    pub eviction_interval: Duration,
    /// How long changes stay in the delta (real server: 3 min).
    pub retention: Duration,
    /// Serve `GET /apps/delta` (otherwise 403, as with `disableDelta`).
    pub delta_enabled: bool,
}

impl Default for EurekaDoubleOptions {
    fn default() -> Self {
        EurekaDoubleOptions {
            port: 0,
            eviction_interval: Duration::from_millis(500),
            retention: Duration::from_secs(180),
            delta_enabled: true,
        }
    }
}

/// A running Eureka server double. Dropping it stops the server.
///
/// ```no_run
/// let eureka = meshline_testkit::EurekaDouble::start(Default::default()).unwrap();
/// println!("serviceUrl {}", eureka.service_url()); // http://127.0.0.1:<port>/eureka
/// ```
pub struct EurekaDouble {
    opts: EurekaDoubleOptions,
    server: HttpDouble,
}

impl std::fmt::Debug for EurekaDouble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EurekaDouble")
            .field("addr", &self.server.addr())
            .field("running", &self.server.is_running())
            .finish()
    }
}

impl EurekaDouble {
    /// Starts the double on `127.0.0.1:<opts.port>`.
    pub fn start(opts: EurekaDoubleOptions) -> Result<Self> {
        let o = opts.clone();
        let server = HttpDouble::start("eureka", opts.port, &move || build(o.clone()))?;
        Ok(EurekaDouble { opts, server })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// `http://host:port/eureka`, as Seata's `registry.eureka.serviceUrl` wants it.
    pub fn service_url(&self) -> String {
        format!("http://{}/eureka", self.addr())
    }

    /// Stops the server: every connection is closed.
    pub fn stop(&mut self) {
        self.server.stop();
    }

    /// Starts it again on the same port with an **empty** registry (no persistence).
    pub fn restart(&mut self) -> Result<()> {
        let o = self.opts.clone();
        self.server.restart(&move || build(o.clone()))
    }

    /// True between start/restart and stop.
    pub fn is_running(&self) -> bool {
        self.server.is_running()
    }
}

// ---------------------------------------------------------------- state

#[derive(Debug, Clone)]
struct Rec {
    app: String,
    id: String,
    /// The instance object as registered (fields the server owns are overlaid on output).
    body: Map<String, Value>,
    status: String,
    overridden: String,
    lease: Duration,
    renewal_secs: u64,
    last_renewal: Instant,
    registration_ms: u128,
    last_renewal_ms: u128,
    up_ms: u128,
    last_updated_ms: u128,
    last_dirty_ms: u128,
}

impl Rec {
    fn effective_status(&self) -> &str {
        if self.overridden != "UNKNOWN" && !self.overridden.is_empty() {
            &self.overridden
        } else {
            &self.status
        }
    }

    fn to_json(&self, action: &str) -> Value {
        let mut o = self.body.clone();
        o.insert("instanceId".into(), json!(self.id));
        o.insert("app".into(), json!(self.app));
        o.insert("status".into(), json!(self.effective_status()));
        o.remove("overriddenstatus");
        o.insert("overriddenStatus".into(), json!(self.overridden));
        o.insert(
            "leaseInfo".into(),
            json!({
                "renewalIntervalInSecs": self.renewal_secs,
                "durationInSecs": self.lease.as_secs(),
                "registrationTimestamp": self.registration_ms as u64,
                "lastRenewalTimestamp": self.last_renewal_ms as u64,
                "evictionTimestamp": 0,
                "serviceUpTimestamp": self.up_ms as u64,
            }),
        );
        o.entry("metadata").or_insert_with(|| json!({}));
        o.insert("isCoordinatingDiscoveryServer".into(), json!("false"));
        o.insert(
            "lastUpdatedTimestamp".into(),
            json!(self.last_updated_ms.to_string()),
        );
        o.insert(
            "lastDirtyTimestamp".into(),
            json!(self.last_dirty_ms.to_string()),
        );
        o.insert("actionType".into(), json!(action));
        Value::Object(o)
    }
}

struct Change {
    at: Instant,
    action: &'static str,
    rec: Rec,
}

struct Db {
    apps: BTreeMap<String, BTreeMap<String, Rec>>,
    recent: VecDeque<Change>,
    version: u64,
}

impl Db {
    fn record(&mut self, action: &'static str, rec: Rec) {
        self.version += 1;
        self.recent.push_back(Change {
            at: Instant::now(),
            action,
            rec,
        });
    }

    fn find(&self, id: &str) -> Option<&Rec> {
        self.apps.values().find_map(|m| m.get(id))
    }

    fn hashcode(&self) -> String {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for r in self.apps.values().flat_map(|m| m.values()) {
            *counts.entry(r.effective_status()).or_default() += 1;
        }
        counts
            .iter()
            .map(|(s, n)| format!("{s}_{n}_"))
            .collect::<String>()
    }
}

struct Shared {
    opts: EurekaDoubleOptions,
    db: Mutex<Db>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Db> {
        self.db.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn build(opts: EurekaDoubleOptions) -> Built {
    let shared = Arc::new(Shared {
        opts,
        db: Mutex::new(Db {
            apps: BTreeMap::new(),
            recent: VecDeque::new(),
            version: 1,
        }),
    });
    let api = || {
        Router::new()
            .route("/apps", get(all_apps))
            .route("/apps/", get(all_apps))
            .route("/apps/delta", get(delta))
            .route("/apps/{app}", get(get_app).post(register))
            .route(
                "/apps/{app}/{id}",
                get(get_instance).put(renew).delete(cancel),
            )
            .route(
                "/apps/{app}/{id}/status",
                put(set_status).delete(clear_status),
            )
            .route("/apps/{app}/{id}/metadata", put(set_metadata))
            .route("/instances/{id}", get(get_instance_by_id))
            .route("/vips/{vip}", get(by_vip))
            .route("/svips/{svip}", get(by_svip))
    };
    let router = Router::new()
        .nest("/eureka", api())
        .nest("/eureka/v2", api())
        .fallback(|| async { (StatusCode::NOT_FOUND, "Not Found") })
        .with_state(shared.clone());
    Built {
        router,
        background: Box::pin(evictor(shared)),
    }
}

async fn evictor(shared: Arc<Shared>) {
    let mut tick =
        tokio::time::interval(shared.opts.eviction_interval.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Instant::now();
        let mut db = shared.lock();
        let expired: Vec<(String, String)> = db
            .apps
            .iter()
            .flat_map(|(app, m)| {
                m.values()
                    .filter(|r| now.duration_since(r.last_renewal) > r.lease)
                    .map(|r| (app.clone(), r.id.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        for (app, id) in expired {
            if let Some(rec) = db.apps.get_mut(&app).and_then(|m| m.remove(&id)) {
                db.record("DELETED", rec);
            }
            if db.apps.get(&app).is_some_and(BTreeMap::is_empty) {
                db.apps.remove(&app);
            }
        }
        let retention = shared.opts.retention;
        while db
            .recent
            .front()
            .is_some_and(|c| now.duration_since(c.at) > retention)
        {
            db.recent.pop_front();
        }
    }
}

// ---------------------------------------------------------------- rendering

fn wants_json(h: &HeaderMap) -> bool {
    h.get_all("accept")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/json"))
}

/// Renders `v` (the JSON form, `{"applications": {...}}`) as JSON or XML, with an ETag.
fn render(h: &HeaderMap, v: &Value) -> Response {
    let (body, ctype) = if wants_json(h) {
        (v.to_string(), "application/json")
    } else {
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>");
        if let Some(o) = v.as_object() {
            for (k, child) in o {
                to_xml(k, child, &mut out);
            }
        }
        (out, "application/xml")
    };
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut hasher);
    let etag = format!("\"{:016x}\"", hasher.finish());
    let not_modified = h
        .get("if-none-match")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == etag);
    let mut r = if not_modified {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (StatusCode::OK, body).into_response()
    };
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static(ctype));
    if let Ok(e) = HeaderValue::from_str(&etag) {
        r.headers_mut().insert("etag", e);
    }
    r
}

fn xml_escape(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
}

/// Eureka's JSON is the XStream mapping of its XML: `@x` keys are attributes, `$` is the
/// text, arrays are repeated elements. This reverses it.
fn to_xml(name: &str, v: &Value, out: &mut String) {
    match v {
        Value::Array(items) => {
            for i in items {
                to_xml(name, i, out);
            }
        }
        Value::Object(o) => {
            out.push('<');
            out.push_str(name);
            for (k, a) in o {
                if let Some(attr) = k.strip_prefix('@') {
                    out.push(' ');
                    out.push_str(attr);
                    out.push_str("=\"");
                    xml_escape(&scalar_text(a), out);
                    out.push('"');
                }
            }
            out.push('>');
            for (k, child) in o {
                if k == "$" {
                    xml_escape(&scalar_text(child), out);
                } else if !k.starts_with('@') {
                    to_xml(k, child, out);
                }
            }
            out.push_str("</");
            out.push_str(name);
            out.push('>');
        }
        other => {
            out.push('<');
            out.push_str(name);
            out.push('>');
            xml_escape(&scalar_text(other), out);
            out.push_str("</");
            out.push_str(name);
            out.push('>');
        }
    }
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn applications(db: &Db, filter: impl Fn(&Rec) -> bool) -> Value {
    let apps: Vec<Value> = db
        .apps
        .iter()
        .filter_map(|(name, m)| {
            let inst: Vec<Value> = m
                .values()
                .filter(|r| filter(r))
                .map(|r| r.to_json("ADDED"))
                .collect();
            (!inst.is_empty()).then(|| json!({"name": name, "instance": inst}))
        })
        .collect();
    json!({"applications": {
        "versions__delta": db.version.to_string(),
        "apps__hashcode": db.hashcode(),
        "application": apps,
    }})
}

// ---------------------------------------------------------------- handlers

async fn all_apps(State(s): State<Arc<Shared>>, h: HeaderMap) -> Response {
    let v = applications(&s.lock(), |_| true);
    render(&h, &v)
}

async fn delta(State(s): State<Arc<Shared>>, h: HeaderMap) -> Response {
    if !s.opts.delta_enabled {
        return (StatusCode::FORBIDDEN, "delta is disabled").into_response();
    }
    let db = s.lock();
    let now = Instant::now();
    let mut by_app: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for c in db
        .recent
        .iter()
        .filter(|c| now.duration_since(c.at) <= s.opts.retention)
    {
        by_app
            .entry(c.rec.app.clone())
            .or_default()
            .push(c.rec.to_json(c.action));
    }
    let apps: Vec<Value> = by_app
        .into_iter()
        .map(|(name, inst)| json!({"name": name, "instance": inst}))
        .collect();
    let v = json!({"applications": {
        "versions__delta": db.version.to_string(),
        "apps__hashcode": db.hashcode(),
        "application": apps,
    }});
    render(&h, &v)
}

async fn get_app(State(s): State<Arc<Shared>>, Path(app): Path<String>, h: HeaderMap) -> Response {
    let db = s.lock();
    match db.apps.get(&app.to_uppercase()) {
        Some(m) if !m.is_empty() => {
            let inst: Vec<Value> = m.values().map(|r| r.to_json("ADDED")).collect();
            render(
                &h,
                &json!({"application": {"name": app.to_uppercase(), "instance": inst}}),
            )
        }
        _ => (StatusCode::NOT_FOUND, "").into_response(),
    }
}

async fn get_instance(
    State(s): State<Arc<Shared>>,
    Path((app, id)): Path<(String, String)>,
    h: HeaderMap,
) -> Response {
    let db = s.lock();
    match db.apps.get(&app.to_uppercase()).and_then(|m| m.get(&id)) {
        Some(r) => render(&h, &json!({"instance": r.to_json("ADDED")})),
        None => (StatusCode::NOT_FOUND, "").into_response(),
    }
}

async fn get_instance_by_id(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    h: HeaderMap,
) -> Response {
    let db = s.lock();
    match db.find(&id) {
        Some(r) => render(&h, &json!({"instance": r.to_json("ADDED")})),
        None => (StatusCode::NOT_FOUND, "").into_response(),
    }
}

async fn by_vip(State(s): State<Arc<Shared>>, Path(vip): Path<String>, h: HeaderMap) -> Response {
    let v = applications(&s.lock(), |r| {
        r.body.get("vipAddress").and_then(Value::as_str) == Some(vip.as_str())
    });
    render(&h, &v)
}

async fn by_svip(State(s): State<Arc<Shared>>, Path(svip): Path<String>, h: HeaderMap) -> Response {
    let v = applications(&s.lock(), |r| {
        r.body.get("secureVipAddress").and_then(Value::as_str) == Some(svip.as_str())
    });
    render(&h, &v)
}

fn bad(msg: &str) -> Response {
    (StatusCode::BAD_REQUEST, msg.to_string()).into_response()
}

fn nonblank(o: &Map<String, Value>, k: &str) -> Option<String> {
    o.get(k)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// `"123"` or `123` (Eureka's codecs write numbers both ways).
fn num(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

async fn register(
    State(s): State<Arc<Shared>>,
    Path(app): Path<String>,
    h: HeaderMap,
    body: Bytes,
) -> Response {
    let ctype = h
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if ctype.contains("xml") || body.first() == Some(&b'<') {
        return (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "this Eureka double accepts JSON registrations only",
        )
            .into_response();
    }
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return bad(&format!("cannot decode the instance: {e}")),
    };
    let Some(inst) = v.get("instance").and_then(Value::as_object) else {
        return bad("expected {\"instance\": {...}}");
    };
    let host = nonblank(inst, "hostName");
    let Some(id) = nonblank(inst, "instanceId").or_else(|| host.clone()) else {
        return bad("Missing instanceId");
    };
    if host.is_none() {
        return bad("Missing hostname");
    }
    if nonblank(inst, "ipAddr").is_none() {
        return bad("Missing ip address");
    }
    let app_up = app.to_uppercase();
    match nonblank(inst, "app") {
        None => return bad("Missing appName"),
        Some(a) if a.to_uppercase() != app_up => {
            return bad(&format!(
                "Mismatched appName, expecting {app_up} but was {}",
                a.to_uppercase()
            ));
        }
        Some(_) => {}
    }
    match inst.get("dataCenterInfo").and_then(Value::as_object) {
        None => return bad("Missing dataCenterInfo"),
        Some(d) if nonblank(d, "name").is_none() => return bad("Missing dataCenterInfo Name"),
        Some(_) => {}
    }
    let lease_info = inst.get("leaseInfo").and_then(Value::as_object);
    let lease = lease_info
        .and_then(|l| num(l.get("durationInSecs")))
        .filter(|n| *n > 0)
        .unwrap_or(90);
    let renewal = lease_info
        .and_then(|l| num(l.get("renewalIntervalInSecs")))
        .filter(|n| *n > 0)
        .unwrap_or(30);
    let now = now_ms();
    let mut db = s.lock();
    let registration_ms = db
        .apps
        .get(&app_up)
        .and_then(|m| m.get(&id))
        .map(|r| r.registration_ms)
        .unwrap_or(now);
    let rec = Rec {
        app: app_up.clone(),
        id: id.clone(),
        body: inst.clone(),
        status: nonblank(inst, "status").unwrap_or_else(|| "UP".into()),
        overridden: nonblank(inst, "overriddenStatus")
            .or_else(|| nonblank(inst, "overriddenstatus"))
            .unwrap_or_else(|| "UNKNOWN".into()),
        lease: Duration::from_secs(lease),
        renewal_secs: renewal,
        last_renewal: Instant::now(),
        registration_ms,
        last_renewal_ms: now,
        up_ms: now,
        last_updated_ms: now,
        last_dirty_ms: num(inst.get("lastDirtyTimestamp"))
            .map(u128::from)
            .unwrap_or(now),
    };
    db.apps.entry(app_up).or_default().insert(id, rec.clone());
    db.record("ADDED", rec);
    StatusCode::NO_CONTENT.into_response()
}

async fn renew(
    State(s): State<Arc<Shared>>,
    Path((app, id)): Path<(String, String)>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    let mut db = s.lock();
    let Some(r) = db
        .apps
        .get_mut(&app.to_uppercase())
        .and_then(|m| m.get_mut(&id))
    else {
        return (StatusCode::NOT_FOUND, "").into_response();
    };
    let client_dirty = q
        .iter()
        .find(|(k, _)| k == "lastDirtyTimestamp")
        .and_then(|(_, v)| v.parse::<u128>().ok());
    if client_dirty.is_some_and(|d| d > r.last_dirty_ms) {
        // The client has data the server has not seen: make it register again.
        return (StatusCode::NOT_FOUND, "").into_response();
    }
    r.last_renewal = Instant::now();
    r.last_renewal_ms = now_ms();
    StatusCode::OK.into_response()
}

async fn cancel(State(s): State<Arc<Shared>>, Path((app, id)): Path<(String, String)>) -> Response {
    let mut db = s.lock();
    let app = app.to_uppercase();
    let Some(rec) = db.apps.get_mut(&app).and_then(|m| m.remove(&id)) else {
        return (StatusCode::NOT_FOUND, "").into_response();
    };
    if db.apps.get(&app).is_some_and(BTreeMap::is_empty) {
        db.apps.remove(&app);
    }
    db.record("DELETED", rec);
    StatusCode::OK.into_response()
}

fn modify(s: &Shared, app: &str, id: &str, f: impl FnOnce(&mut Rec)) -> Response {
    let mut db = s.lock();
    let Some(r) = db
        .apps
        .get_mut(&app.to_uppercase())
        .and_then(|m| m.get_mut(id))
    else {
        return (StatusCode::NOT_FOUND, "").into_response();
    };
    f(r);
    let now = now_ms();
    r.last_updated_ms = now;
    r.last_dirty_ms = now;
    let rec = r.clone();
    db.record("MODIFIED", rec);
    StatusCode::OK.into_response()
}

async fn set_status(
    State(s): State<Arc<Shared>>,
    Path((app, id)): Path<(String, String)>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    let Some(value) = q
        .iter()
        .find(|(k, _)| k == "value")
        .map(|(_, v)| v.to_uppercase())
    else {
        return bad("missing ?value=");
    };
    if !["UP", "DOWN", "STARTING", "OUT_OF_SERVICE", "UNKNOWN"].contains(&value.as_str()) {
        return bad(&format!("unknown status `{value}`"));
    }
    modify(&s, &app, &id, |r| {
        r.overridden = value.clone();
        r.status = value;
    })
}

async fn clear_status(
    State(s): State<Arc<Shared>>,
    Path((app, id)): Path<(String, String)>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    let value = q
        .iter()
        .find(|(k, _)| k == "value")
        .map(|(_, v)| v.to_uppercase())
        .unwrap_or_else(|| "UNKNOWN".into());
    modify(&s, &app, &id, |r| {
        r.overridden = "UNKNOWN".into();
        r.status = value;
    })
}

async fn set_metadata(
    State(s): State<Arc<Shared>>,
    Path((app, id)): Path<(String, String)>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    modify(&s, &app, &id, |r| {
        let md = r.body.entry("metadata").or_insert_with(|| json!({}));
        if !md.is_object() {
            *md = json!({});
        }
        if let Some(m) = md.as_object_mut() {
            for (k, v) in q {
                m.insert(k, json!(v));
            }
        }
    })
}
