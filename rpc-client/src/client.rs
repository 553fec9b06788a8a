//! `RpcClient`: one long connection per endpoint of a group, kept alive, and calls
//! spread over the ones that work.
//!
//! # Moving parts (one file each)
//!
//! - `options`: [`ClientOptions`] and [`CallOptions`] (routing is a
//!   `meshline_loadbalance::PickRequest`).
//! - `membership`: everything that decides whether an endpoint takes calls, in one
//!   folder. A **membership follower** reads the group's
//!   [`Watch`](meshline_registry_core::Watch) (full snapshots); each new endpoint gets
//!   an **endpoint task** that connects, runs the [`Handshake`](crate::Handshake)
//!   (without one, waits for a PING's answer: a frozen process's kernel still accepts
//!   connections), reports to the membership, and reconnects with jittered backoff when
//!   the connection dies; a removed endpoint drains. With
//!   [`ClientOptions::subset_size`] (default [`DEFAULT_MAX_CONNECTED_MEMBERS`], 64) only
//!   a subset of `k` endpoints is connected. The **alive set** is the [`Balancer`]'s
//!   membership itself: each endpoint carries its connection ([`AliveEndpoint`], the
//!   balancer's payload), every change reaches the balancer as edits, and an
//!   [`AliveSet`] is a view of one balancer snapshot. A pick hands back the connection
//!   to send on; readers never lock. Ejection (failure accrual) lives there too. Its
//!   module doc draws the path from the registry to the connections.
//! - `metrics`: counters, in [`RpcClient::stats`] and the `metrics` facade.
//! - `builder`: [`RpcClientBuilder`].
//! - `direct`: sends that bypass the balancer (one named endpoint, every endpoint).
//! - `gate`: the call gate that lets `shutdown` wait for calls in flight.
//! - `budget`: the retry budget ([`RetryBudget`]).
//! - this file: the calls.
//!
//! # Calls and failures
//!
//! [`RpcClient::call`] picks an endpoint (XID / key / hash / source / zone routing
//! through [`CallOptions`]), queues, and waits up to the timeout. A request that was
//! **not written** when its connection failed is retried on another endpoint (up to
//! [`ClientOptions::max_attempts`], excluding the ones that failed: failover, which the
//! retry budget ([`RetryBudget`]) does not count, since the request reached no server);
//! a request that **was written** fails with [`RpcError::MaybeDelivered`]. A connection whose write
//! queue is **full** is skipped for another endpoint with room; when every candidate is
//! full, `call` waits for room on the first within the timeout and `try_call` fails at
//! once, both with [`RpcError::Overloaded`] (not written). Timeouts and cancelled calls
//! release their in-flight count (the balancer's guard drops with the call).
//! [`RpcClient::shutdown`] stops new calls and waits for in-flight ones up to a
//! deadline.
//!
//! # Observability
//!
//! Spans: `rpc_call` per call, `endpoint` per endpoint task, `connection` per
//! connection. Counters (`metrics` facade, label `target`):
//! `meshline_rpc_connects_total`, `meshline_rpc_reconnects_total`,
//! `meshline_rpc_connect_failures_total`, `meshline_rpc_handshake_failures_total`,
//! `meshline_rpc_timeouts_total`, `meshline_rpc_retries_total`,
//! `meshline_rpc_retries_refused_total` (the retry budget's refusals),
//! `meshline_rpc_maybe_delivered_total`, `meshline_rpc_overloaded_total`,
//! `meshline_rpc_ejections_total`, `meshline_rpc_server_failures_total`; gauge
//! `meshline_rpc_alive_endpoints`.

mod answer;
mod budget;
mod builder;
mod direct;
mod gate;
mod hedge;
mod limits;
mod membership;
mod metrics;
mod options;
mod shutdown;
mod slow_start;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use meshline_loadbalance::{Balancer, Endpoint, Exclusions};
use meshline_registry_core::{Instance, InstanceKey};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

pub use budget::RetryBudget;
pub use builder::RpcClientBuilder;
pub use hedge::Hedging;
pub use membership::alive::{
    AliveEndpoint, AliveEndpoints, AliveIter, AliveSet, EndpointState, EndpointStatus,
};
pub use membership::outlier::OutlierDetection;
pub use membership::subset::ApertureCoordinate;
pub use metrics::ClientStats;
pub use options::{CallOptions, ClientOptions, DEFAULT_MAX_CONNECTED_MEMBERS};
pub use slow_start::SlowStart;

