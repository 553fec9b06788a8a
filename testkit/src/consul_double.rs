//! A protocol-faithful Consul agent double (in-process HTTP server).
//!
//! No Consul server can be installed on the build machines (not in Debian 12, PyPI or
//! npm; see [docs/registry-wire.md §1](https://github.com/meshline/meshline/blob/main/docs/registry-wire.md#1-why-test-doubles)), so the Consul backend is tested against this
//! double, which implements the agent and health endpoints a service-discovery client
//! uses, with the behaviours that matter for correctness ([docs/registry-wire.md §2](https://github.com/meshline/meshline/blob/main/docs/registry-wire.md#2-consul)):
//!
//! - `PUT /v1/agent/service/register[?replace-existing-checks]` with `Check` / `Checks`
//!   (TTL and TCP checks), answering 200 with an empty body. A single check gets the ID
//!   `service:<ID>`, several get `service:<ID>:<n>`. TTL checks start critical unless
//!   `Status` is given; TCP checks start critical and are really run (at once, then
//!   every `Interval`) against the address.
//! - `PUT /v1/agent/check/{pass,warn,fail}/:check_id[?note=]` and
//!   `PUT /v1/agent/check/update/:check_id` (`{"Status","Output"}`) reset the TTL clock;
//!   an unknown check ID is a 404, a non-TTL check a 500 (Consul's texts).
//! - TTL checks **really expire**: past their TTL they turn critical ("TTL expired"),
//!   and a service whose check stays critical longer than its
//!   `DeregisterCriticalServiceAfter` is removed (the reaper runs every
//!   [`ConsulDoubleOptions::tick`]; real Consul treats anything under 1 min as 1 min and
//!   reaps every 30 s, which would make tests slow).
//! - `PUT /v1/agent/service/deregister/:id` (unknown IDs are ignored: 200).
//! - `GET /v1/health/service/:name[?passing][&tag=][&index=N&wait=10s][&dc=]`: the JSON
//!   shape of Consul's `[{Node, Service, Checks}]` (with the `serfHealth` node check),
//!   `passing` through Go's `ParseBool` (400 "Invalid value for ?passing"), every
//!   response with `X-Consul-Index`. **Blocking queries really block** until the
//!   service's index exceeds `N` or `wait` (default 5 min, max 10 min, plus up to
//!   wait/16 jitter) runs out, and wake on any change of that service (registration,
//!   deregistration, check status change). A check heart-beat that does not change the
//!   status does not bump the index, as in Consul.
//! - `GET /v1/agent/services`, `GET /v1/agent/checks`, `GET /v1/catalog/services`,
//!   `GET /v1/catalog/service/:name`, `GET /v1/status/leader`.
//! - ACLs: with [`ConsulDoubleOptions::acl_token`] set, requests must carry that token
//!   (`X-Consul-Token`, `Authorization: Bearer` or `?token=`): 403 otherwise.
//! - JSON keys of request bodies are matched case-insensitively (Go's decoder does that;
//!   Consul also accepts snake_case).
//!
//! Not implemented (answered with 400 naming the limitation, never silently ignored):
//! HTTP / script / gRPC / alias checks and `?filter=`. The Raft index starts at 1 on each
//! start: a restarted double loses all state and its indexes go *backwards*, which is
//! exactly what makes clients exercise the index-reset rule.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use crate::Result;
use crate::http_double::{Built, HttpDouble, go_duration_string, parse_go_duration};

/// Settings of a [`ConsulDouble`].
#[derive(Debug, Clone)]
pub struct ConsulDoubleOptions {
    /// Port to bind on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// How often TTL expiry, TCP checks and the critical-service reaper run.
    pub tick: Duration,
    /// When set, every request must carry this ACL token.
    pub acl_token: Option<String>,
    /// The agent's node name.
    pub node_name: String,
    /// The agent's datacenter.
    pub datacenter: String,
}

impl Default for ConsulDoubleOptions {
    fn default() -> Self {
        ConsulDoubleOptions {
            port: 0,
            tick: Duration::from_millis(100),
            acl_token: None,
            node_name: "meshline-consul-double".into(),
            datacenter: "dc1".into(),
        }
    }
}

