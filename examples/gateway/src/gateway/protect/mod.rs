//! Protection of the backends and of the players from each other: what happens to a
//! client message between the module lookup and the backend call.
//!
//! In order, for every forwarded message:
//!
//! 1. **Bulkhead** (a [`ConcurrencyLimit`] per module): the module's requests in flight are capped
//!    (`modules.N.max-in-flight`, default `protect.max-in-flight`), so a storm on one
//!    module (a login flood, a slow backend) cannot starve another (the shop). Over the
//!    cap: `busy: <module> at capacity`, at once.
//! 2. **Shedding** ([`overload`]): a module's sheddable opcodes (`modules.N.shed`) are
//!    answered `busy: shed` while its cluster is overloaded: every alive backend last
//!    reported a load (`load` command) above `protect.shed-load`, or the breaker is
//!    half-open (its few probes are kept for the requests that matter). Other opcodes
//!    still go through. (Backends that are disabled or report a load over 90 also get
//!    no new static bindings: that is routing's business, see `core`.)
//! 3. **Circuit breaker** (the rpc-client's [`Breaker`], one per cluster): open, it
//!    answers `busy: <cluster> circuit open` without calling a backend; see the state
//!    machine there and the settings in [`settings`].
//! 4. **Hold and replay** ([`hold`]): while the cluster has no alive endpoint (a backend
//!    restarting or being released), the request is held, at most `protect.hold-max`
//!    per cluster and each for at most `protect.hold-for`, and sent in arrival order as
//!    soon as an endpoint is alive; past either bound: `busy: <cluster> unavailable`.
//!    A request that failed without reaching a backend (not written, no endpoint) is
//!    held the same way; one that was written to a connection that then died is held
//!    and sent again only for modules with `replay` (default: stateless modules, whose
//!    requests must then be safe to receive twice; set `modules.N.replay: false` for a
//!    stateless module that is not). The gateway reconnects to a lost backend at least
//!    every `protect.reconnect-max` (500 ms), so a backend back within 2 s is found
//!    well inside the default 3 s.
//!
//! # What counts as a failure
//!
//! For the breaker, per request and on its final outcome (after any hold and resend):
//! **timeouts** (no answer within `backend-timeout`), **connection errors** (the
//! connection failed and the request was not resent), **no endpoint** (none alive, or
//! none came back within the hold's bounds) and a **full write queue** that never made
//! room. **Not** failures: any answer from a backend, application error replies (the
//! backend's `err` head) included — the backend is up and answering; a session whose
//! bound backend is gone (its binding is released and the request balanced again, see
//! [`route`](super::route)); requests refused by the gateway itself (bulkhead, shedding, the breaker); and local
//! errors (a payload that cannot be framed, a client shutting down). Every backend
//! failure, the ones a resend later hid included, is counted in
//! `gateway_backend_errors_total`.
//!
//! # Metrics (`metrics` facade)
//!
//! - `gateway_breaker_state{cluster}`: 0 closed, 1 open, 2 half-open (set on each
//!   change; an open breaker whose cool-down passed shows 1 until the next request);
//! - `gateway_backend_errors_total{cluster,kind}`: `kind` = `timeout`, `connection`,
//!   `no_endpoint` or `overloaded`;
//! - `gateway_held_requests{cluster}`: requests held now;
//! - `gateway_held_expired_total{cluster}`: held requests answered
//!   `busy: <cluster> unavailable` (the hold's time ran out, or it was full);
//! - `gateway_shed_total{module}`: requests answered `busy: shed`.

pub mod hold;
pub mod outcome;
pub mod overload;
pub mod settings;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use meshline::InstanceKey;
use meshline::rpc::limits::{Admission, Breaker, BreakerState, ConcurrencyLimit, Permit};
use meshline::rpc::{Payload, RpcClient};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::route::RouteError;
use super::settings::{GatewaySettings, ModuleRoute};
use hold::{Hold, after_first_poll};
use outcome::{Failure, may_resend};
use overload::Loads;