use crate::codec::Frame;
use crate::connection::{SendFailure, SendKind};
use crate::error::RpcError;
use crate::payload::Payload;
use gate::{CallGate, CallGuard};
use membership::Membership;
use membership::alive::alive_of;
use metrics::Counter;

struct Handle {
    members: Arc<Membership>,
    /// Calls in flight and the closing flag (see `gate`).
    gate: CallGate,
    /// How many retries the calls may still send (see `budget`).
    retries: budget::Retries,
    /// The client-wide cap on calls in flight and the breaker (see `limits`).
    limits: limits::ClientLimits,
    /// Hedging of idempotent calls, when the client hedges (see `hedge`).
    hedger: Option<hedge::Hedger>,
    /// Kept for the client's lifetime: some registries stop following their source when
    /// the last handle to them is dropped.
    _discovery: Option<meshline_registry_core::Discovery>,
    /// The membership's tasks (the registry follower, the rate judge): `shutdown`
    /// waits for them.
    background: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        // Last client handle gone: stop every background task and close connections.
        self.members.shutdown.cancel();
    }
}

/// A successful call's answer and who gave it.
#[derive(Debug, Clone)]
pub struct Response {
    /// The endpoint that answered.
    pub endpoint: Arc<Instance>,
    /// The response's head map and body.
    pub payload: Payload,
}

/// What an attempt loop learned, kept outside the future so a timeout can read it.
#[derive(Default)]
struct Progress {
    /// The endpoint last tried (its stats and connection, to book a timeout on).
    last: Option<Endpoint>,
    /// The current attempt's frame is in a queue (a timeout now means "may have been
    /// delivered", not "overloaded").
    queued: bool,
}

/// A client of one server group: long connections to every endpoint, calls spread
/// by the load balancer, self-healing. Cheap to clone; the background tasks stop when
/// the last clone is dropped or [`shutdown`](Self::shutdown) is called.
///
/// ```no_run
/// # async fn demo(discovery: meshline_registry_core::Discovery) -> Result<(), meshline_rpc_client::RpcError> {
/// use meshline_rpc_client::{CallOptions, Payload, RpcClient};
/// let client = RpcClient::builder()
///     .discovery(discovery, "default_tx_group")
///     .load_balance_name("XID")
///     .build()
///     .await?;
/// client.wait_alive(1, std::time::Duration::from_secs(5)).await?;
/// let resp = client
///     .call(Payload::new(&b"hello"[..]), CallOptions::xid("10.0.0.1:8091:42"))
///     .await?;
/// println!("answered by {}", resp.endpoint);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RpcClient {
    handle: Arc<Handle>,
}

impl std::fmt::Debug for RpcClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcClient")
            .field("target", &self.handle.members.target)
            .field("alive", &self.handle.members.balancer.snapshot().len())
            .finish()
    }
}

impl RpcClient {
    /// A builder with default options.
    pub fn builder() -> RpcClientBuilder {
        RpcClientBuilder::new()
    }

    fn inner(&self) -> &Membership {
        &self.handle.members
    }

