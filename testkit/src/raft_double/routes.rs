//! The raft double's HTTP endpoints, as a Seata TC serves them
//! (`server/.../controller/ClusterController.java`, `server/.../cluster/manager/ClusterWatcherManager.java`,
//! `console/.../controller/AuthController.java`, `console/.../security/JwtAuthenticationEntryPoint.java`).

use std::sync::Arc;
use std::time::Duration;

use axum::Form;
use axum::body::Bytes;
use axum::extract::{Query, State as AxState};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::state::State;
use crate::http_double::query_get;

type Shared = AxState<Arc<State>>;

fn json_response(status: StatusCode, v: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

/// Spring Security's answer to a missing or bad token (`sendError(401)`).
fn unauthorized() -> Response {
    json_response(
        StatusCode::UNAUTHORIZED,
        json!({"status": 401, "error": "Unauthorized", "message": "Unauthorized"}),
    )
}

fn authorized(s: &State, headers: &HeaderMap) -> bool {
    let ok = s.opts.credentials.is_none()
        || s.token_ok(
            headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok()),
        );
    if !ok {
        *crate::http_double::lock(&s.refused) += 1;
    }
    ok
}

/// `POST /api/v1/auth/login` with `{"username","password"}`.
pub(crate) async fn login(AxState(s): Shared, body: Bytes) -> Response {
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let user = v.get("username").and_then(Value::as_str);
    let pass = v.get("password").and_then(Value::as_str);
    let ok = match &s.opts.credentials {
        Some((u, p)) => user == Some(u.as_str()) && pass == Some(p.as_str()),
        None => true,
    };
    if ok {
        let token = format!("Bearer {}", s.issue_token());
        let mut r = json_response(
            StatusCode::OK,
            json!({"code": "200", "message": "success", "data": token, "success": true}),
        );
        if let Ok(h) = token.parse() {
            r.headers_mut().insert(header::AUTHORIZATION, h);
        }
        r
    } else {
        json_response(
            StatusCode::OK,
            json!({"code": "401", "message": "Login failed", "data": null, "success": false}),
        )
    }
}

/// `GET /metadata/v1/cluster?group=`: a blank group is the TC's own
/// (`server.raft.group`, default `default`).
pub(crate) async fn cluster(
    AxState(s): Shared,
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    if !authorized(&s, &headers) {
        return unauthorized();
    }
    let group = query_get(&q, "group")
        .filter(|g| !g.trim().is_empty())
        .unwrap_or(&s.opts.default_group)
        .to_string();
    json_response(StatusCode::OK, s.metadata(&group))
}

/// `POST /metadata/v1/watch`, form `<group>=<term>...` and an optional `timeout`
/// (ms, default 28,000): 200 as soon as one group's term is past the client's (at once
/// when it already is), 304 when the hold runs out.
pub(crate) async fn watch(
    AxState(s): Shared,
    headers: HeaderMap,
    Query(q): Query<Vec<(String, String)>>,
    Form(form): Form<Vec<(String, String)>>,
) -> Response {
    if !authorized(&s, &headers) {
        return unauthorized();
    }
    let mut pairs = q;
    pairs.extend(form);
    let mut hold = s.hold();
    let mut wanted: Vec<(String, i64)> = Vec::new();
    for (k, v) in pairs {
        if k == "timeout" {
            match v.parse::<u64>() {
                Ok(ms) => hold = Duration::from_millis(ms),
                Err(_) => return StatusCode::BAD_REQUEST.into_response(),
            }
            continue;
        }
        // `Long.parseLong` of the term: a bad one is a server error in Seata.
        match v.parse::<i64>() {
            Ok(t) => wanted.push((k, t)),
            Err(_) => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        }
    }
    let moved = |s: &State| wanted.iter().any(|(g, t)| s.term(g) > *t);
    let mut changes = s.changes.subscribe();
    if moved(&s) {
        return StatusCode::OK.into_response();
    }
    let waited = tokio::time::timeout(hold, async {
        while changes.changed().await.is_ok() {
            if moved(&s) {
                return true;
            }
        }
        false
    })
    .await;
    match waited {
        Ok(true) => StatusCode::OK.into_response(),
        _ => StatusCode::NOT_MODIFIED.into_response(),
    }
}

/// Anything else: 404, as Spring.
pub(crate) async fn not_found() -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        json!({"status": 404, "error": "Not Found"}),
    )
}