/// A running Consul agent double. Dropping it stops the server.
///
/// ```no_run
/// let consul = meshline_testkit::ConsulDouble::start(Default::default()).unwrap();
/// println!("consul at {}", consul.url()); // http://127.0.0.1:<port>
/// ```
pub struct ConsulDouble {
    opts: ConsulDoubleOptions,
    server: HttpDouble,
}

impl std::fmt::Debug for ConsulDouble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsulDouble")
            .field("addr", &self.server.addr())
            .field("running", &self.server.is_running())
            .finish()
    }
}

impl ConsulDouble {
    /// Starts the double on `127.0.0.1:<opts.port>`.
    pub fn start(opts: ConsulDoubleOptions) -> Result<Self> {
        let o = opts.clone();
        let server = HttpDouble::start("consul", opts.port, &move || build(o.clone()))?;
        Ok(ConsulDouble { opts, server })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// `host:port`, as Seata's `registry.consul.serverAddr` wants it.
    pub fn server_addr(&self) -> String {
        self.addr().to_string()
    }

    /// `http://host:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// Stops the agent: every connection (blocking queries too) is closed.
    pub fn stop(&mut self) {
        self.server.stop();
    }

    /// Starts it again on the same port, with **no** state (no services, index back
    /// to 1), like an agent restarted without a data dir.
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Passing,
    Warning,
    Critical,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Passing => "passing",
            Status::Warning => "warning",
            Status::Critical => "critical",
        }
    }
    fn parse(s: &str) -> Option<Status> {
        match s {
            "passing" => Some(Status::Passing),
            "warning" => Some(Status::Warning),
            "critical" => Some(Status::Critical),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
enum CheckKind {
    Ttl {
        ttl: Duration,
        deadline: Instant,
    },
    Tcp {
        target: String,
        interval: Duration,
        timeout: Duration,
        next_run: Instant,
        running: bool,
    },
}

#[derive(Debug, Clone)]
struct Check {
    id: String,
    name: String,
    service_id: String,
    status: Status,
    output: String,
    notes: String,
    kind: CheckKind,
    deregister_after: Option<Duration>,
    critical_since: Option<Instant>,
    create_index: u64,
    modify_index: u64,
}

#[derive(Debug, Clone)]
struct Svc {
    id: String,
    name: String,
    tags: Vec<String>,
    address: String,
    port: i64,
    meta: Map<String, Value>,
    weights: (i64, i64),
    enable_tag_override: bool,
    create_index: u64,
    modify_index: u64,
}

struct Db {
    index: u64,
    services_index: u64,
    /// Lower-cased service name -> index of its last change.
    name_index: HashMap<String, u64>,
    services: BTreeMap<String, Svc>,
    checks: BTreeMap<String, Check>,
}

struct Shared {
    opts: ConsulDoubleOptions,
    db: Mutex<Db>,
    changed: watch::Sender<u64>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Db> {
        self.db.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bumps the index for the given service names and wakes blocking queries.
    fn bump(&self, db: &mut Db, names: &[&str], services_table: bool) -> u64 {
        db.index += 1;
        let i = db.index;
        for n in names {
            db.name_index.insert(n.to_ascii_lowercase(), i);
        }
        if services_table {
            db.services_index = i;
        }
        self.changed.send_replace(i);
        i
    }
}

impl Db {
    fn index_of(&self, name: &str) -> u64 {
        self.name_index
            .get(&name.to_ascii_lowercase())
            .copied()
            .unwrap_or(self.services_index)
            .max(1)
    }

    fn service_name_of_check(&self, c: &Check) -> Option<String> {
        self.services.get(&c.service_id).map(|s| s.name.clone())
    }
}

fn build(opts: ConsulDoubleOptions) -> Built {
    let shared = Arc::new(Shared {
        opts,
        db: Mutex::new(Db {
            index: 1,
            services_index: 1,
            name_index: HashMap::new(),
            services: BTreeMap::new(),
            checks: BTreeMap::new(),
        }),
        changed: watch::Sender::new(1),
    });
    let router = Router::new()
        .route("/v1/agent/service/register", put(register))
        .route("/v1/agent/service/deregister/{id}", put(deregister))
        .route("/v1/agent/check/pass/{id}", put(check_pass))
        .route("/v1/agent/check/warn/{id}", put(check_warn))
        .route("/v1/agent/check/fail/{id}", put(check_fail))
        .route("/v1/agent/check/update/{id}", put(check_update))
        .route("/v1/agent/services", get(agent_services))
        .route("/v1/agent/checks", get(agent_checks))
        .route("/v1/health/service/{name}", get(health_service))
        .route("/v1/catalog/services", get(catalog_services))
        .route("/v1/catalog/service/{name}", get(catalog_service))
        .route("/v1/status/leader", get(status_leader))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(shared.clone(), acl))
        .with_state(shared.clone());
    Built {
        router,
        background: Box::pin(ticker(shared)),
    }
}

// ---------------------------------------------------------------- helpers

fn text(status: StatusCode, body: impl Into<String>) -> Response {
    (status, body.into()).into_response()
}

fn json_response(index: Option<u64>, v: &Value) -> Response {
    let mut r = (StatusCode::OK, v.to_string()).into_response();
    let h = r.headers_mut();
    h.insert("content-type", HeaderValue::from_static("application/json"));
    h.insert("x-consul-knownleader", HeaderValue::from_static("true"));
    h.insert("x-consul-lastcontact", HeaderValue::from_static("0"));
    if let Some(i) = index {
        h.insert("x-consul-index", HeaderValue::from(i));
    }
    r
}

fn norm_key(k: &str) -> String {
    k.chars()
        .filter(|c| *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Case-insensitive (and snake_case tolerant) field lookup, as Consul's decoder does.
fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    let want = norm_key(name);
    obj.iter()
        .find(|(k, _)| norm_key(k) == want)
        .map(|(_, v)| v)
        .filter(|v| !v.is_null())
}

fn str_field(obj: &Map<String, Value>, name: &str) -> std::result::Result<Option<String>, String> {
    match field(obj, name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("{name} must be a string, got {other}")),
    }
}

fn duration_field(
    obj: &Map<String, Value>,
    name: &str,
) -> std::result::Result<Option<Duration>, String> {
    match field(obj, name) {
        None => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => parse_go_duration(s)
            .map(Some)
            .ok_or_else(|| format!("{name}: invalid duration `{s}`")),
        // Go's API decoder also takes nanoseconds as a number.
        Some(Value::Number(n)) => n
            .as_u64()
            .map(|ns| Some(Duration::from_nanos(ns)))
            .ok_or_else(|| format!("{name}: invalid duration {n}")),
        Some(other) => Err(format!("{name}: invalid duration {other}")),
    }
}

fn query_get<'a>(q: &'a [(String, String)], key: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Go's `strconv.ParseBool`.
fn go_parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

async fn acl(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<Vec<(String, String)>>,
    req: Request,
    next: Next,
) -> Response {
    // As in Consul, the status endpoints need no token.
    if let Some(want) = shared
        .opts
        .acl_token
        .as_deref()
        .filter(|_| !req.uri().path().starts_with("/v1/status/"))
    {
        let given = token_of(req.headers()).or_else(|| query_get(&q, "token").map(str::to_string));
        match given.as_deref() {
            Some(t) if t == want => {}
            None | Some("") => return text(StatusCode::FORBIDDEN, "Permission denied"),
            Some(_) => return text(StatusCode::FORBIDDEN, "ACL not found"),
        }
    }
    next.run(req).await
}

fn token_of(h: &HeaderMap) -> Option<String> {
    if let Some(t) = h.get("x-consul-token").and_then(|v| v.to_str().ok()) {
        return Some(t.to_string());
    }
    h.get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string)
}

async fn not_found() -> Response {
    text(StatusCode::NOT_FOUND, "404 page not found\n")
}

async fn status_leader() -> Response {
    json_response(None, &json!("127.0.0.1:8300"))
}

// ---------------------------------------------------------------- register

struct CheckDef {
    id: Option<String>,
    name: Option<String>,
    notes: String,
    status: Option<Status>,
    kind: CheckDefKind,
    deregister_after: Option<Duration>,
}

enum CheckDefKind {
    Ttl(Duration),
    Tcp {
        target: String,
        interval: Duration,
        timeout: Duration,
    },
}

fn parse_check(v: &Value) -> std::result::Result<CheckDef, String> {
    let obj = v.as_object().ok_or("check must be an object")?;
    let status = match str_field(obj, "Status")? {
        None => None,
        Some(s) if s.is_empty() => None,
        Some(s) => Some(Status::parse(&s).ok_or_else(|| format!("Invalid check status: \"{s}\""))?),
    };
    let id = match str_field(obj, "CheckID")? {
        Some(s) if !s.is_empty() => Some(s),
        _ => str_field(obj, "ID")?.filter(|s| !s.is_empty()),
    };
    for unsupported in [
        "HTTP",
        "Script",
        "Args",
        "GRPC",
        "H2PING",
        "UDP",
        "AliasNode",
        "AliasService",
        "DockerContainerID",
    ] {
        if field(obj, unsupported).is_some() {
            return Err(format!(
                "this Consul double supports only TTL and TCP checks, not {unsupported}"
            ));
        }
    }
    let kind = if let Some(ttl) = duration_field(obj, "TTL")? {
        CheckDefKind::Ttl(ttl)
    } else if let Some(target) = str_field(obj, "TCP")? {
        let interval = duration_field(obj, "Interval")?
            .ok_or("Interval must be > 0 for Script, HTTP, H2PING, TCP or UDP checks")?;
        if interval.is_zero() {
            return Err("Interval must be > 0 for Script, HTTP, H2PING, TCP or UDP checks".into());
        }
        let timeout = duration_field(obj, "Timeout")?.unwrap_or(Duration::from_secs(10));
        CheckDefKind::Tcp {
            target,
            interval,
            timeout,
        }
    } else {
        return Err(
            "Invalid check: TTL must be > 0 for TTL checks, or TCP with an Interval must be given"
                .into(),
        );
    };
    Ok(CheckDef {
        id,
        name: str_field(obj, "Name")?,
        notes: str_field(obj, "Notes")?.unwrap_or_default(),
        status,
        kind,
        deregister_after: duration_field(obj, "DeregisterCriticalServiceAfter")?,
    })
}

async fn register(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<Vec<(String, String)>>,
    body: Bytes,
) -> Response {
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("Request decode failed: {e}"),
            );
        }
    };
    let Some(obj) = v.as_object() else {
        return text(
            StatusCode::BAD_REQUEST,
            "Request decode failed: not an object",
        );
    };
    match do_register(&shared, obj, query_get(&q, "replace-existing-checks")) {
        Ok(()) => (StatusCode::OK, "").into_response(),
        Err(e) => text(StatusCode::BAD_REQUEST, e),
    }
}

