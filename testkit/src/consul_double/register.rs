//! Service registration and deregistration: `PUT /v1/agent/service/register` (the
//! service and its TTL / TCP checks, validated as Consul does) and
//! `PUT /v1/agent/service/deregister/:id`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use super::api::text;
use super::decode::{duration_field, field, go_parse_bool, object_body, str_field};
use super::state::{Check, CheckKind, Shared, Status, Svc};
use crate::http_double::query_get;

/// A check of a registration, as given.
struct CheckDef {
    id: Option<String>,
    name: Option<String>,
    notes: String,
    status: Option<Status>,
    kind: CheckDefKind,
    deregister_after: Option<Duration>,
}

/// What a given check watches.
enum CheckDefKind {
    Ttl(Duration),
    Tcp {
        target: String,
        interval: Duration,
        timeout: Duration,
    },
}

/// Decodes one `Check` / `Checks` entry; only TTL and TCP checks are supported.
fn parse_check(v: &Value) -> Result<CheckDef, String> {
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

/// `PUT /v1/agent/service/register[?replace-existing-checks]`: 200 with an empty body.
pub(super) async fn register(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<Vec<(String, String)>>,
    body: Bytes,
) -> Response {
    let obj = match object_body(&body) {
        Ok(obj) => obj,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    match do_register(&shared, &obj, query_get(&q, "replace-existing-checks")) {
        Ok(()) => (StatusCode::OK, "").into_response(),
        Err(e) => text(StatusCode::BAD_REQUEST, e),
    }
}

/// A service registration, as given and validated.
struct Registration {
    name: String,
    id: String,
    tags: Vec<String>,
    address: String,
    port: i64,
    meta: Map<String, Value>,
    weights: (i64, i64),
    checks: Vec<CheckDef>,
    enable_tag_override: bool,
}

/// Decodes and validates the registration `obj` with Consul's error texts.
fn parse_registration(obj: &Map<String, Value>) -> Result<Registration, String> {
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
            .collect::<Result<Vec<_>, _>>()?,
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
    let mut checks = Vec::new();
    if let Some(c) = field(obj, "Check") {
        checks.push(parse_check(c)?);
    }
    match field(obj, "Checks") {
        None => {}
        Some(Value::Array(a)) => {
            for c in a {
                checks.push(parse_check(c)?);
            }
        }
        Some(_) => return Err("Checks must be an array".into()),
    }
    Ok(Registration {
        name,
        id,
        tags,
        address,
        port,
        meta,
        weights,
        checks,
        enable_tag_override: field(obj, "EnableTagOverride")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}

/// A check's ID: as given, or Consul's default (`service:<id>`, with `:<i>` counted
/// from 1 when the service has several checks).
fn check_id(given: Option<String>, id: &str, i: usize, n: usize) -> String {
    given.unwrap_or_else(|| {
        if n == 1 {
            format!("service:{id}")
        } else {
            format!("service:{id}:{}", i + 1)
        }
    })
}

/// The check `d`, with ID `cid`, of service `id` (named `name`) as it enters the
/// catalog at raft index `index`: a re-registered check keeps its status, output and
/// create index unless given anew.
fn catalog_check(
    d: CheckDef,
    cid: String,
    (id, name): (&str, &str),
    existing: Option<Check>,
    now: Instant,
    index: u64,
) -> Check {
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
    Check {
        name: d.name.unwrap_or_else(|| format!("Service '{name}' check")),
        id: cid,
        service_id: id.to_string(),
        status,
        output: existing
            .as_ref()
            .map(|c| c.output.clone())
            .unwrap_or_default(),
        notes: d.notes,
        kind,
        deregister_after: d.deregister_after,
        critical_since: (status == Status::Critical).then_some(now),
        create_index: existing.map(|c| c.create_index).unwrap_or(index),
        modify_index: index,
    }
}

/// Validates the registration `obj` and puts the service and its checks in the
/// catalog.
fn do_register(
    shared: &Shared,
    obj: &Map<String, Value>,
    replace: Option<&str>,
) -> Result<(), String> {
    let r = parse_registration(obj)?;
    let replace = match replace {
        None => false,
        Some("") => true,
        Some(s) => go_parse_bool(s).unwrap_or(false),
    };
    let mut db = shared.lock();
    let now = Instant::now();
    let id = r.id;
    let old_name = db.services.get(&id).map(|s| s.name.clone());
    let create_index = db
        .services
        .get(&id)
        .map(|s| s.create_index)
        .unwrap_or(db.index + 1);
    let n = r.checks.len();
    let mut new_checks = Vec::new();
    for (i, mut d) in r.checks.into_iter().enumerate() {
        let cid = check_id(d.id.take(), &id, i, n);
        let existing = db.checks.get(&cid).cloned();
        let index = db.index + 1;
        new_checks.push(catalog_check(d, cid, (&id, &r.name), existing, now, index));
    }
    let new_ids: Vec<String> = new_checks.iter().map(|c| c.id.clone()).collect();
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
            name: r.name.clone(),
            tags: r.tags,
            address: r.address,
            port: r.port,
            meta: r.meta,
            weights: r.weights,
            enable_tag_override: r.enable_tag_override,
            create_index,
            modify_index,
        },
    );
    let mut names = vec![r.name.as_str()];
    if let Some(o) = old_name.as_deref() {
        names.push(o);
    }
    shared.bump(&mut db, &names, true);
    Ok(())
}

/// `PUT /v1/agent/service/deregister/:id`: 200 with an empty body, or, for an ID the
/// agent does not hold (a restarted agent, for what it lost), 404 with Consul's text
/// (`vetServiceUpdateWithAuthorizer` in Consul's `agent/acl.go`, whose comment says
/// Consul's own anti-entropy relies on "Unknown service" being in it).
pub(super) async fn deregister(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
) -> Response {
    let mut db = shared.lock();
    let Some(svc) = db.services.remove(&id) else {
        return text(
            StatusCode::NOT_FOUND,
            format!(
                "Unknown service ID \"{id}\". Ensure that the service ID is passed, not the service name."
            ),
        );
    };
    db.checks.retain(|_, c| c.service_id != id);
    shared.bump(&mut db, &[&svc.name], true);
    (StatusCode::OK, "").into_response()
}
