//! A Seata namingserver double (in-process HTTP server).
//!
//! No Seata namingserver (Java) runs on the build machines, so the `seata` registry
//! backend is tested against this double, written from Seata's sources
//! (2.3.0-SNAPSHOT, `0b9d7c9a`):
//! `namingserver/src/main/java/org/apache/seata/namingserver/controller/NamingController.java`,
//! `namingserver/src/main/java/org/apache/seata/namingserver/controller/HealthController.java`,
//! `namingserver/src/main/java/org/apache/seata/namingserver/manager/NamingManager.java`,
//! `namingserver/src/main/java/org/apache/seata/namingserver/manager/ClusterWatcherManager.java`,
//! `namingserver/src/main/java/org/apache/seata/namingserver/entity/pojo/ClusterData.java`,
//! `namingserver/src/main/java/org/apache/seata/namingserver/entity/bo/{NamespaceBO,ClusterBO}.java`,
//! `common/src/main/java/org/apache/seata/common/metadata/namingserver/{NamingServerNode,Unit,MetaResponse}.java`
//! and `common/src/main/java/org/apache/seata/common/metadata/{Node,Cluster}.java`.
//!
//! - `POST /naming/v1/register?namespace=&clusterName=&unit=` (JSON node): adds the
//!   node to the unit (replacing it when its `term` is newer), maps every
//!   `metadata.vGroup` entry (`vGroup -> unit`, blank = the request's unit) to the
//!   cluster (a vGroup maps to one cluster per namespace), records the heartbeat, and
//!   announces a change (the node's `term`) when anything is new.
//! - `POST /naming/v1/unregister?...` removes it and announces the change.
//! - `GET /naming/v1/discovery?vGroup=&namespace=` answers `MetaResponse`.
//! - `POST /naming/v1/watch?clientTerm=&vGroup=&timeout=`: see [`routes`].
//! - `GET /naming/v1/health`.
//! - `POST /api/v1/auth/login` (Seata 2.4+'s console login, see `console_auth`): with
//!   [`NamingserverDoubleOptions::credentials`] set, every endpoint but the health check
//!   wants the token it issues (HTTP 401 otherwise).
//! - Eviction: every [`NamingserverDoubleOptions::check_period`] (Seata: 60 s), nodes
//!   not heard from within [`NamingserverDoubleOptions::heartbeat_threshold`] (Seata:
//!   90 s) are removed and their vGroups announced with term -1.
//! - Missing required parameters are HTTP 400; namingserver failures are HTTP 200 with
//!   `code` "500", as Seata.
//!
//! [`NamingserverDouble::restart`] drops all state (Seata's namingserver keeps nothing
//! on disk) and serves again on the same port.

mod routes;
mod state;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};
use serde_json::Value;

use crate::Result;
use crate::console_auth::{ConsoleAuth, guard};
use crate::http_double::{Built, HttpDouble, lock};
use state::State;

/// Settings of a [`NamingserverDouble`].
#[derive(Debug, Clone)]
pub struct NamingserverDoubleOptions {
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// Nodes not heard from for longer than this are evicted (Seata: 90 s).
    pub heartbeat_threshold: Duration,
    /// How often eviction runs (Seata: 60 s).
    pub check_period: Duration,
    /// Console user and password (Seata 2.4+); `None`: no login wanted. With them,
    /// every endpoint but the health check wants a token.
    pub credentials: Option<(String, String)>,
    /// Lifetime of an issued token (Seata's namingserver: 30 min).
    pub token_validity: Duration,
}

impl Default for NamingserverDoubleOptions {
    fn default() -> Self {
        NamingserverDoubleOptions {
            port: 0,
            heartbeat_threshold: Duration::from_secs(90),
            check_period: Duration::from_secs(60),
            credentials: None,
            token_validity: Duration::from_millis(1_800_000),
        }
    }
}

/// A running namingserver double. Dropping it stops the server.
pub struct NamingserverDouble {
    server: HttpDouble,
    state: Arc<Mutex<Arc<State>>>,
    auth: Arc<ConsoleAuth>,
}