fn do_register(
    shared: &Shared,
    obj: &Map<String, Value>,
    replace: Option<&str>,
) -> std::result::Result<(), String> {
    let name = str_field(obj, "Name")?.unwrap_or_default();
    if name.is_empty() {
        return Err("Missing service name".into());
    }
    let id = str_field(obj, "ID")?
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| name.clone());
    let tags = match field(obj, "Tags") {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|t| t.as_str().map(str::to_string).ok_or("Tags must be strings"))
            .collect::<std::result::Result<Vec<_>, _>>()?,
        Some(_) => return Err("Tags must be an array of strings".into()),
    };
    let address = str_field(obj, "Address")?.unwrap_or_default();
    let port = match field(obj, "Port") {
        None => 0,
        Some(Value::Number(n)) => n.as_i64().ok_or("Port must be an integer")?,
        Some(_) => return Err("Port must be an integer".into()),
    };
    let meta = match field(obj, "Meta") {
        None => Map::new(),
        Some(Value::Object(m)) => {
            if m.values().any(|v| !v.is_string()) {
                return Err("Meta values must be strings".into());
            }
            m.clone()
        }
        Some(_) => return Err("Meta must be an object of strings".into()),
    };
    let weights = match field(obj, "Weights").and_then(Value::as_object) {
        None => (1, 1),
        Some(w) => {
            let p = field(w, "Passing").and_then(Value::as_i64).unwrap_or(1);
            let wa = field(w, "Warning").and_then(Value::as_i64).unwrap_or(1);
            if p < 1 {
                return Err("Passing must be greater than 0".into());
            }
            (p, wa)
        }
    };
    let mut defs = Vec::new();
    if let Some(c) = field(obj, "Check") {
        defs.push(parse_check(c)?);
    }
    match field(obj, "Checks") {
        None => {}
        Some(Value::Array(a)) => {
            for c in a {
                defs.push(parse_check(c)?);
            }
        }
        Some(_) => return Err("Checks must be an array".into()),
    }
    let replace = match replace {
        None => false,
        Some("") => true,
        Some(s) => go_parse_bool(s).unwrap_or(false),
    };

    let mut db = shared.lock();
    let now = Instant::now();
    let old_name = db.services.get(&id).map(|s| s.name.clone());
    let create_index = db
        .services
        .get(&id)
        .map(|s| s.create_index)
        .unwrap_or(db.index + 1);
    let n_defs = defs.len();
    let mut new_ids = Vec::new();
    let mut new_checks = Vec::new();
    for (i, d) in defs.into_iter().enumerate() {
        let cid = d.id.unwrap_or_else(|| {
            if n_defs == 1 {
                format!("service:{id}")
            } else {
                format!("service:{id}:{}", i + 1)
            }
        });
        let existing = db.checks.get(&cid).cloned();
        let status = d
            .status
            .or(existing.as_ref().map(|c| c.status))
            .unwrap_or(Status::Critical);
        let kind = match d.kind {
            CheckDefKind::Ttl(ttl) => CheckKind::Ttl {
                ttl,
                deadline: now + ttl,
            },
            CheckDefKind::Tcp {
                target,
                interval,
                timeout,
            } => CheckKind::Tcp {
                target,
                interval,
                timeout,
                next_run: now,
                running: false,
            },
        };
        new_ids.push(cid.clone());
        new_checks.push(Check {
            name: d.name.unwrap_or_else(|| format!("Service '{name}' check")),
            id: cid,
            service_id: id.clone(),
            status,
            output: existing
                .as_ref()
                .map(|c| c.output.clone())
                .unwrap_or_default(),
            notes: d.notes,
            kind,
            deregister_after: d.deregister_after,
            critical_since: (status == Status::Critical).then_some(now),
            create_index: existing.map(|c| c.create_index).unwrap_or(db.index + 1),
            modify_index: db.index + 1,
        });
    }
    if replace {
        db.checks
            .retain(|cid, c| c.service_id != id || new_ids.contains(cid));
    }
    for c in new_checks {
        db.checks.insert(c.id.clone(), c);
    }
    let modify_index = db.index + 1;
    db.services.insert(
        id.clone(),
        Svc {
            id: id.clone(),
            name: name.clone(),
            tags,
            address,
            port,
            meta,
            weights,
            enable_tag_override: field(obj, "EnableTagOverride")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            create_index,
            modify_index,
        },
    );
    let mut names = vec![name.as_str()];
    if let Some(o) = old_name.as_deref() {
        names.push(o);
    }
    shared.bump(&mut db, &names, true);
    Ok(())
}

