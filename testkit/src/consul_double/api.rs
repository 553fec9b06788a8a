//! The agent's HTTP conventions: its plain-text and JSON answers (with the
//! `X-Consul-*` headers), the ACL check every request goes through, and its 404.

use std::sync::Arc;

use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::state::Shared;
use crate::http_double::query_get;

/// A plain-text answer, as Consul gives its errors.
pub(super) fn text(status: StatusCode, body: impl Into<String>) -> Response {
    (status, body.into()).into_response()
}

/// A JSON answer with Consul's headers (`X-Consul-Index` when `index` is given).
pub(super) fn json_response(index: Option<u64>, v: &Value) -> Response {
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

/// The ACL check: with a token configured, every request but `/v1/status/*` must
/// carry it.
pub(super) async fn acl(
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

/// The token of `X-Consul-Token` or `Authorization: Bearer`.
fn token_of(h: &HeaderMap) -> Option<String> {
    if let Some(t) = h.get("x-consul-token").and_then(|v| v.to_str().ok()) {
        return Some(t.to_string());
    }
    h.get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string)
}

/// Go's mux answer to an unknown path.
pub(super) async fn not_found() -> Response {
    text(StatusCode::NOT_FOUND, "404 page not found\n")
}
