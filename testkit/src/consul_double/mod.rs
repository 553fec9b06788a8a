//! A protocol-faithful Consul agent double (in-process HTTP server).
//!
//! No Consul server can be installed on the build machines (not in Debian 12, PyPI or
//! npm; see [docs/registry-wire.md §1](https://github.com/meshline/meshline/blob/main/docs/registry-wire.md#1-why-test-doubles)), so the Consul backend is tested against this
//! double, which implements the agent and health endpoints a service-discovery client
//! uses, with the behaviours that matter for correctness ([docs/registry-wire.md §2](https://github.com/meshline/meshline/blob/main/docs/registry-wire.md#2-consul)):
//!
//! - `PUT /v1/agent/service/register[?replace-existing-checks]` with `Check` / `Checks`
//!   (TTL and TCP checks), answering 200 with an empty body. A single check gets the ID
//!   `service:<ID>`, several get `service:<ID>:<n>`. TTL checks start critical unless
//!   `Status` is given; TCP checks start critical and are really run (at once, then
//!   every `Interval`) against the address.
//! - `PUT /v1/agent/check/{pass,warn,fail}/:check_id[?note=]` and
//!   `PUT /v1/agent/check/update/:check_id` (`{"Status","Output"}`) reset the TTL clock;
//!   an unknown check ID is a 404, a non-TTL check a 500 (Consul's texts).
//! - TTL checks **really expire**: past their TTL they turn critical ("TTL expired"),
//!   and a service whose check stays critical longer than its
//!   `DeregisterCriticalServiceAfter` is removed (the reaper runs every
//!   [`ConsulDoubleOptions::tick`]; real Consul treats anything under 1 min as 1 min and
//!   reaps every 30 s, which would make tests slow).
//! - `PUT /v1/agent/service/deregister/:id`; an unknown ID is a 404 "Unknown service ID
//!   ..." (Consul's text), as a restarted agent answers for what it lost.
//! - `GET /v1/health/service/:name[?passing][&tag=][&index=N&wait=10s][&dc=]`: the JSON
//!   shape of Consul's `[{Node, Service, Checks}]` (with the `serfHealth` node check),
//!   `passing` through Go's `ParseBool` (400 "Invalid value for ?passing"), every
//!   response with `X-Consul-Index`. **Blocking queries really block** until the
//!   service's index exceeds `N` or `wait` (default 5 min, max 10 min, plus up to
//!   wait/16 jitter) runs out, and wake on any change of that service (registration,
//!   deregistration, check status change). A check heart-beat that does not change the
//!   status does not bump the index, as in Consul.
//! - `GET /v1/agent/services`, `GET /v1/agent/checks`, `GET /v1/catalog/services`,
//!   `GET /v1/catalog/service/:name`, `GET /v1/status/leader`.
//! - The KV store (`kv`): `GET /v1/kv/:key[?raw][&index=N&wait=D]` (blocking as
//!   above, answering with the key's `ModifyIndex`, or the KV table's index when the
//!   key is missing: a 404 that still carries `X-Consul-Index`), `PUT /v1/kv/:key`
//!   (`?cas=`, `?flags=`; body = the raw value) and `DELETE /v1/kv/:key[?cas=]`,
//!   answering `true` / `false`. `recurse`, `keys`, `separator`, `acquire` and
//!   `release` are answered with 400 naming the limitation.
//! - ACLs: with [`ConsulDoubleOptions::acl_token`] set, requests must carry that token
//!   (`X-Consul-Token`, `Authorization: Bearer` or `?token=`): 403 otherwise.
//! - JSON keys of request bodies are matched case-insensitively (Go's decoder does that;
//!   Consul also accepts snake_case).
//!
//! Not implemented (answered with 400 naming the limitation, never silently ignored):
//! HTTP / script / gRPC / alias checks and `?filter=`. The Raft index starts at 1 on each
//! start: a restarted double loses all state and its indexes go *backwards*, which is
//! exactly what makes clients exercise the index-reset rule.
//!
//! The double is split by concept: `state` holds the catalog (services, checks,
//! indexes), `decode` and `api` the HTTP conventions (Go-style JSON decoding, ACLs,
//! responses), `register`, `checks` and `reads` the endpoints, `blocking` the
//! blocking-query wait and `ticker` the background work (TTL expiry, TCP checks, the
//! critical-service reaper).