/// Why the gateway answered a request itself, without a backend's answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Busy {
    /// The module's bulkhead is full.
    #[error("busy: {0} at capacity")]
    AtCapacity(String),
    /// A sheddable opcode while the cluster is overloaded.
    #[error("busy: shed")]
    Shed,
    /// The cluster's breaker is open (or half-open with its probes out).
    #[error("busy: {0} circuit open")]
    CircuitOpen(String),
    /// The cluster had no endpoint within the hold's bounds.
    #[error("busy: {0} unavailable")]
    Unavailable(String),
}

/// Why a forwarded request got no backend answer.
#[derive(Debug, thiserror::Error)]
pub enum Denied {
    /// Refused by the gateway's protection.
    #[error(transparent)]
    Busy(#[from] Busy),
    /// The backend call failed.
    #[error(transparent)]
    Route(#[from] RouteError),
}

/// One backend cluster's protection: breaker, hold, reported loads.
#[derive(Debug)]
pub struct ClusterGuard {
    name: String,
    breaker: Breaker,
    hold: Arc<Hold>,
    loads: Loads,
    expired: AtomicU64,
    resent: AtomicU64,
}

impl ClusterGuard {
    /// The breaker's state.
    pub fn breaker_state(&self) -> BreakerState {
        self.breaker.state()
    }

    /// Requests held now.
    pub fn held(&self) -> usize {
        self.hold.len()
    }

    /// Requests held so far (a request held twice counts twice).
    pub fn held_total(&self) -> u64 {
        self.hold.held_total()
    }

    /// Held requests let go to a backend so far.
    pub fn replayed_total(&self) -> u64 {
        self.hold.released_total()
    }

    /// Requests whose call failed without an answer (not written, no endpoint, or
    /// written to a connection that died, for modules with `replay`) and that were held
    /// to be sent again, so far. A request counts once however many of its attempts
    /// failed: a re-send can itself meet the dying connection (not written) before the
    /// pool has noticed it, and the count is of requests, not of attempts.
    pub fn resent_total(&self) -> u64 {
        self.resent.load(Ordering::Relaxed)
    }

    /// Held requests answered `busy: unavailable` so far.
    pub fn expired_total(&self) -> u64 {
        self.expired.load(Ordering::Relaxed)
    }

    /// The load `backend` last reported (`load` command), if it reported one.
    pub fn reported_load(&self, backend: &InstanceKey) -> Option<u32> {
        self.loads.get(backend)
    }

    fn count_error(&self, f: Failure) {
        metrics::counter!(
            "gateway_backend_errors_total",
            "cluster" => self.name.clone(),
            "kind" => f.kind()
        )
        .increment(1);
    }

    fn changed(&self, to: BreakerState) {
        metrics::gauge!("gateway_breaker_state", "cluster" => self.name.clone()).set(to.gauge());
        match to {
            BreakerState::Open => {
                tracing::warn!(cluster = %self.name, "circuit open: answering busy without calling the backends")
            }
            BreakerState::HalfOpen => {
                tracing::info!(cluster = %self.name, "circuit half-open: probing")
            }
            BreakerState::Closed => tracing::info!(cluster = %self.name, "circuit closed"),
        }
    }
}

/// One module's protection: bulkhead, sheddable opcodes, replay.
#[derive(Debug)]
pub struct ModuleGuard {
    name: String,
    bulkhead: ConcurrencyLimit,
    shed: Vec<u16>,
    replay: bool,
    shed_total: AtomicU64,
}

impl ModuleGuard {
    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.bulkhead.in_flight()
    }

    /// Requests answered `busy: shed` so far.
    pub fn shed_total(&self) -> u64 {
        self.shed_total.load(Ordering::Relaxed)
    }
}

/// A request let in: its bulkhead slot, how the breaker admitted it, its ticket.
/// Dropping it reports its outcome to the breaker (a success unless
/// [`Protection::forward`] found a failure), so a probe never stays unanswered.
#[derive(Debug)]
pub struct Pass<'a> {
    cluster: &'a ClusterGuard,
    module: &'a ModuleGuard,
    _slot: Permit<'a>,
    admission: Admission,
    ticket: u64,
    failed: bool,
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        if let Some(to) = self.cluster.breaker.record(self.admission, self.failed) {
            self.cluster.changed(to);
        }
    }
}

