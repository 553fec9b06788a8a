//! The write endpoints: register (`POST /apps/{APP}`, with the server's validation),
//! renew (the heartbeat), cancel, and the status override and metadata updates.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::state::{Rec, Shared, now_ms};
use crate::http_double::query_get;

/// A 400 with `msg`.
fn bad(msg: &str) -> Response {
    (StatusCode::BAD_REQUEST, msg.to_string()).into_response()
}

/// Field `k` of `o` when it is a non-blank string, trimmed.
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

/// `POST /apps/{APP}` with `{"instance": {...}}`: 204, or 400 with the server's text.
pub(super) async fn register(
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

/// `PUT /apps/{APP}/{id}[?lastDirtyTimestamp=]`, the heartbeat: 404 makes the client
/// register again.
pub(super) async fn renew(
    State(s): State<Arc<Shared>>,
    Path((app, id)): Path<(String, String)>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    let mut db = s.lock();
    let Some(r) = db.instance_mut(&app, &id) else {
        return (StatusCode::NOT_FOUND, "").into_response();
    };
    let client_dirty = query_get(&q, "lastDirtyTimestamp").and_then(|v| v.parse::<u128>().ok());
    if client_dirty.is_some_and(|d| d > r.last_dirty_ms) {
        // The client has data the server has not seen: make it register again.
        return (StatusCode::NOT_FOUND, "").into_response();
    }
    r.last_renewal = Instant::now();
    r.last_renewal_ms = now_ms();
    StatusCode::OK.into_response()
}

/// `DELETE /apps/{APP}/{id}`.
pub(super) async fn cancel(
    State(s): State<Arc<Shared>>,
    Path((app, id)): Path<(String, String)>,
) -> Response {
    let mut db = s.lock();
    let app = app.to_uppercase();
    if !db.remove(&app, &id) {
        return (StatusCode::NOT_FOUND, "").into_response();
    }
    StatusCode::OK.into_response()
}

/// Applies `f` to instance `id` of `app` and records the change as `MODIFIED`.
fn modify(s: &Shared, app: &str, id: &str, f: impl FnOnce(&mut Rec)) -> Response {
    let mut db = s.lock();
    let Some(r) = db.instance_mut(app, id) else {
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

/// `PUT /apps/{APP}/{id}/status?value=`: the status override.
pub(super) async fn set_status(
    State(s): State<Arc<Shared>>,
    Path((app, id)): Path<(String, String)>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    let Some(value) = query_get(&q, "value").map(str::to_uppercase) else {
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

/// `DELETE /apps/{APP}/{id}/status[?value=]`: drops the override.
pub(super) async fn clear_status(
    State(s): State<Arc<Shared>>,
    Path((app, id)): Path<(String, String)>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    let value = query_get(&q, "value")
        .map(str::to_uppercase)
        .unwrap_or_else(|| "UNKNOWN".into());
    modify(&s, &app, &id, |r| {
        r.overridden = "UNKNOWN".into();
        r.status = value;
    })
}

/// `PUT /apps/{APP}/{id}/metadata?k=v`: merges into the metadata.
pub(super) async fn set_metadata(
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