crate::http_double::http_double_face!(NamingserverDouble);

impl NamingserverDouble {
    /// Starts the double on `127.0.0.1:<opts.port>`.
    pub fn start(opts: NamingserverDoubleOptions) -> Result<Self> {
        let auth = Arc::new(ConsoleAuth::new(
            opts.credentials.clone(),
            opts.token_validity,
        ));
        let slot = Arc::new(Mutex::new(Arc::new(State::new(auth.clone()))));
        let (s, a) = (slot.clone(), auth.clone());
        let server = HttpDouble::start("namingserver", opts.port, move || {
            let fresh = Arc::new(State::new(a.clone()));
            *lock(&s) = fresh.clone();
            build(fresh, opts.clone())
        })?;
        Ok(NamingserverDouble {
            server,
            state: slot,
            auth,
        })
    }

    fn state(&self) -> Arc<State> {
        lock(&self.state).clone()
    }

    /// How many logins succeeded so far.
    pub fn logins(&self) -> usize {
        self.auth.logins()
    }

    /// How many calls were refused with HTTP 401 so far.
    pub fn refused(&self) -> usize {
        self.auth.refused()
    }

    /// Invalidates every issued token: the next call with one gets HTTP 401.
    pub fn expire_tokens(&self) {
        self.auth.expire();
    }

    /// `host:port`, as `registry.seata.server-addr` wants it.
    pub fn server_addr(&self) -> String {
        self.addr().to_string()
    }

    /// The transaction addresses registered in (`namespace`, `cluster`), sorted.
    pub fn instances(&self, namespace: &str, cluster: &str) -> Vec<String> {
        self.state().instances(namespace, cluster)
    }

    /// The `MetaResponse` a discovery of `vgroup` in `namespace` gets now.
    pub fn discovery(&self, vgroup: &str, namespace: &str) -> Value {
        self.state().discovery(vgroup, namespace)
    }

    /// Registers `node` as a TC would (for tests that play the TC).
    pub fn register_raw(&self, namespace: &str, cluster: &str, unit: &str, node: Value) -> bool {
        self.state().register(namespace, cluster, unit, node)
    }

    /// Adds malformed nodes to cluster `cluster`, mapped to `vgroup` (round 0: port 0
    /// and no transaction endpoint; other rounds: an empty host, a port past 65535, a
    /// string), and announces the change.
    pub fn put_garbage(&self, namespace: &str, cluster: &str, vgroup: &str, round: u32) {
        use serde_json::json;
        let nodes = if round == 0 {
            vec![
                json!({"transaction": {"host": "10.77.0.1", "port": 0}}),
                json!({"control": {"host": "10.77.0.2", "port": 7091}}),
            ]
        } else {
            vec![
                json!({"transaction": {"host": "", "port": 8091}}),
                json!({"transaction": {"host": "10.77.0.3", "port": 70000 + round}}),
                json!("not a node"),
            ]
        };
        self.state().put_raw(
            namespace,
            cluster,
            vgroup,
            &format!("garbage-{round}"),
            nodes,
        );
    }
}

fn build(state: Arc<State>, opts: NamingserverDoubleOptions) -> Built {
    let router = Router::new()
        .route("/naming/v1/register", post(routes::register))
        .route("/naming/v1/unregister", post(routes::unregister))
        .route("/naming/v1/discovery", get(routes::discovery))
        .route("/naming/v1/watch", post(routes::watch))
        .route_layer(from_fn_with_state(state.auth.clone(), guard))
        .route("/naming/v1/health", get(routes::health))
        .route("/api/v1/auth/login", post(routes::login))
        .fallback(routes::not_found)
        .with_state(state.clone());
    let background = async move {
        let mut tick = tokio::time::interval(opts.check_period);
        tick.tick().await;
        loop {
            tick.tick().await;
            state.evict(opts.heartbeat_threshold);
        }
    };
    Built {
        router,
        background: Box::pin(background),
    }
}