async fn deregister(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    let mut db = shared.lock();
    if let Some(svc) = db.services.remove(&id) {
        db.checks.retain(|_, c| c.service_id != id);
        shared.bump(&mut db, &[&svc.name], true);
    }
    (StatusCode::OK, "").into_response()
}

// ---------------------------------------------------------------- checks

async fn check_pass(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    set_ttl_status(
        &s,
        &id,
        Status::Passing,
        query_get(&q, "note").unwrap_or(""),
    )
}

async fn check_warn(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    set_ttl_status(
        &s,
        &id,
        Status::Warning,
        query_get(&q, "note").unwrap_or(""),
    )
}

async fn check_fail(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    set_ttl_status(
        &s,
        &id,
        Status::Critical,
        query_get(&q, "note").unwrap_or(""),
    )
}

async fn check_update(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("Request decode failed: {e}"),
            );
        }
    };
    let Some(obj) = v.as_object() else {
        return text(
            StatusCode::BAD_REQUEST,
            "Request decode failed: not an object",
        );
    };
    let status = match str_field(obj, "Status") {
        Ok(Some(st)) => match Status::parse(&st) {
            Some(st) => st,
            None => {
                return text(
                    StatusCode::BAD_REQUEST,
                    format!("Invalid check status: '{st}'"),
                );
            }
        },
        Ok(None) => return text(StatusCode::BAD_REQUEST, "Invalid check status: ''"),
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    let output = str_field(obj, "Output").ok().flatten().unwrap_or_default();
    set_ttl_status(&s, &id, status, &output)
}

