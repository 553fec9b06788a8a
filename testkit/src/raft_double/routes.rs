//! The raft double's HTTP endpoints, as a Seata TC serves them
//! (`server/.../controller/ClusterController.java`, `server/.../cluster/manager/ClusterWatcherManager.java`,
//! `console/.../controller/AuthController.java`, `console/.../security/JwtAuthenticationEntryPoint.java`).

use std::sync::Arc;
use std::time::Duration;

use axum::Form;
use axum::body::Bytes;
use axum::extract::{Query, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::state::State;
use crate::console_auth::json_response;
use crate::http_double::{long_poll, query_get};

type Shared = AxState<Arc<State>>;

/// `POST /api/v1/auth/login` with `{"username","password"}`.
pub(crate) async fn login(AxState(s): Shared, body: Bytes) -> Response {
    s.auth.login(&body)
}

/// `GET /metadata/v1/cluster?group=`: a blank group is the TC's own
/// (`server.raft.group`, default `default`).
pub(crate) async fn cluster(
    AxState(s): Shared,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
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
    Query(q): Query<Vec<(String, String)>>,
    Form(form): Form<Vec<(String, String)>>,
) -> Response {
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
    let changes = s.changes.subscribe();
    if moved(&s) {
        return StatusCode::OK.into_response();
    }
    long_poll(changes, hold, || moved(&s)).await
}

/// Anything else: 404, as Spring.
pub(crate) async fn not_found() -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        json!({"status": 404, "error": "Not Found"}),
    )
}
