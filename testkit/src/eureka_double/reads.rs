//! The read endpoints: `GET /apps`, `/apps/delta`, `/apps/{APP}`, `/apps/{APP}/{id}`,
//! `/instances/{id}`, `/vips/{vip}` and `/svips/{svip}`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::render::{applications, applications_doc, render};
use super::state::{Rec, Shared};

/// `GET /apps`: every instance.
pub(super) async fn all_apps(State(s): State<Arc<Shared>>, h: HeaderMap) -> Response {
    let v = applications(&s.lock(), |_| true);
    render(&h, &v)
}

/// `GET /apps/delta`: the changes within the retention window; 403 when disabled.
pub(super) async fn delta(State(s): State<Arc<Shared>>, h: HeaderMap) -> Response {
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
    let v = applications_doc(&db, apps);
    render(&h, &v)
}

/// `GET /apps/{APP}`; 404 when it has no instance.
pub(super) async fn get_app(
    State(s): State<Arc<Shared>>,
    Path(app): Path<String>,
    h: HeaderMap,
) -> Response {
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

/// `GET /apps/{APP}/{id}`.
pub(super) async fn get_instance(
    State(s): State<Arc<Shared>>,
    Path((app, id)): Path<(String, String)>,
    h: HeaderMap,
) -> Response {
    let db = s.lock();
    instance(
        &h,
        db.apps.get(&app.to_uppercase()).and_then(|m| m.get(&id)),
    )
}

/// `GET /instances/{id}`.
pub(super) async fn get_instance_by_id(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    h: HeaderMap,
) -> Response {
    let db = s.lock();
    instance(&h, db.find(&id))
}

/// The `{"instance": ...}` answer, or 404.
fn instance(h: &HeaderMap, r: Option<&Rec>) -> Response {
    match r {
        Some(r) => render(h, &json!({"instance": r.to_json("ADDED")})),
        None => (StatusCode::NOT_FOUND, "").into_response(),
    }
}

/// `GET /vips/{vip}`: the instances of that `vipAddress`.
pub(super) async fn by_vip(
    State(s): State<Arc<Shared>>,
    Path(vip): Path<String>,
    h: HeaderMap,
) -> Response {
    with_field(&s, &h, "vipAddress", &vip)
}

/// `GET /svips/{svip}`: the instances of that `secureVipAddress`.
pub(super) async fn by_svip(
    State(s): State<Arc<Shared>>,
    Path(svip): Path<String>,
    h: HeaderMap,
) -> Response {
    with_field(&s, &h, "secureVipAddress", &svip)
}

/// The `applications` document of the instances registered with `field` = `value`.
fn with_field(s: &Shared, h: &HeaderMap, field: &str, value: &str) -> Response {
    let v = applications(&s.lock(), |r| {
        r.body.get(field).and_then(Value::as_str) == Some(value)
    });
    render(h, &v)
}