fn set_ttl_status(shared: &Shared, id: &str, status: Status, output: &str) -> Response {
    let mut db = shared.lock();
    let Some(check) = db.checks.get(id).cloned() else {
        return text(
            StatusCode::NOT_FOUND,
            format!(
                "Unknown check ID \"{id}\". Ensure that the check ID is passed, not the check name."
            ),
        );
    };
    let CheckKind::Ttl { ttl, .. } = check.kind else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("CheckID \"{id}\" does not have associated TTL"),
        );
    };
    let name = db.service_name_of_check(&check);
    let changed = check.status != status;
    let next_index = db.index + 1;
    let now = Instant::now();
    if let Some(c) = db.checks.get_mut(id) {
        c.kind = CheckKind::Ttl {
            ttl,
            deadline: now + ttl,
        };
        c.output = output.to_string();
        if changed {
            c.status = status;
            c.modify_index = next_index;
            c.critical_since = (status == Status::Critical).then_some(now);
        }
    }
    if changed {
        let names: Vec<&str> = name.as_deref().into_iter().collect();
        shared.bump(&mut db, &names, false);
    }
    (StatusCode::OK, "").into_response()
}

/// TTL expiry, TCP checks and the critical-service reaper.
async fn ticker(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(shared.opts.tick.max(Duration::from_millis(5)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Instant::now();
        let mut tcp_runs = Vec::new();
        {
            let mut db = shared.lock();
            let mut changed_names = Vec::new();
            let next_index = db.index + 1;
            let ids: Vec<String> = db.checks.keys().cloned().collect();
            for id in ids {
                let Some(c) = db.checks.get(&id).cloned() else {
                    continue;
                };
                match c.kind {
                    CheckKind::Ttl { ttl, deadline } => {
                        if now >= deadline && c.status != Status::Critical {
                            if let Some(n) = db.service_name_of_check(&c) {
                                changed_names.push(n);
                            }
                            if let Some(m) = db.checks.get_mut(&id) {
                                m.status = Status::Critical;
                                m.output =
                                    format!("TTL expired (last heart-beat over {ttl:?} ago)");
                                m.modify_index = next_index;
                                m.critical_since = Some(now);
                            }
                        }
                    }
                    CheckKind::Tcp {
                        ref target,
                        timeout,
                        next_run,
                        running,
                        ..
                    } => {
                        if now >= next_run && !running {
                            tcp_runs.push((id.clone(), target.clone(), timeout));
                            if let Some(m) = db.checks.get_mut(&id)
                                && let CheckKind::Tcp { running, .. } = &mut m.kind
                            {
                                *running = true;
                            }
                        }
                    }
                }
            }
            // The reaper: services critical for longer than DeregisterCriticalServiceAfter.
            let doomed: Vec<String> = db
                .checks
                .values()
                .filter(|c| {
                    c.status == Status::Critical
                        && matches!((c.deregister_after, c.critical_since), (Some(after), Some(since)) if now.duration_since(since) >= after)
                })
                .map(|c| c.service_id.clone())
                .collect();
            let mut table_changed = false;
            for sid in doomed {
                if let Some(svc) = db.services.remove(&sid) {
                    db.checks.retain(|_, c| c.service_id != sid);
                    changed_names.push(svc.name);
                    table_changed = true;
                }
            }
            if !changed_names.is_empty() {
                let names: Vec<&str> = changed_names.iter().map(String::as_str).collect();
                shared.bump(&mut db, &names, table_changed);
            }
        }
        for (id, target, timeout) in tcp_runs {
            let shared = shared.clone();
            tokio::spawn(async move {
                let result =
                    tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&target)).await;
                let (status, output) = match result {
                    Ok(Ok(_)) => (Status::Passing, format!("TCP connect {target}: Success")),
                    Ok(Err(e)) => (Status::Critical, format!("dial tcp {target}: {e}")),
                    Err(_) => (Status::Critical, format!("dial tcp {target}: i/o timeout")),
                };
                let mut db = shared.lock();
                let Some(c) = db.checks.get(&id).cloned() else {
                    return;
                };
                let name = db.service_name_of_check(&c);
                let changed = c.status != status;
                let next_index = db.index + 1;
                let now = Instant::now();
                if let Some(m) = db.checks.get_mut(&id) {
                    if let CheckKind::Tcp {
                        interval,
                        next_run,
                        running,
                        ..
                    } = &mut m.kind
                    {
                        *next_run = now + *interval;
                        *running = false;
                    }
                    m.output = output;
                    if changed {
                        m.status = status;
                        m.modify_index = next_index;
                        m.critical_since = (status == Status::Critical).then_some(now);
                    }
                }
                if changed {
                    let names: Vec<&str> = name.as_deref().into_iter().collect();
                    shared.bump(&mut db, &names, false);
                }
            });
        }
    }
}

