//! A protocol-faithful Eureka server double (in-process HTTP server).
//!
//! The Eureka server is only published on Maven, which cannot be reached from the build
//! machines ([docs/registry-wire.md §1](https://github.com/meshline/meshline/blob/main/docs/registry-wire.md#1-why-test-doubles)), so the Eureka backend is tested against this
//! double. It serves the REST API under both `/eureka/...` (Spring Cloud) and
//! `/eureka/v2/...` (Netflix) with the behaviours of [docs/registry-wire.md §3](https://github.com/meshline/meshline/blob/main/docs/registry-wire.md#3-eureka):
//!
//! - `POST /apps/{APP}` (JSON `{"instance":{...}}`) → **204**. The application name is
//!   upper-cased as Eureka does; the instance ID is `instanceId`, else `hostName`. The
//!   server's own checks give 400 (`Missing instanceId`, `Missing hostname`, `Missing ip
//!   address`, `Missing dataCenterInfo`, `Mismatched appName`).
//! - `PUT /apps/{APP}/{id}[?status=&lastDirtyTimestamp=]` (heartbeat) → 200, **404 when
//!   the instance is unknown** (the client must re-register) or when the client's
//!   `lastDirtyTimestamp` is newer than the server's.
//! - `DELETE /apps/{APP}/{id}` → 200, or 404 when unknown.
//! - `PUT|DELETE /apps/{APP}/{id}/status[?value=]`, `PUT /apps/{APP}/{id}/metadata?k=v`.
//! - `GET /apps`, `GET /apps/{APP}`, `GET /apps/{APP}/{id}`, `GET /instances/{id}`,
//!   `GET /vips/{vip}`, `GET /svips/{svip}`: JSON when `Accept` contains
//!   `application/json`, **XML otherwise** (as the real server). `ETag` / `If-None-Match`
//!   answer 304.
//! - `GET /apps/delta`: the instances changed within the retention window (default 3
//!   min), each with `actionType` `ADDED` / `MODIFIED` / `DELETED`, and `apps__hashcode`
//!   of the whole registry (`UP_2_DOWN_1_`-style, statuses sorted) so clients can check
//!   their merged copy; 403 when delta is disabled
//!   ([`EurekaDoubleOptions::delta_enabled`]).
//! - With [`EurekaDoubleOptions::basic_auth`], requests without those HTTP Basic
//!   credentials get 401 (a server behind Spring Security's basic auth).
//! - **Leases really expire**: an instance not renewed within its
//!   `leaseInfo.durationInSecs` (default 90) is evicted by a task running every
//!   [`EurekaDoubleOptions::eviction_interval`] (real server: 60 s), and the eviction
//!   shows in the delta as `DELETED`. (The real server's eviction check effectively
//!   waits twice the lease, a long-standing quirk; the double waits one lease.)
//!
//! Differences from the real server, on purpose: no read-only response cache (writes
//! are visible at once, the real server lags up to 30 s), no self-preservation, no
//! peer replication, JSON registrations only (an XML body is a 415).
//!
//! The double is split by concept: `state` holds the registry (instances, leases, the
//! recent-changes queue) and the evictor, `render` the JSON / XML answers, `reads` and
//! `writes` the endpoints.

mod reads;
mod render;
mod state;
mod writes;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, put};

use crate::http_double::{Built, HttpDouble};
use state::Shared;

/// Settings of a [`EurekaDouble`].
#[derive(Debug, Clone)]
pub struct EurekaDoubleOptions {
    /// Port to bind on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// How often expired leases are evicted (real server: 60 s).
    pub eviction_interval: Duration,
    /// How long changes stay in the delta (real server: 3 min).
    pub retention: Duration,
    /// Serve `GET /apps/delta` (otherwise 403, as with `disableDelta`).
    pub delta_enabled: bool,
    /// When set (`user`, `password`), every request must carry HTTP Basic credentials
    /// for it, as a Eureka server behind Spring Security's basic auth: otherwise 401
    /// with `WWW-Authenticate: Basic realm="Realm"`.
    pub basic_auth: Option<(String, String)>,
}

impl Default for EurekaDoubleOptions {
    fn default() -> Self {
        EurekaDoubleOptions {
            port: 0,
            eviction_interval: Duration::from_millis(500),
            retention: Duration::from_secs(180),
            delta_enabled: true,
            basic_auth: None,
        }
    }
}

/// A running Eureka server double. Dropping it stops the server; a restart comes back
/// with an empty registry (no persistence). Calls made to fail with `fail` get their
/// status and change nothing (e.g. `fail("DELETE", "/eureka/apps/", 500)`).
///
/// ```no_run
/// let eureka = meshline_testkit::EurekaDouble::start(Default::default()).unwrap();
/// println!("serviceUrl {}", eureka.service_url()); // http://127.0.0.1:<port>/eureka
/// ```
pub struct EurekaDouble {
    server: HttpDouble,
}

crate::http_double::http_double_face!(EurekaDouble, start: "eureka", EurekaDoubleOptions, build);

impl EurekaDouble {
    /// `http://host:port/eureka`, as Seata's `registry.eureka.serviceUrl` wants it.
    pub fn service_url(&self) -> String {
        format!("{}://{}/eureka", self.server.scheme(), self.addr())
    }
}

/// The router (the API under `/eureka` and `/eureka/v2`) on an empty registry, and
/// the evictor next to it.
fn build(opts: EurekaDoubleOptions) -> Built {
    let expected = opts.basic_auth.as_ref().map(|(user, pass)| {
        use base64::Engine;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
        format!("Basic {token}")
    });
    let shared = Arc::new(Shared::new(opts));
    let api = || {
        Router::new()
            .route("/apps", get(reads::all_apps))
            .route("/apps/", get(reads::all_apps))
            .route("/apps/delta", get(reads::delta))
            .route("/apps/{app}", get(reads::get_app).post(writes::register))
            .route(
                "/apps/{app}/{id}",
                get(reads::get_instance)
                    .put(writes::renew)
                    .delete(writes::cancel),
            )
            .route(
                "/apps/{app}/{id}/status",
                put(writes::set_status).delete(writes::clear_status),
            )
            .route("/apps/{app}/{id}/metadata", put(writes::set_metadata))
            .route("/instances/{id}", get(reads::get_instance_by_id))
            .route("/vips/{vip}", get(reads::by_vip))
            .route("/svips/{svip}", get(reads::by_svip))
    };
    let router = Router::new()
        .nest("/eureka", api())
        .nest("/eureka/v2", api())
        .fallback(|| async { (StatusCode::NOT_FOUND, "Not Found") })
        .layer(axum::middleware::from_fn_with_state(expected, basic_auth))
        .with_state(shared.clone());
    Built {
        router,
        background: Box::pin(state::evictor(shared)),
    }
}

/// With [`EurekaDoubleOptions::basic_auth`], refuses a request without those
/// credentials (401, Spring Security's answer).
async fn basic_auth(
    axum::extract::State(expected): axum::extract::State<Option<String>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let Some(expected) = expected else {
        return next.run(req).await;
    };
    let given = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if given == Some(expected.as_str()) {
        return next.run(req).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(
            axum::http::header::WWW_AUTHENTICATE,
            "Basic realm=\"Realm\"",
        )],
        "Unauthorized",
    )
        .into_response()
}
