//! The namingserver double's HTTP endpoints, as Seata's namingserver serves them
//! (`namingserver/.../controller/NamingController.java`, `HealthController.java`).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Query, State as AxState};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::state::State;
use crate::http_double::{long_poll, query_get};

type Shared = AxState<Arc<State>>;
type Params = Query<Vec<(String, String)>>;

fn json_response(status: StatusCode, v: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

/// Spring's answer to a missing `@RequestParam`.
fn missing(name: &str) -> Response {
    json_response(
        StatusCode::BAD_REQUEST,
        json!({"status": 400, "error": "Bad Request",
               "message": format!("Required request parameter '{name}' is not present")}),
    )
}

/// `Result` (`common/.../result/Result.java`): `code` and `message`.
fn result(ok: bool, what: &str) -> Response {
    let (code, message) = if ok {
        ("200", format!("node has {what} successfully!"))
    } else {
        ("500", format!("node {what} unsuccessfully!"))
    };
    json_response(
        StatusCode::OK,
        json!({"code": code, "message": message, "success": ok}),
    )
}

/// The required query parameters `names`, or the name of the first missing one.
fn required<'a>(q: &'a [(String, String)], names: &[&str]) -> Result<Vec<&'a str>, String> {
    names
        .iter()
        .map(|n| query_get(q, n).ok_or_else(|| n.to_string()))
        .collect()
}

/// `POST /naming/v1/register?namespace=&clusterName=&unit=` with a JSON node.
pub(crate) async fn register(AxState(s): Shared, Query(q): Params, body: Bytes) -> Response {
    with_node(&q, &body, |p, node| {
        result(s.register(p[0], p[1], p[2], node), "registered")
    })
}

/// `POST /naming/v1/unregister?namespace=&clusterName=&unit=` with a JSON node.
pub(crate) async fn unregister(AxState(s): Shared, Query(q): Params, body: Bytes) -> Response {
    with_node(&q, &body, |p, node| {
        result(s.unregister(p[0], p[1], p[2], &node), "unregistered")
    })
}

/// Answers a register or unregister with `apply` of its `namespace`, `clusterName`
/// and `unit` and its JSON node; a request that lacks one gets Spring's answer (400 for
/// a body that is no JSON).
fn with_node(
    q: &[(String, String)],
    body: &[u8],
    apply: impl FnOnce(&[&str], Value) -> Response,
) -> Response {
    let p = match required(q, &["namespace", "clusterName", "unit"]) {
        Ok(p) => p,
        Err(n) => return missing(&n),
    };
    let Ok(node) = serde_json::from_slice::<Value>(body) else {
        return json_response(StatusCode::BAD_REQUEST, json!({"status": 400}));
    };
    apply(&p, node)
}

/// `GET /naming/v1/discovery?vGroup=&namespace=`.
pub(crate) async fn discovery(AxState(s): Shared, Query(q): Params) -> Response {
    match required(&q, &["vGroup", "namespace"]) {
        Ok(p) => json_response(StatusCode::OK, s.discovery(p[0], p[1])),
        Err(n) => missing(&n),
    }
}

/// `POST /naming/v1/watch?clientTerm=&vGroup=&timeout=`: registered as a watcher when
/// the client's term is not behind the vGroup's last change (or there was none), then
/// 200 on the vGroup's next change or 304 after `timeout` ms; 200 at once otherwise.
pub(crate) async fn watch(AxState(s): Shared, Query(q): Params) -> Response {
    let p = match required(&q, &["clientTerm", "vGroup", "timeout"]) {
        Ok(p) => p,
        Err(n) => return missing(&n),
    };
    let (Ok(term), Ok(timeout)) = (p[0].parse::<i64>(), p[2].parse::<u64>()) else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let vgroup = p[1].to_string();
    let changes = s.changes.subscribe();
    let (last, seen) = s.watch_point(&vgroup);
    if last.is_some_and(|t| term < t) {
        return StatusCode::OK.into_response();
    }
    long_poll(changes, Duration::from_millis(timeout), || {
        s.watch_point(&vgroup).1 > seen
    })
    .await
}

/// `POST /api/v1/auth/login` with `{"username","password"}` (the namingserver embeds
/// Seata's console).
pub(crate) async fn login(AxState(s): Shared, body: Bytes) -> Response {
    s.auth.login(&body)
}

/// `GET /naming/v1/health` (no login wanted).
pub(crate) async fn health() -> Response {
    json_response(
        StatusCode::OK,
        json!({"code": "200", "message": "success", "success": true}),
    )
}

/// Anything else: 404, as Spring.
pub(crate) async fn not_found() -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        json!({"status": 404, "error": "Not Found"}),
    )
}