// ---------------------------------------------------------------- reads

fn check_json(node: &str, c: &Check, svc: Option<&Svc>) -> Value {
    let (ty, definition) = match &c.kind {
        CheckKind::Ttl { ttl, .. } => ("ttl", json!({"TTL": go_duration_string(*ttl)})),
        CheckKind::Tcp {
            target,
            interval,
            timeout,
            ..
        } => (
            "tcp",
            json!({"TCP": target, "Interval": go_duration_string(*interval), "Timeout": go_duration_string(*timeout)}),
        ),
    };
    json!({
        "Node": node,
        "CheckID": c.id,
        "Name": c.name,
        "Status": c.status.as_str(),
        "Notes": c.notes,
        "Output": c.output,
        "ServiceID": c.service_id,
        "ServiceName": svc.map(|s| s.name.clone()).unwrap_or_default(),
        "ServiceTags": svc.map(|s| s.tags.clone()).unwrap_or_default(),
        "Type": ty,
        "Definition": definition,
        "CreateIndex": c.create_index,
        "ModifyIndex": c.modify_index,
    })
}

fn serf_check(node: &str) -> Value {
    json!({
        "Node": node,
        "CheckID": "serfHealth",
        "Name": "Serf Health Status",
        "Status": "passing",
        "Notes": "",
        "Output": "Agent alive and reachable",
        "ServiceID": "",
        "ServiceName": "",
        "ServiceTags": [],
        "Type": "",
        "Definition": {},
        "CreateIndex": 1,
        "ModifyIndex": 1,
    })
}