/// The gateway's protection, per cluster and per module (see the module docs).
#[derive(Debug)]
pub struct Protection {
    /// `protect.hold-for`.
    hold_for: Duration,
    /// `protect.shed-load`.
    shed_load: u32,
    /// Arrival order of every message (the holds' order).
    tickets: AtomicU64,
    clusters: HashMap<String, ClusterGuard>,
    modules: HashMap<u16, ModuleGuard>,
}

impl Protection {
    /// Guards for every cluster and module of `settings`.
    pub fn new(settings: &GatewaySettings) -> Protection {
        let p = &settings.protect;
        let clusters = settings
            .clusters()
            .into_iter()
            .map(|name| {
                let guard = ClusterGuard {
                    breaker: Breaker::new(p.breaker.clone()),
                    hold: Arc::new(Hold::new(&name, p.hold_max)),
                    loads: Loads::default(),
                    expired: AtomicU64::new(0),
                    resent: AtomicU64::new(0),
                    name: name.clone(),
                };
                metrics::gauge!("gateway_breaker_state", "cluster" => name.clone()).set(0.0);
                (name, guard)
            })
            .collect();
        let modules = settings
            .modules
            .values()
            .map(|route| {
                let guard = ModuleGuard {
                    name: route.name.clone(),
                    bulkhead: ConcurrencyLimit::new(p.max_in_flight(route.id)),
                    shed: p.shed(route.id).to_vec(),
                    replay: p.replay(route),
                    shed_total: AtomicU64::new(0),
                };
                (route.id, guard)
            })
            .collect();
        Protection {
            hold_for: p.hold_for,
            shed_load: p.shed_load,
            tickets: AtomicU64::new(0),
            clusters,
            modules,
        }
    }

    /// The guard of `cluster`.
    pub fn cluster(&self, cluster: &str) -> Option<&ClusterGuard> {
        self.clusters.get(cluster)
    }

    /// The guard of module `id`.
    pub fn module(&self, id: u16) -> Option<&ModuleGuard> {
        self.modules.get(&id)
    }

    /// Starts the task that lets `cluster`'s held requests go when `client` has an
    /// alive endpoint; it ends with `stop`.
    pub fn start_release(&self, cluster: &str, client: &RpcClient, stop: CancellationToken) {
        if let Some(c) = self.clusters.get(cluster) {
            tokio::spawn(hold::release(
                c.hold.clone(),
                client.subscribe_alive(),
                |alive| !alive.is_empty(),
                stop,
            ));
        }
    }

    /// Records a backend's `load` report.
    pub fn report_load(&self, cluster: &str, backend: InstanceKey, load: u32) {
        if let Some(c) = self.clusters.get(cluster) {
            c.loads.report(backend, load);
        }
    }

    /// The next arrival ticket. Drawn where a client's messages are read, one at a time,
    /// so the holds keep each client's order even though messages are then forwarded
    /// concurrently.
    pub fn ticket(&self) -> u64 {
        self.tickets.fetch_add(1, Ordering::Relaxed)
    }

