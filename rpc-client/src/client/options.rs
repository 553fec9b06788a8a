//! What a client is tuned with ([`ClientOptions`]) and what one call says about itself
//! ([`CallOptions`]).

use std::time::Duration;

use meshline_loadbalance::PickRequest;
use meshline_registry_core::{Config, RegistryError};

use super::budget::RetryBudget;
use super::hedge::Hedging;
use super::membership::outlier::OutlierDetection;
use super::membership::subset::ApertureCoordinate;
use super::slow_start::SlowStart;
use crate::TransportConfig;
use crate::limits::CallLimits;
use crate::outcome::Classifier;
use crate::settings::set_present;
use crate::transport::{Probe, TransportOptions};

/// The default cap on how many members of a cluster a client connects to
/// ([`ClientOptions::subset_size`]).
///
/// A Seata cluster is a handful of TCs (3 to 10 in practice), and even large RPC
/// clusters rarely need more than a few dozen connections per client for spread and
/// failover; 64 leaves an order of magnitude of room for those. The cap is what keeps a
/// broken or hostile registry that lists 100,000 members from making every client open
/// 100,000 connections (file descriptors, memory, handshakes, heartbeats). Raise it with
/// `transport.maxConnectedMembers` (or [`ClientOptions::subset_size`]), or set `0`
/// (`None`) to connect to every member.
pub const DEFAULT_MAX_CONNECTED_MEMBERS: usize = 64;