fn service_json(s: &Svc) -> Value {
    json!({
        "ID": s.id,
        "Service": s.name,
        "Tags": s.tags,
        "Address": s.address,
        "TaggedAddresses": {},
        "Meta": s.meta,
        "Port": s.port,
        "Weights": {"Passing": s.weights.0, "Warning": s.weights.1},
        "EnableTagOverride": s.enable_tag_override,
        "Proxy": {"Mode": "", "MeshGateway": {}, "Expose": {}},
        "Connect": {},
        "PeerName": "",
        "CreateIndex": s.create_index,
        "ModifyIndex": s.modify_index,
    })
}

fn node_json(o: &ConsulDoubleOptions) -> Value {
    json!({
        "ID": "6f2f4c6e-9d1b-4c35-8a3e-6d2c1f0e7a11",
        "Node": o.node_name,
        "Address": "127.0.0.1",
        "Datacenter": o.datacenter,
        "TaggedAddresses": {"lan": "127.0.0.1", "lan_ipv4": "127.0.0.1", "wan": "127.0.0.1", "wan_ipv4": "127.0.0.1"},
        "Meta": {"consul-network-segment": ""},
        "CreateIndex": 1,
        "ModifyIndex": 1,
    })
}

async fn agent_services(State(shared): State<Arc<Shared>>) -> Response {
    let db = shared.lock();
    let mut m = Map::new();
    for s in db.services.values() {
        let mut v = service_json(s);
        if let Some(o) = v.as_object_mut() {
            o.insert("Datacenter".into(), json!(shared.opts.datacenter));
            o.remove("CreateIndex");
            o.remove("ModifyIndex");
        }
        m.insert(s.id.clone(), v);
    }
    json_response(None, &Value::Object(m))
}

async fn agent_checks(State(shared): State<Arc<Shared>>) -> Response {
    let db = shared.lock();
    let mut m = Map::new();
    for c in db.checks.values() {
        m.insert(
            c.id.clone(),
            check_json(&shared.opts.node_name, c, db.services.get(&c.service_id)),
        );
    }
    json_response(None, &Value::Object(m))
}

