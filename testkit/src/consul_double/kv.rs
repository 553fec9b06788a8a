//! The KV store: `GET`, `PUT` and `DELETE /v1/kv/:key`, with Consul's index rules (from
//! Consul's KV endpoint and state store, `agent/kvs_endpoint.go`, `agent/consul/kvs_endpoint.go`,
//! `agent/consul/state/kvs.go`, and the HTTP API docs of `/v1/kv`):
//!
//! - Every write (a PUT, a DELETE) takes the next Raft index; the KV table's index is
//!   the last of them, deletes included (Consul keeps tombstones for that).
//! - A read of an existing key answers with the key's `ModifyIndex`; a read of a
//!   missing key answers 404 with the KV table's index (at least 1) in
//!   `X-Consul-Index`, so that a client can block on a key that does not exist yet.
//! - A blocking read (`?index=N&wait=D`) returns once that index passes `N`.
//! - `?raw` answers the stored bytes as they are; otherwise a JSON array with one entry
//!   (`LockIndex`, `Key`, `Flags`, `Value` base64 or null, `CreateIndex`,
//!   `ModifyIndex`).
//! - `?cas=0` writes only a missing key, `?cas=N` only a key whose `ModifyIndex` is `N`;
//!   a refused write answers `false`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{Value, json};

use super::api::{json_response, text};
use super::blocking::BlockingQuery;
use super::state::{Db, Shared};
use crate::http_double::query_get;

pub(super) mod store;
use store::KvEntry;

/// Consul's limit on one value (`kv_max_value_size`, default 512 KiB).
const MAX_VALUE: usize = 512 * 1024;

/// Query parameters the double does not implement: a 400 naming them, never a
/// silently different answer.
fn unsupported(q: &[(String, String)], names: &[&str]) -> Option<Response> {
    names.iter().find(|n| query_get(q, n).is_some()).map(|n| {
        text(
            StatusCode::BAD_REQUEST,
            format!("consul double: ?{n} is not implemented for /v1/kv"),
        )
    })
}

/// `?cas=`: `None` when absent, the text of the 400 answer when it is not a number.
fn cas_of(q: &[(String, String)]) -> Result<Option<u64>, &'static str> {
    match query_get(q, "cas") {
        None => Ok(None),
        Some(c) => c.parse::<u64>().map(Some).map_err(|_| "Invalid CAS index"),
    }
}

/// True when a write with `cas` may change `key`.
fn cas_allows(db: &Db, key: &str, cas: Option<u64>) -> bool {
    match (cas, db.kv.entries.get(key)) {
        (None, _) => true,
        (Some(0), existing) => existing.is_none(),
        (Some(n), Some(e)) => e.modify_index == n,
        (Some(_), None) => false,
    }
}

/// A JSON `true` / `false`, as Consul answers a write.
fn bool_answer(b: bool) -> Response {
    json_response(None, &Value::Bool(b))
}

/// `GET /v1/kv/:key[?raw][&index=&wait=]`.
pub(super) async fn get(
    State(shared): State<Arc<Shared>>,
    Path(key): Path<String>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    if let Some(r) = unsupported(&q, &["recurse", "keys", "separator"]) {
        return r;
    }
    let blocking = match BlockingQuery::parse(&q) {
        Ok(b) => b,
        Err(msg) => return text(StatusCode::BAD_REQUEST, msg),
    };
    blocking
        .wait_until(&shared, |db| db.kv.index_of(&key))
        .await;
    let db = shared.lock();
    let index = db.kv.index_of(&key);
    let Some(e) = db.kv.entries.get(&key) else {
        let mut r = StatusCode::NOT_FOUND.into_response();
        r.headers_mut()
            .insert("x-consul-index", HeaderValue::from(index));
        return r;
    };
    if query_get(&q, "raw").is_some() {
        let mut r = (StatusCode::OK, e.value.clone()).into_response();
        let h = r.headers_mut();
        h.insert(
            "content-type",
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        h.insert("x-consul-index", HeaderValue::from(index));
        return r;
    }
    let value = if e.value.is_empty() {
        Value::Null
    } else {
        Value::String(base64::engine::general_purpose::STANDARD.encode(&e.value))
    };
    json_response(
        Some(index),
        &json!([{
            "LockIndex": 0,
            "Key": key,
            "Flags": e.flags,
            "Value": value,
            "CreateIndex": e.create_index,
            "ModifyIndex": e.modify_index,
        }]),
    )
}

/// `PUT /v1/kv/:key[?cas=][&flags=]`, the body being the value.
pub(super) async fn put(
    State(shared): State<Arc<Shared>>,
    Path(key): Path<String>,
    Query(q): Query<Vec<(String, String)>>,
    body: Bytes,
) -> Response {
    if let Some(r) = unsupported(&q, &["acquire", "release"]) {
        return r;
    }
    let cas = match cas_of(&q) {
        Ok(c) => c,
        Err(msg) => return text(StatusCode::BAD_REQUEST, msg),
    };
    let flags = match query_get(&q, "flags").map(str::parse::<u64>) {
        None => 0,
        Some(Ok(f)) => f,
        Some(Err(_)) => return text(StatusCode::BAD_REQUEST, "Invalid flags"),
    };
    if body.len() > MAX_VALUE {
        return text(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "Request body({} bytes) too large, max size: {MAX_VALUE} bytes. See https://developer.hashicorp.com/consul/docs/agent/config/config-files#kv_max_value_size.",
                body.len()
            ),
        );
    }
    let mut db = shared.lock();
    if !cas_allows(&db, &key, cas) {
        return bool_answer(false);
    }
    let index = shared.bump(&mut db, &[], false);
    let create_index = db.kv.entries.get(&key).map_or(index, |e| e.create_index);
    db.kv.entries.insert(
        key,
        KvEntry {
            value: body.to_vec(),
            flags,
            create_index,
            modify_index: index,
        },
    );
    db.kv.table_index = index;
    bool_answer(true)
}

/// `DELETE /v1/kv/:key[?cas=]`.
pub(super) async fn delete(
    State(shared): State<Arc<Shared>>,
    Path(key): Path<String>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    if let Some(r) = unsupported(&q, &["recurse"]) {
        return r;
    }
    let cas = match cas_of(&q) {
        Ok(c) => c,
        Err(msg) => return text(StatusCode::BAD_REQUEST, msg),
    };
    let mut db = shared.lock();
    if cas.is_some() && !cas_allows(&db, &key, cas) {
        return bool_answer(false);
    }
    if db.kv.entries.contains_key(&key) {
        let index = shared.bump(&mut db, &[], false);
        db.kv.entries.remove(&key);
        // The tombstone keeps the table's index moving, as in Consul.
        db.kv.table_index = index;
    }
    bool_answer(true)
}