/// Tunables of an [`RpcClient`](crate::RpcClient). Defaults follow Seata's Java client.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Default per-call timeout (Seata TM: 30 s).
    pub request_timeout: Duration,
    /// How long one connect attempt may take.
    pub connect_timeout: Duration,
    /// How long the handshake may take, at least (without a handshake: how long a new
    /// connection's first PING may go unanswered before it is given up). A handshake that states a longer
    /// timeout of its own ([`Handshake::timeout`](crate::Handshake::timeout), e.g.
    /// Seata's 30 s for RegisterTM) gets that one.
    pub handshake_timeout: Duration,
    /// Send PINGs on write-idle and close on read-idle (`transport.heartbeat`).
    pub heartbeat: bool,
    /// PING after this long without writing (`transport.heartbeatInterval`, 1 s; Seata's
    /// Java client: 5 s of write idle, a PING every other idle event, so about 10 s).
    pub write_idle: Duration,
    /// Drop the connection after this long without reading anything
    /// (`transport.heartbeatTimeout`, 3 s; Seata's Java client: 15 s). A live peer
    /// answers every PING, so only a silent one reaches it.
    pub read_idle: Duration,
    /// Find a peer that goes silent while answers are due, well before `read_idle`
    /// (`transport.probeAfter` / `probeTimeout`, 250 ms + 500 ms; `None`: off). See
    /// [`Probe`](crate::Probe). Seata's Java client has no such rule: a TC that vanishes
    /// mid-call holds each call for its whole timeout.
    pub probe: Option<Probe>,
    /// Eject an endpoint from picks after this many failures in a row: calls that timed
    /// out, whose connection failed after they were written, or that were answered with
    /// the server's failure ([`classifier`](Self::classifier)) (failure accrual, as
    /// Finagle, linkerd and Envoy do; `transport.ejectAfterFailures`, 5; 0: never).
    /// At most [`OutlierDetection::max_ejection_percent`] of the endpoints are ejected
    /// at once, and never the last alive.
    pub eject_after_failures: u32,
    /// How long the first ejection lasts (`transport.ejectionTime`, 1 s); each one in a
    /// row doubles it, up to [`OutlierDetection::max_ejection_time`] (30 s). Then a PING
    /// decides: answered, the endpoint returns (one more failure ejects it again);
    /// unanswered, its connection is closed.
    pub ejection_time: Duration,
    /// The rate rules of outlier detection (success rate, failure percentage; both off
    /// by default), and the limits every ejection keeps: at most
    /// [`OutlierDetection::max_ejection_percent`] of the endpoints out at once (50 %),
    /// ejections no longer than [`OutlierDetection::max_ejection_time`].
    pub outlier: OutlierDetection,
    /// How answers are read: success, the caller's failure, or the server's failure
    /// (see [`Outcome`](crate::Outcome)). `None` (the default): the handshake's
    /// ([`Handshake::classifier`](crate::Handshake::classifier); Seata's for a
    /// [`SeataRegistration`](crate::SeataRegistration)), else every answer is a success.
    pub classifier: Option<Classifier>,
    /// What an answer classified as the server's failure costs in the load-aware
    /// balancers' latency estimate (1 s): it is priced as an answer that took this long,
    /// so a server that fails fast is not the cheapest to pick. The price decays with
    /// the estimate (10 s), and successes after a return blend it away.
    pub failure_cost: Duration,
    /// Frame limit, queue budgets, write deadline and inbound cap of every connection.
    pub transport: TransportOptions,
    /// Attempts per call when endpoints fail before the request is written.
    pub max_attempts: u32,
    /// How many requests may be sent again, as a share of the calls (20 %, plus 10 a
    /// second): the TM's commits and rollbacks sent again after no answer each take
    /// one. A request not written that goes to another endpoint takes none (it reached
    /// no server). See [`RetryBudget`].
    pub retry_budget: RetryBudget,
    /// First reconnect delay.
    pub backoff_initial: Duration,
    /// Longest reconnect delay.
    pub backoff_max: Duration,
    /// A connection must stay up this long before the reconnect backoff starts again
    /// from `backoff_initial`; a server that accepts and then drops at once is retried
    /// with growing delays instead of every `backoff_initial`.
    pub stable_after: Duration,
    /// How long a removed endpoint may take to finish its in-flight calls.
    pub drain_timeout: Duration,
    /// Connect to at most this many endpoints (a stable random subset); `None` = all.
    /// Default: `Some(`[`DEFAULT_MAX_CONNECTED_MEMBERS`]`)` (64); config key
    /// `transport.maxConnectedMembers` (`0` = all).
    ///
    /// Chosen members stay chosen while the registry lists them; a member that is
    /// listed but unreachable keeps its slot (it is retried with backoff), so the live
    /// subset can be smaller than `k` until the registry drops it. When the registry
    /// lists more members than the cap, the client logs a warning (once per change of
    /// the listed count, not once per snapshot).
    pub subset_size: Option<usize>,
    /// Where this client stands among the clients of the cluster
    /// (`transport.apertureCoordinate = "<index>/<count>"`): with it, the subset is
    /// Finagle's deterministic aperture, which gives every server the same number of
    /// clients within one; without it (the default), a stable random subset. See
    /// [`ApertureCoordinate`].
    pub aperture: Option<ApertureCoordinate>,
    /// Caps on calls in flight (for the client, for each endpoint) and a circuit
    /// breaker; all off by default (see [`CallLimits`]).
    pub limits: CallLimits,
    /// Slow start: a connection that just joined takes a share of the calls that
    /// ramps up over a window (`transport.slowStartWindow`); `None` (the default): its
    /// full share at once. See [`SlowStart`].
    pub slow_start: Option<SlowStart>,
    /// Hedging: a call marked idempotent ([`CallOptions::idempotent`]) is sent again to
    /// another endpoint after the recent latency percentile (`transport.hedge=true`,
    /// `transport.hedgePercentile`); `None` (the default): never. See [`Hedging`].
    pub hedging: Option<Hedging>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(3),
            handshake_timeout: Duration::from_secs(10),
            heartbeat: true,
            write_idle: Duration::from_secs(1),
            read_idle: Duration::from_secs(3),
            probe: Some(Probe::default()),
            eject_after_failures: 5,
            ejection_time: Duration::from_secs(1),
            outlier: OutlierDetection::default(),
            classifier: None,
            failure_cost: Duration::from_secs(1),
            transport: TransportOptions::default(),
            max_attempts: 3,
            retry_budget: RetryBudget::default(),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            stable_after: Duration::from_secs(5),
            drain_timeout: Duration::from_secs(30),
            subset_size: Some(DEFAULT_MAX_CONNECTED_MEMBERS),
            aperture: None,
            limits: CallLimits::default(),
            slow_start: None,
            hedging: None,
        }
    }
}

impl ClientOptions {
    /// Defaults with the `transport.*` keys of `config` applied; an invalid value is an
    /// error naming the key.
    pub fn from_config(config: &Config) -> Result<Self, RegistryError> {
        let mut o = ClientOptions::default();
        o.apply_config(config)?;
        Ok(o)
    }

