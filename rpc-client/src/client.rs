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
//! - `attempts`: a balanced call's attempt loop (pick, send, fail over, send again
//!   where the registry points after a misdirected answer).
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
//! release their in-flight count (the balancer's guard drops with the call). An answer
//! saying **another server serves** the request ([`Outcome::Misdirected`](crate::Outcome::Misdirected):
//! a Seata raft follower's `NotRaftLeader`, which applied nothing) sets the endpoint
//! aside, asks the registry to read the cluster again, and sends the request where it
//! points next; while that leaves no endpoint, calls wait for one within their timeout.
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
//! `meshline_rpc_ejections_total`, `meshline_rpc_server_failures_total`,
//! `meshline_rpc_misdirected_total`; gauge
//! `meshline_rpc_alive_endpoints`.

mod answer;
mod attempts;
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

use std::sync::{Arc, Mutex};
use std::time::Duration;

use meshline_loadbalance::Balancer;
use meshline_registry_core::Instance;
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

use crate::connection::SendKind;
use crate::error::RpcError;
use crate::payload::Payload;
use gate::{CallGate, CallGuard};
use membership::Membership;
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
}
