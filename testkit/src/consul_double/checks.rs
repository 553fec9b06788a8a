//! The check endpoints: `PUT /v1/agent/check/{pass,warn,fail}/:check_id[?note=]` and
//! `PUT /v1/agent/check/update/:check_id`, which set a TTL check's status and reset
//! its clock.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, put};

use super::api::text;
use super::decode::{object_body, str_field};
use super::state::{CheckKind, Shared, Status};
use crate::http_double::query_get;

/// `PUT /v1/agent/check/{pass,warn,fail}/:check_id[?note=]`, the verb being `status`.
pub(super) fn mark(status: Status) -> MethodRouter<Arc<Shared>> {
    put(
        move |State(s): State<Arc<Shared>>,
              Path(id): Path<String>,
              Query(q): Query<Vec<(String, String)>>| async move {
            set_ttl_status(&s, &id, status, query_get(&q, "note").unwrap_or(""))
        },
    )
}

/// `PUT /v1/agent/check/update/:check_id` with `{"Status","Output"}`.
pub(super) async fn update(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let obj = match object_body(&body) {
        Ok(obj) => obj,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    let obj = &obj;
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

/// Sets TTL check `id` to `status` with `output`, and restarts its TTL: 404 for an
/// unknown check, 500 for one without a TTL (Consul's texts).
fn set_ttl_status(shared: &Shared, id: &str, status: Status, output: &str) -> Response {
    let mut db = shared.lock();
    let Some(check) = db.checks.get(id) else {
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
    shared.record_result(&mut db, id, status, output.to_string(), |kind, now| {
        *kind = CheckKind::Ttl {
            ttl,
            deadline: now + ttl,
        }
    });
    (StatusCode::OK, "").into_response()
}
