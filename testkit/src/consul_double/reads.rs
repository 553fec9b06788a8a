//! The read endpoints and the JSON shapes they answer with: `GET /v1/health/service/:name`
//! (blocking), `/v1/agent/services`, `/v1/agent/checks`, `/v1/catalog/services`,
//! `/v1/catalog/service/:name` and `/v1/status/leader`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::ConsulDoubleOptions;
use super::api::{json_response, text};
use super::blocking::BlockingQuery;
use super::decode::go_parse_bool;
use super::state::{Check, CheckKind, Shared, Status, Svc};
use crate::http_double::{go_duration_string, query_get};

/// A check, as `/v1/agent/checks` and `/v1/health/service` show it.
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

/// The node's `serfHealth` check, always passing.
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

/// A service, as `/v1/health/service` shows it.
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

/// The agent's node.
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

/// `GET /v1/agent/services`.
pub(super) async fn agent_services(State(shared): State<Arc<Shared>>) -> Response {
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

/// `GET /v1/agent/checks`.
pub(super) async fn agent_checks(State(shared): State<Arc<Shared>>) -> Response {
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

/// `GET /v1/catalog/services`: every name with its tags.
pub(super) async fn catalog_services(State(shared): State<Arc<Shared>>) -> Response {
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

/// `GET /v1/catalog/service/:name`.
pub(super) async fn catalog_service(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
) -> Response {
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

/// `GET /v1/health/service/:name[?passing][&tag=][&index=N&wait=10s][&dc=]`.
pub(super) async fn health_service(
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
    let blocking = match BlockingQuery::parse(&q) {
        Ok(b) => b,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    blocking.wait(&shared, &name).await;
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

/// `GET /v1/status/leader`: this agent.
pub(super) async fn status_leader() -> Response {
    json_response(None, &json!("127.0.0.1:8300"))
}