async fn catalog_services(State(shared): State<Arc<Shared>>) -> Response {
    let db = shared.lock();
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    m.insert("consul".into(), Vec::new());
    for s in db.services.values() {
        let tags = m.entry(s.name.clone()).or_default();
        for t in &s.tags {
            if !tags.contains(t) {
                tags.push(t.clone());
            }
        }
    }
    json_response(Some(db.services_index.max(1)), &json!(m))
}

async fn catalog_service(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> Response {
    let db = shared.lock();
    let o = &shared.opts;
    let list: Vec<Value> = db
        .services
        .values()
        .filter(|s| s.name.eq_ignore_ascii_case(&name))
        .map(|s| {
            json!({
                "ID": "6f2f4c6e-9d1b-4c35-8a3e-6d2c1f0e7a11",
                "Node": o.node_name,
                "Address": "127.0.0.1",
                "Datacenter": o.datacenter,
                "TaggedAddresses": {"lan": "127.0.0.1", "wan": "127.0.0.1"},
                "NodeMeta": {},
                "ServiceID": s.id,
                "ServiceName": s.name,
                "ServiceTags": s.tags,
                "ServiceAddress": s.address,
                "ServiceMeta": s.meta,
                "ServicePort": s.port,
                "ServiceWeights": {"Passing": s.weights.0, "Warning": s.weights.1},
                "ServiceEnableTagOverride": s.enable_tag_override,
                "CreateIndex": s.create_index,
                "ModifyIndex": s.modify_index,
            })
        })
        .collect();
    json_response(Some(db.index_of(&name)), &Value::Array(list))
}

async fn health_service(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    let passing = match query_get(&q, "passing") {
        None => false,
        Some("") => true,
        Some(v) => match go_parse_bool(v) {
            Some(b) => b,
            None => return text(StatusCode::BAD_REQUEST, "Invalid value for ?passing"),
        },
    };
    if query_get(&q, "filter").is_some_and(|f| !f.is_empty()) {
        return text(
            StatusCode::BAD_REQUEST,
            "?filter= is not implemented by this Consul double",
        );
    }
    if let Some(dc) = query_get(&q, "dc")
        && !dc.is_empty()
        && dc != shared.opts.datacenter
    {
        return text(StatusCode::INTERNAL_SERVER_ERROR, "No path to datacenter");
    }
    let tags: Vec<&str> = q
        .iter()
        .filter(|(k, _)| k == "tag")
        .map(|(_, v)| v.as_str())
        .collect();
    let min_index = match query_get(&q, "index") {
        None => None,
        Some(i) => match i.parse::<u64>() {
            Ok(i) => Some(i),
            Err(_) => return text(StatusCode::BAD_REQUEST, "Invalid index"),
        },
    };
    let wait = match query_get(&q, "wait") {
        None => Duration::from_secs(300),
        Some(w) => match parse_go_duration(w) {
            Some(w) => w.min(Duration::from_secs(600)),
            None => return text(StatusCode::BAD_REQUEST, "Invalid wait time"),
        },
    };
    // Blocking query: wait until the service's index passes `index`, or the wait ends.
    if let Some(n) = min_index.filter(|n| *n > 0) {
        let jitter = if wait.as_millis() >= 16 {
            Duration::from_millis(fastrand::u64(0..=(wait.as_millis() as u64 / 16)))
        } else {
            Duration::ZERO
        };
        let deadline = tokio::time::Instant::now() + wait + jitter;
        let mut rx = shared.changed.subscribe();
        loop {
            if shared.lock().index_of(&name) > n {
                break;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                _ => break,
            }
        }
    }
    let db = shared.lock();
    let node = node_json(&shared.opts);
    let node_name = shared.opts.node_name.as_str();
    let mut out = Vec::new();
    for s in db.services.values() {
        if !s.name.eq_ignore_ascii_case(&name) {
            continue;
        }
        if !tags.iter().all(|t| s.tags.iter().any(|st| st == t)) {
            continue;
        }
        let checks: Vec<&Check> = db
            .checks
            .values()
            .filter(|c| c.service_id == s.id)
            .collect();
        if passing && checks.iter().any(|c| c.status != Status::Passing) {
            continue;
        }
        let mut cj = vec![serf_check(node_name)];
        cj.extend(checks.iter().map(|c| check_json(node_name, c, Some(s))));
        out.push(json!({"Node": node, "Service": service_json(s), "Checks": cj}));
    }
    json_response(Some(db.index_of(&name)), &Value::Array(out))
}