    /// Bulkhead, shedding and breaker for message `opcode` of `route` (served by
    /// `client`, arrived as `ticket`): a pass to forward it, or the busy answer to
    /// give at once.
    pub fn admit(
        &self,
        route: &ModuleRoute,
        opcode: u16,
        client: &RpcClient,
        ticket: u64,
    ) -> Result<Pass<'_>, Busy> {
        let (Some(module), Some(cluster)) = (
            self.modules.get(&route.id),
            self.clusters.get(&route.cluster),
        ) else {
            // Built from the same settings: every route has its guards.
            return Err(Busy::Unavailable(route.cluster.clone()));
        };
        let slot = module
            .bulkhead
            .try_enter()
            .ok_or_else(|| Busy::AtCapacity(module.name.clone()))?;
        if module.shed.contains(&opcode) && self.overloaded(cluster, client) {
            module.shed_total.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("gateway_shed_total", "module" => module.name.clone()).increment(1);
            return Err(Busy::Shed);
        }
        let (admitted, transition) = cluster.breaker.admit();
        if let Some(to) = transition {
            cluster.changed(to);
        }
        let admission = admitted.ok_or_else(|| Busy::CircuitOpen(cluster.name.clone()))?;
        Ok(Pass {
            cluster,
            module,
            _slot: slot,
            admission,
            ticket,
            failed: false,
        })
    }

    /// Whether `cluster` sheds now: its breaker is half-open, or every alive backend
    /// reported a load above `shed-load`.
    fn overloaded(&self, cluster: &ClusterGuard, client: &RpcClient) -> bool {
        if cluster.breaker.state() == BreakerState::HalfOpen {
            return true;
        }
        let alive = client.alive();
        cluster.loads.all_above(
            alive.endpoints().iter().map(|e| e.instance.key()),
            self.shed_load,
        )
    }

    /// Sends a request let in by `pass` with `attempt` (one backend call per run),
    /// holding it while `client` has no alive endpoint and sending it again when it
    /// may be (see the module docs), then reports the outcome to the breaker.
    pub async fn forward<F, Fut>(
        &self,
        mut pass: Pass<'_>,
        client: &RpcClient,
        mut attempt: F,
    ) -> Result<Payload, Denied>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Payload, RouteError>>,
    {
        let cluster = pass.cluster;
        let mut deadline = None;
        let mut hold = false;
        let mut resent = false;
        let result = loop {
            // Nothing held and an endpoint alive: the fast path, straight to the call.
            hold = hold || !cluster.hold.is_empty() || client.alive().is_empty();
            let answer = if hold {
                let until = *deadline.get_or_insert_with(|| Instant::now() + self.hold_for);
                // Boxed: the held path is rare, and inline its futures would double the
                // size of every forwarded message's future (allocated per message).
                let ticket = pass.ticket;
                let attempt = &mut attempt;
                let held = Box::pin(async move {
                    let turn = cluster.hold.wait_turn(ticket, until).await?;
                    Ok::<_, hold::Refused>(after_first_poll(attempt(), turn).await)
                });
                match held.await {
                    Ok(answer) => answer,
                    Err(_) => {
                        cluster.expired.fetch_add(1, Ordering::Relaxed);
                        metrics::counter!("gateway_held_expired_total", "cluster" => cluster.name.clone())
                            .increment(1);
                        break Err(Denied::Busy(Busy::Unavailable(cluster.name.clone())));
                    }
                }
            } else {
                attempt().await
            };
            match answer {
                Err(e) if may_resend(&e, pass.module.replay) => {
                    if let Some(f) = Failure::of(&e) {
                        cluster.count_error(f);
                    }
                    if !resent {
                        cluster.resent.fetch_add(1, Ordering::Relaxed);
                        resent = true;
                    }
                    hold = true;
                }
                other => break other.map_err(Denied::Route),
            }
        };
        let failure = match &result {
            Ok(_) => None,
            // The one busy answer given here: no endpoint within the hold's bounds.
            Err(Denied::Busy(_)) => Some(Failure::NoEndpoint),
            Err(Denied::Route(e)) => Failure::of(e),
        };
        if let Some(f) = failure {
            cluster.count_error(f);
        }
        pass.failed = failure.is_some();
        drop(pass);
        result
    }
}