    /// Applies the `transport.*` keys `config` carries ([`TransportConfig`]); an invalid
    /// value is an error naming the key, and nothing is changed then.
    pub fn apply_config(&mut self, config: &Config) -> Result<(), RegistryError> {
        self.apply_transport(&TransportConfig::from_config(config)?);
        Ok(())
    }

    /// Applies `transport.heartbeat`, `transport.rpcTmRequestTimeout`,
    /// `transport.maxConnectedMembers` (`0`: no cap), the heartbeat, probe and ejection
    /// keys and the `transport.*` limits that are set. Every other option keeps the
    /// value it has.
    pub fn apply_transport(&mut self, t: &TransportConfig) {
        self.request_timeout = t.rpc_tm_request_timeout;
        self.heartbeat = t.heartbeat;
        set_present(&mut self.write_idle, t.heartbeat_interval);
        set_present(&mut self.read_idle, t.heartbeat_timeout);
        match (t.probe_after, t.probe_timeout) {
            (Some(a), _) if a.is_zero() => self.probe = None,
            (None, None) => {}
            (a, b) => {
                let base = self.probe.unwrap_or_default();
                self.probe = Some(Probe {
                    after: a.unwrap_or(base.after),
                    timeout: b.unwrap_or(base.timeout),
                });
            }
        }
        set_present(&mut self.eject_after_failures, t.eject_after_failures);
        set_present(&mut self.ejection_time, t.ejection_time);
        t.outlier.apply(&mut self.outlier);
        t.limits.apply(&mut self.limits);
        t.slow_start.apply(&mut self.slow_start);
        t.hedge.apply(&mut self.hedging);
        set_present(&mut self.retry_budget.percent, t.retry_budget_percent);
        set_present(
            &mut self.retry_budget.min_per_second,
            t.retry_budget_min_per_second,
        );
        set_present(&mut self.retry_budget.ttl, t.retry_budget_ttl);
        if let Some(k) = t.max_connected_members {
            self.subset_size = (k > 0).then_some(k);
        }
        if let Some(c) = t.aperture_coordinate {
            self.aperture = Some(c);
        }
        self.transport.apply_transport(t);
    }
}

/// Routing and timeout of one call. `Copy`.
///
/// Routing is a [`PickRequest`] as the balancer takes it, so every routing fact reaches
/// the balancer: XID, key, hash, prepared Java hash, source address (the source-IP game
/// balancer), zone (zone preference) and exclusions.
///
/// ```
/// use std::time::Duration;
/// use meshline_loadbalance::PickRequest;
/// use meshline_rpc_client::CallOptions;
///
/// let by_xid = CallOptions::xid("10.0.0.7:8091:2612341069705662465");
/// let by_player = CallOptions::route(
///     PickRequest::default()
///         .with_key(b"player-42")
///         .with_source("203.0.113.9".parse().unwrap()),
/// )
/// .with_timeout(Duration::from_secs(2));
/// # let _ = (by_xid, by_player);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct CallOptions<'a> {
    route: PickRequest<'a>,
    timeout: Option<Duration>,
    idempotent: bool,
}

impl<'a> CallOptions<'a> {
    /// No routing facts, the client's default timeout.
    pub fn new() -> Self {
        CallOptions::default()
    }

    /// Route by Seata XID (`ip:port:txid`): the `XID` balancer sends it to that TC.
    pub fn xid(xid: &'a str) -> Self {
        CallOptions::route(PickRequest::xid(xid))
    }

    /// Route with everything `route` says (key, hash, source, zone, exclusions...).
    pub fn route(route: PickRequest<'a>) -> Self {
        CallOptions {
            route,
            timeout: None,
            idempotent: false,
        }
    }

    /// Sets this call's timeout (covers waiting for queue room and retries too).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Marks the call safe to receive twice (a read): a client that hedges
    /// ([`ClientOptions::hedging`]) may send it again to another endpoint when the
    /// first is slow. Never mark a write.
    pub fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }

    /// Whether the call is marked idempotent.
    pub fn is_idempotent(&self) -> bool {
        self.idempotent
    }

    /// The routing facts.
    pub fn pick_request(&self) -> &PickRequest<'a> {
        &self.route
    }

    /// This call's timeout, if set.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
}

impl<'a> From<PickRequest<'a>> for CallOptions<'a> {
    fn from(route: PickRequest<'a>) -> Self {
        CallOptions::route(route)
    }
}