    /// Starts a call, unless the client is closing.
    fn begin(&self) -> Result<CallGuard<'_>, RpcError> {
        self.handle.gate.enter().ok_or(RpcError::Shutdown)
    }

    /// What the client follows (tx-service-group or watch name).
    pub fn target(&self) -> &str {
        &self.inner().target
    }

    /// The options in force.
    pub fn options(&self) -> &ClientOptions {
        &self.inner().options
    }

    /// The current alive set (connected and handshaken endpoints).
    pub fn alive(&self) -> Arc<AliveSet> {
        self.inner().alive_tx.borrow().clone()
    }

    /// A receiver that sees every change of the alive set.
    pub fn subscribe_alive(&self) -> watch::Receiver<Arc<AliveSet>> {
        self.inner().alive_tx.subscribe()
    }

    /// Every endpoint the client follows, with its state.
    pub fn endpoints(&self) -> Vec<EndpointStatus> {
        self.inner()
            .state()
            .endpoints
            .values()
            .map(|s| EndpointStatus {
                instance: s.instance.clone(),
                state: s.state.clone(),
                connects: s.connects,
            })
            .collect()
    }

    /// Takes one retry from the client's retry budget (see [`RetryBudget`]): `true`
    /// when a caller that sends a request again on its own (the TM's commit and
    /// rollback after no answer) may do so, `false` when the budget is spent. Counted
    /// in [`ClientStats::retries_refused`] when refused.
    pub fn withdraw_retry(&self) -> bool {
        let granted = self.handle.retries.withdraw();
        if !granted {
            self.inner().count(Counter::RetriesRefused);
        }
        granted
    }

    /// Totals of connects, reconnects, retries, timeouts... since the client started.
    pub fn stats(&self) -> ClientStats {
        self.inner().counters.stats()
    }

    /// Where the client's circuit breaker stands (`None`: it has none; see
    /// [`CallLimits::breaker`](crate::limits::CallLimits::breaker)).
    pub fn circuit(&self) -> Option<crate::limits::BreakerState> {
        self.handle.limits.breaker_state()
    }

    /// The balancer (for its endpoints' stats: in-flight, latency, failures). Its
    /// members are the alive endpoints, each carrying its [`AliveEndpoint`].
    pub fn balancer(&self) -> &Balancer<AliveEndpoint> {
        &self.inner().balancer
    }

    /// Waits until at least `n` endpoints are alive, up to `timeout`. The error names
    /// every followed endpoint's state (a refused registration, a refused connection),
    /// so a log subscriber is not needed to see why.
    pub async fn wait_alive(&self, n: usize, timeout: Duration) -> Result<(), RpcError> {
        let mut rx = self.subscribe_alive();
        let wait = rx.wait_for(|s| s.len() >= n);
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(RpcError::NotEnoughAlive {
                target: self.target().to_string(),
                wanted: n,
                alive: self.alive().len(),
                waited: timeout,
                states: self
                    .endpoints()
                    .iter()
                    .map(|e| format!("{} {}", e.instance, e.state))
                    .collect(),
            }),
        }
    }

    /// Sends a request to an endpoint chosen by the balancer and waits for the answer.
    ///
    /// Retries on other endpoints when the request could not be written or found a full
    /// queue; fails with [`RpcError::MaybeDelivered`] when it was written and the
    /// connection died, with [`RpcError::Overloaded`] when no queue had room within the
    /// timeout, and with [`RpcError::Timeout`] when no answer came in time (default
    /// [`ClientOptions::request_timeout`]).
    pub async fn call(
        &self,
        payload: Payload,
        opts: CallOptions<'_>,
    ) -> Result<Response, RpcError> {
        self.call_inner(payload, opts, true).await
    }

    /// Like [`call`](Self::call), but never waits for queue room: when every candidate
    /// endpoint's queue is full it fails at once with [`RpcError::Overloaded`].
    pub async fn try_call(
        &self,
        payload: Payload,
        opts: CallOptions<'_>,
    ) -> Result<Response, RpcError> {
        self.call_inner(payload, opts, false).await
    }

    async fn call_inner(
        &self,
        payload: Payload,
        opts: CallOptions<'_>,
        wait: bool,
    ) -> Result<Response, RpcError> {
        let _guard = self.begin()?;
        let pass = self.handle.limits.admit(self.inner())?;
        let span = tracing::debug_span!("rpc_call", target = %self.target(), xid = opts.pick_request().xid_str());
        let result = match self.handle.hedger.as_ref() {
            Some(hedger) if self.may_hedge(&opts) => {
                // Boxed: the hedged path holds two requests' futures, and inline they
                // would grow every call's future (which callers allocate per call).
                Box::pin(self.hedged(hedger, payload, &opts, wait))
                    .instrument(span)
                    .await
            }
            _ => {
                self.balanced(payload, &opts, SendKind::Request, wait, None)
                    .instrument(span)
                    .await
            }
        };
        if pass.judges() {
            let answer = result.as_ref().ok().and_then(|(_, f)| f.as_ref());
            pass.finish(&result, answer);
        }
        let (endpoint, frame) = result?;
        Ok(Response {
            endpoint,
            payload: frame.unwrap_or_else(|| Payload::new(bytes::Bytes::new())),
        })
    }

    /// Sends a one-way request (no response) to an endpoint chosen by the balancer and
    /// returns once it is handed to the socket; the same retry rules as
    /// [`call`](Self::call).
    pub async fn send_oneway(
        &self,
        payload: Payload,
        opts: CallOptions<'_>,
    ) -> Result<Arc<Instance>, RpcError> {
        self.oneway_inner(payload, opts, true).await
    }

    /// Like [`send_oneway`](Self::send_oneway), but fails at once with
    /// [`RpcError::Overloaded`] when every candidate's queue is full.
    pub async fn try_send_oneway(
        &self,
        payload: Payload,
        opts: CallOptions<'_>,
    ) -> Result<Arc<Instance>, RpcError> {
        self.oneway_inner(payload, opts, false).await
    }

    async fn oneway_inner(
        &self,
        payload: Payload,
        opts: CallOptions<'_>,
        wait: bool,
    ) -> Result<Arc<Instance>, RpcError> {
        let _guard = self.begin()?;
        let pass = self.handle.limits.admit(self.inner())?;
        let span = tracing::debug_span!("rpc_oneway", target = %self.target(), xid = opts.pick_request().xid_str());
        let result = self
            .balanced(payload, &opts, SendKind::Oneway, wait, None)
            .instrument(span)
            .await;
        if pass.judges() {
            pass.finish(&result, None);
        }
        result.map(|(endpoint, _)| endpoint)
    }

    /// Runs the attempt loop under the call's timeout.
    async fn balanced(
        &self,
        payload: Payload,
        opts: &CallOptions<'_>,
        kind: SendKind,
        wait: bool,
        first_pick: Option<&OnceLock<InstanceKey>>,
    ) -> Result<(Arc<Instance>, Option<Payload>), RpcError> {
        let inner = self.inner();
        crate::payload::check(&payload, inner.options.transport.max_frame_len)?;
        let timeout = opts.timeout().unwrap_or(inner.options.request_timeout);
        let mut progress = Progress::default();
        let started = Instant::now();
        let fut = self.attempts(payload, opts, &mut progress, kind, wait, first_pick);
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) if !progress.queued && progress.last.is_some() => {
                inner.count(Counter::Overloaded);
                Err(RpcError::Overloaded {
                    endpoint: progress.last.map(|e| e.to_string()).unwrap_or_default(),
                    queued_bytes: 0,
                    waited: Some(started.elapsed()),
                })
            }
            Err(_) => {
                inner.count(Counter::Timeouts);
                // A call that timed out counts against its endpoint: a TC that stops
                // answering is ejected from the picks after a few (see `ejection`).
                if let Some(last) = &progress.last {
                    last.stats().record_failure();
                    self.handle.members.call_failed(alive_of(last));
                }
                Err(RpcError::Timeout {
                    after: timeout,
                    endpoint: progress.last.map(|e| e.to_string()),
                })
            }
        }
    }

    /// Sends on `endpoint`'s connection: queue (waiting for room if `wait`), then wait
    /// for the outcome.
    async fn send_on(
        endpoint: &Endpoint,
        payload: Payload,
        kind: SendKind,
        wait: bool,
        progress: &mut Progress,
    ) -> Result<Option<Frame>, SendFailure> {
        progress.queued = false;
        progress.last = Some(endpoint.clone());
        let connection = &alive_of(endpoint).connection;
        let e = if wait {
            // Boxed: waiting for room is rare, and inline its state would grow every
            // call's future (which callers driving many calls allocate per call).
            Box::pin(connection.enqueue(payload, kind, true)).await?
        } else {
            connection.try_enqueue(payload, kind)?
        };
        progress.queued = true;
        e.outcome().await
    }

    async fn attempts(
        &self,
        payload: Payload,
        opts: &CallOptions<'_>,
        progress: &mut Progress,
        kind: SendKind,
        wait: bool,
        first_pick: Option<&OnceLock<InstanceKey>>,
    ) -> Result<(Arc<Instance>, Option<Payload>), RpcError> {
        let inner = self.inner();
        let route = *opts.pick_request();
        // Filled on the first retry: the caller's exclusions (as keys) plus every
        // endpoint that failed or was full during this call.
        let mut excluded: Option<Vec<InstanceKey>> = None;
        let mut last_failure: Option<String> = None;
        let mut full: Option<Endpoint> = None;
        let mut at_cap: Option<usize> = None;
        let mut attempts = 0u32;
        self.handle.retries.deposit();
        while attempts < inner.options.max_attempts.max(1) {
            let Some(picked) = self.pick(&route, excluded.as_deref()) else {
                break;
            };
            let mut exclude = |key: &InstanceKey| {
                excluded
                    .get_or_insert_with(|| self.caller_exclusions(route.exclusions()))
                    .push(key.clone());
            };
            // What the pick returns is sendable: the endpoint carries its connection.
            let endpoint = picked.endpoint();
            let entry = picked.payload();
            // An endpoint at its cap is skipped, as a full one is, without an attempt.
            let _slot = match limits::enter_endpoint(entry) {
                Ok(slot) => slot,
                Err(cap) => {
                    exclude(endpoint.key());
                    at_cap = Some(cap);
                    picked.into_guard().cancel();
                    continue;
                }
            };
            attempts += 1;
            if let Some(tap) = first_pick {
                // For a hedge: the endpoint its second request should avoid.
                let _ = tap.set(endpoint.key().clone());
            }
            let start = Instant::now();
            match Self::send_on(endpoint, payload.clone(), kind, false, progress).await {
                Ok(f) => {
                    let instance = entry.instance.clone();
                    let answer = f.map(Payload::from_frame);
                    self.book_answer(picked.into_guard(), answer.as_ref(), start.elapsed());
                    return Ok((instance, answer));
                }
                Err(SendFailure::Full) => {
                    inner.count(Counter::Overloaded);
                    tracing::debug!(endpoint = %entry.instance, "write queue full; trying another endpoint");
                    exclude(endpoint.key());
                    last_failure = Some(format!("{}: write queue full", entry.instance));
                    if full.is_none() {
                        full = Some(endpoint.clone());
                    }
                    picked.into_guard().cancel();
                }
                Err(SendFailure::NotWritten(reason)) => {
                    // Failover, not a retry: the request never left this client, so
                    // sending it elsewhere adds nothing to any server's load (a
                    // connection pool re-queues such a request the same way); the
                    // retry budget is for requests sent again.
                    inner.count(Counter::Retries);
                    tracing::debug!(endpoint = %entry.instance, %reason, "not written; trying another endpoint");
                    exclude(endpoint.key());
                    last_failure = Some(format!("{}: {reason}", entry.instance));
                    picked.failure();
                }
                Err(e @ SendFailure::MaybeDelivered(_)) => {
                    self.handle.members.call_failed(entry);
                    inner.count(Counter::MaybeDelivered);
                    let err = entry.connection.failure_error(e);
                    picked.failure();
                    return Err(err);
                }
            }
        }
        if let Some(endpoint) = full {
            // Every candidate was full. `call` waits for room on the first one (within
            // the call's timeout); `try_call` says so now.
            let entry = alive_of(&endpoint);
            if !wait {
                return Err(entry.connection.overloaded(None));
            }
            let Ok(_slot) = limits::enter_endpoint(entry) else {
                return Err(entry.connection.overloaded(None));
            };
            // Counted in flight on it again, as the picks were (least-active and P2C
            // see the wait).
            let guard = endpoint.begin();
            let start = Instant::now();
            // Boxed, as the wait in `send_on`: a rare path kept out of every call's future.
            let waited = Box::pin(Self::send_on(&endpoint, payload, kind, true, progress)).await;
            return match waited {
                Ok(f) => {
                    let answer = f.map(Payload::from_frame);
                    self.book_answer(guard, answer.as_ref(), start.elapsed());
                    Ok((entry.instance.clone(), answer))
                }
                Err(e) => {
                    guard.failure();
                    if matches!(e, SendFailure::MaybeDelivered(_)) {
                        inner.count(Counter::MaybeDelivered);
                    }
                    Err(entry.connection.failure_error(e))
                }
            };
        }
        match (last_failure, at_cap) {
            (Some(last), _) => Err(RpcError::RetriesExhausted { attempts, last }),
            (None, Some(cap)) => Err(limits::endpoints_at_cap(inner, cap)),
            (None, None) => Err(RpcError::NoEndpoint {
                target: inner.target.clone(),
            }),
        }
    }

    /// The caller's own exclusions as keys (indices are resolved against the current
    /// picker's endpoint list), to which a retry adds the endpoints that failed.
    fn caller_exclusions(&self, given: Exclusions<'_>) -> Vec<InstanceKey> {
        match given {
            Exclusions::None => Vec::new(),
            Exclusions::Keys(k) => k.to_vec(),
            Exclusions::Indices(ix) => {
                let eps = self.inner().balancer.endpoints();
                ix.iter()
                    .filter_map(|&i| eps.get(i).map(|e| e.key().clone()))
                    .collect()
            }
        }
    }
}