mod api;
mod blocking;
mod checks;
mod decode;
mod kv;
mod reads;
mod register;
mod state;
mod ticker;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::middleware;
use axum::routing::{get, put};

use crate::http_double::{Built, HttpDouble};
use state::{Shared, Status};

/// Settings of a [`ConsulDouble`].
#[derive(Debug, Clone)]
pub struct ConsulDoubleOptions {
    /// Port to bind on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// How often TTL expiry, TCP checks and the critical-service reaper run.
    pub tick: Duration,
    /// When set, every request must carry this ACL token.
    pub acl_token: Option<String>,
    /// The agent's node name.
    pub node_name: String,
    /// The agent's datacenter.
    pub datacenter: String,
}

impl Default for ConsulDoubleOptions {
    fn default() -> Self {
        ConsulDoubleOptions {
            port: 0,
            tick: Duration::from_millis(100),
            acl_token: None,
            node_name: "meshline-consul-double".into(),
            datacenter: "dc1".into(),
        }
    }
}

/// A running Consul agent double. Dropping it stops the server; a restart comes back
/// with no services and every index back to 1, like an agent restarted without a data
/// dir. Calls made to fail with `fail` get their status and change nothing (e.g.
/// `fail("PUT", "/v1/agent/service/deregister/", 500)`).
///
/// ```no_run
/// let consul = meshline_testkit::ConsulDouble::start(Default::default()).unwrap();
/// println!("consul at {}", consul.url()); // http://127.0.0.1:<port>
/// ```
pub struct ConsulDouble {
    server: HttpDouble,
}

crate::http_double::http_double_face!(ConsulDouble, start: "consul", ConsulDoubleOptions, build);

impl ConsulDouble {
    /// `host:port`, as Seata's `registry.consul.serverAddr` wants it.
    pub fn server_addr(&self) -> String {
        self.addr().to_string()
    }

    /// `http://host:port` (`https://` when started with [`ConsulDouble::start_tls`]).
    pub fn url(&self) -> String {
        format!("{}://{}", self.server.scheme(), self.addr())
    }
}

/// The router on a fresh, empty catalog, and the ticker next to it.
fn build(opts: ConsulDoubleOptions) -> Built {
    let shared = Arc::new(Shared::new(opts));
    let router = Router::new()
        .route("/v1/agent/service/register", put(register::register))
        .route(
            "/v1/agent/service/deregister/{id}",
            put(register::deregister),
        )
        .route("/v1/agent/check/pass/{id}", checks::mark(Status::Passing))
        .route("/v1/agent/check/warn/{id}", checks::mark(Status::Warning))
        .route("/v1/agent/check/fail/{id}", checks::mark(Status::Critical))
        .route("/v1/agent/check/update/{id}", put(checks::update))
        .route("/v1/agent/services", get(reads::agent_services))
        .route("/v1/agent/checks", get(reads::agent_checks))
        .route("/v1/health/service/{name}", get(reads::health_service))
        .route("/v1/catalog/services", get(reads::catalog_services))
        .route("/v1/catalog/service/{name}", get(reads::catalog_service))
        .route("/v1/status/leader", get(reads::status_leader))
        .route(
            "/v1/kv/{*key}",
            get(kv::get).put(kv::put).delete(kv::delete),
        )
        .fallback(api::not_found)
        .layer(middleware::from_fn_with_state(shared.clone(), api::acl))
        .with_state(shared.clone());
    Built {
        router,
        background: Box::pin(ticker::ticker(shared)),
    }
}
