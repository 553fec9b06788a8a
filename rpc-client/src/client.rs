//! `RpcClient`: one long connection per endpoint of a group, kept alive, and calls
//! spread over the ones that work.
//!
//! # Moving parts
//!
//! - A **membership follower** reads the group's [`Watch`] (full snapshots). For each
//!   new endpoint it starts an endpoint task; for each removed one it asks the task to
//!   drain (no new calls, in-flight ones finish, then close). With
//!   [`ClientOptions::subset_size`] only a stable random subset of `k` endpoints is
//!   connected (see the `subset` module).
//! - An **endpoint task** connects, runs the [`Handshake`] on the new connection, and
//!   only then puts the endpoint in the **alive set**. When the connection dies it
//!   leaves the alive set at once and the task reconnects with jittered exponential
//!   backoff ([`Backoff`]); a refused handshake is logged and retried the same way.
//! - The **alive set** is what the [`Balancer`] picks from: every change rebuilds the
//!   picker (`Balancer::update`) and swaps the alive snapshot. Readers never lock.
//!
//! # Calls and failures
//!
//! [`RpcClient::call`] picks an endpoint (XID / key / hash routing through
//! [`CallOptions`]), sends, and waits up to the timeout. A request that was **not
//! written** when its connection failed is retried on another endpoint (up to
//! [`ClientOptions::max_attempts`], excluding the ones that failed); a request that
//! **was written** fails with [`RpcError::MaybeDelivered`]. Timeouts and cancelled
//! calls release their in-flight count (the balancer's guard drops with the call).
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
//! `meshline_rpc_maybe_delivered_total`; gauge `meshline_rpc_alive_endpoints`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use meshline_loadbalance::{Balancer, LoadBalance, PickRequest};
use meshline_registry_core::{Backoff, Config, Discovery, Instance, InstanceKey, Watch};
use tokio::net::TcpStream;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::codec::{CODEC_SEATA, DEFAULT_MAX_FRAME_LEN};
use crate::connection::{ConnConfig, Connection, InboundHandler, SendFailure};
use crate::error::RpcError;
use crate::handshake::Handshake;
use crate::payload::Payload;

/// Tunables of an [`RpcClient`]. Defaults follow Seata's Java client.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Default per-call timeout (Seata TM: 30 s).
    pub request_timeout: Duration,
    /// How long one connect attempt may take.
    pub connect_timeout: Duration,
    /// How long the handshake may take.
    pub handshake_timeout: Duration,
    /// Send PINGs on write-idle and close on read-idle (`transport.heartbeat`).
    pub heartbeat: bool,
    /// PING after this long without writing (Seata: 5 s).
    pub write_idle: Duration,
    /// Drop the connection after this long without reading (Seata: 15 s).
    pub read_idle: Duration,
    /// Largest frame written or accepted (8 MiB).
    pub max_frame_len: usize,
    /// Per-connection write queue; callers wait when it is full.
    pub queue_capacity: usize,
    /// Attempts per call when endpoints fail before the request is written.
    pub max_attempts: u32,
    /// First reconnect delay.
    pub backoff_initial: Duration,
    /// Longest reconnect delay.
    pub backoff_max: Duration,
    /// How long a removed endpoint may take to finish its in-flight calls.
    pub drain_timeout: Duration,
    /// Connect to at most this many endpoints (a stable random subset); `None` = all.
    ///
    /// Chosen members stay chosen while the registry lists them; a member that is
    /// listed but unreachable keeps its slot (it is retried with backoff), so the live
    /// subset can be smaller than `k` until the registry drops it.
    pub subset_size: Option<usize>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(3),
            handshake_timeout: Duration::from_secs(10),
            heartbeat: true,
            write_idle: Duration::from_secs(5),
            read_idle: Duration::from_secs(15),
            max_frame_len: DEFAULT_MAX_FRAME_LEN,
            queue_capacity: 1024,
            max_attempts: 3,
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(30),
            subset_size: None,
        }
    }
}

impl ClientOptions {
    /// Defaults with the `transport.*` keys of `config` applied (heartbeat, TM request
    /// timeout).
    pub fn from_config(config: &Config) -> Self {
        ClientOptions {
            request_timeout: config.transport.rpc_tm_request_timeout,
            heartbeat: config.transport.heartbeat,
            ..ClientOptions::default()
        }
    }
}

/// Routing and timeout of one call. `Copy`; build with the chained setters.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallOptions<'a> {
    xid: Option<&'a str>,
    key: Option<&'a [u8]>,
    hash: Option<u64>,
    java_hash: Option<i64>,
    timeout: Option<Duration>,
}

impl<'a> CallOptions<'a> {
    /// No routing key, the client's default timeout.
    pub fn new() -> Self {
        CallOptions::default()
    }

    /// Route by Seata XID (`ip:port:txid`): the `XID` balancer sends it to that TC.
    pub fn xid(xid: &'a str) -> Self {
        CallOptions::default().with_xid(xid)
    }

    /// Sets the XID.
    pub fn with_xid(mut self, xid: &'a str) -> Self {
        self.xid = Some(xid);
        self
    }

    /// Sets a routing key (account id, session id...) for hashing balancers.
    pub fn with_key(mut self, key: &'a [u8]) -> Self {
        self.key = Some(key);
        self
    }

    /// Sets a numeric routing key.
    pub fn with_hash(mut self, hash: u64) -> Self {
        self.hash = Some(hash);
        self
    }

    /// Sets the routing key's Seata-Java ring hash (`ConsistentHashJava`), computed once
    /// per transaction with `meshline_loadbalance::hash::java_hash(xid.as_bytes())`, so
    /// each call skips SHA-256 (see `PickRequest::with_java_hash`).
    pub fn with_java_hash(mut self, hash: i64) -> Self {
        self.java_hash = Some(hash);
        self
    }

    /// Sets this call's timeout (covers retries too).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    fn pick_request(&self) -> PickRequest<'a> {
        let mut r = PickRequest::default();
        if let Some(x) = self.xid {
            r = r.with_xid(x);
        }
        if let Some(k) = self.key {
            r = r.with_key(k);
        }
        if let Some(h) = self.hash {
            r = r.with_hash(h);
        }
        if let Some(h) = self.java_hash {
            r = r.with_java_hash(h);
        }
        r
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

/// One endpoint of the alive set: connected and handshaken.
#[derive(Debug, Clone)]
pub struct AliveEndpoint {
    /// What the registry says about it.
    pub instance: Arc<Instance>,
    /// Its connection.
    pub connection: Connection,
}

/// The alive set at one moment: every connected, handshaken endpoint.
#[derive(Debug, Default)]
pub struct AliveSet {
    entries: Vec<AliveEndpoint>,
    index: HashMap<InstanceKey, usize>,
}

impl AliveSet {
    /// The endpoints, sorted by identity.
    pub fn endpoints(&self) -> &[AliveEndpoint] {
        &self.entries
    }

    /// The entry for `key`, if alive.
    pub fn get(&self, key: &InstanceKey) -> Option<&AliveEndpoint> {
        self.index.get(key).map(|&i| &self.entries[i])
    }

    /// Number of alive endpoints.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is alive.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The alive instances.
    pub fn instances(&self) -> Vec<Arc<Instance>> {
        self.entries.iter().map(|e| e.instance.clone()).collect()
    }
}

/// Where an endpoint stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointState {
    /// Connecting (or handshaking) for the first time, or again.
    Connecting,
    /// Connected and handshaken: in the alive set.
    Alive,
    /// The handshake was refused or failed; retried with backoff.
    Refused(String),
    /// The connection failed or could not be made; retried with backoff.
    Down(String),
    /// Removed from the registry; finishing in-flight calls.
    Draining,
}

/// An endpoint the client follows, with its state.
#[derive(Debug, Clone)]
pub struct EndpointStatus {
    /// The instance.
    pub instance: Arc<Instance>,
    /// Its state.
    pub state: EndpointState,
    /// Successful connections made to it so far.
    pub connects: u64,
}

/// How a call source is given to the builder.
enum Source {
    Discovery(Discovery, String),
    Watch(Watch, String),
}

/// Builds an [`RpcClient`].
pub struct RpcClientBuilder {
    source: Option<Source>,
    load_balance: Option<Arc<dyn LoadBalance>>,
    lb_error: Option<String>,
    handshake: Option<Arc<dyn Handshake>>,
    inbound: Option<Arc<dyn InboundHandler>>,
    options: ClientOptions,
}

impl std::fmt::Debug for RpcClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcClientBuilder")
            .field("options", &self.options)
            .field(
                "load_balance",
                &self.load_balance.as_ref().map(|l| l.name().to_string()),
            )
            .finish()
    }
}

impl RpcClientBuilder {
    /// Follow the cluster that `tx_service_group` maps to in `discovery`.
    pub fn discovery(mut self, discovery: Discovery, tx_service_group: impl Into<String>) -> Self {
        self.source = Some(Source::Discovery(discovery, tx_service_group.into()));
        self
    }

    /// Follow `watch` directly; `name` labels logs, errors and metrics.
    pub fn watch(mut self, watch: Watch, name: impl Into<String>) -> Self {
        self.source = Some(Source::Watch(watch, name.into()));
        self
    }

    /// The load-balancing algorithm (required, or set through [`config`](Self::config)
    /// or [`load_balance_name`](Self::load_balance_name)).
    pub fn load_balance(mut self, lb: Arc<dyn LoadBalance>) -> Self {
        self.load_balance = Some(lb);
        self.lb_error = None;
        self
    }

    /// The load-balancing algorithm by its Seata / meshline name (`XID`,
    /// `RandomLoadBalance`, ...). An unknown name makes [`build`](Self::build) fail.
    pub fn load_balance_name(mut self, name: &str) -> Self {
        match meshline_loadbalance::by_name(name) {
            Ok(lb) => {
                self.load_balance = Some(lb);
                self.lb_error = None;
            }
            Err(e) => self.lb_error = Some(e.to_string()),
        }
        self
    }

    /// Applies `config`: `client.loadBalance.type` / `virtualNodes` and the `transport.*`
    /// keys (heartbeat, TM request timeout).
    pub fn config(mut self, config: &Config) -> Self {
        let keep_subset = self.options.subset_size;
        self.options = ClientOptions {
            subset_size: keep_subset,
            ..ClientOptions::from_config(config)
        };
        match meshline_loadbalance::from_config(&config.client.load_balance) {
            Ok(lb) => {
                self.load_balance = Some(lb);
                self.lb_error = None;
            }
            Err(e) => self.lb_error = Some(e.to_string()),
        }
        self
    }

    /// Runs `handshake` on every new connection; the endpoint is used only if it
    /// succeeds (e.g. [`crate::SeataRegistration`]).
    pub fn handshake(mut self, handshake: impl Handshake) -> Self {
        self.handshake = Some(Arc::new(handshake));
        self
    }

    /// Handles requests servers send us (a TC's branch commit, a backend's push).
    pub fn inbound(mut self, handler: impl InboundHandler) -> Self {
        self.inbound = Some(Arc::new(handler));
        self
    }

    /// Replaces all options.
    pub fn options(mut self, options: ClientOptions) -> Self {
        self.options = options;
        self
    }

    /// Changes options in place.
    pub fn configure(mut self, f: impl FnOnce(&mut ClientOptions)) -> Self {
        f(&mut self.options);
        self
    }

    /// Starts the client: opens the watch and begins connecting. Returns at once;
    /// use [`RpcClient::wait_alive`] to wait for connections.
    pub async fn build(self) -> Result<RpcClient, RpcError> {
        if let Some(e) = self.lb_error {
            return Err(RpcError::Config(e));
        }
        let lb = self
            .load_balance
            .ok_or_else(|| RpcError::Config("no load balancer set: call .load_balance(..), .load_balance_name(..) or .config(..)".into()))?;
        let (watch, target, discovery) = match self.source {
            Some(Source::Discovery(d, group)) => {
                let w = d.watch(&group).await?;
                (w, group, Some(d))
            }
            Some(Source::Watch(w, name)) => (w, name, None),
            None => {
                return Err(RpcError::Config(
                    "no endpoint source: call .discovery(..) or .watch(..)".into(),
                ));
            }
        };
        let options = self.options;
        let (alive_tx, _) = watch::channel(Arc::new(AliveSet::default()));
        let inner = Arc::new(Inner {
            target: target.clone(),
            counters: Default::default(),
            _discovery: discovery,
            balancer: Balancer::new(lb),
            alive: ArcSwap::from_pointee(AliveSet::default()),
            alive_tx,
            state: Mutex::new(State::default()),
            handshake: self.handshake,
            inbound: self.inbound,
            closing: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            idle: Notify::new(),
            shutdown: CancellationToken::new(),
            options,
        });
        let follower = tokio::spawn(
            follow(inner.clone(), watch)
                .instrument(tracing::info_span!("membership", target = %target)),
        );
        Ok(RpcClient {
            handle: Arc::new(Handle {
                inner,
                follower: Mutex::new(Some(follower)),
            }),
        })
    }
}

#[derive(Default)]
struct State {
    endpoints: BTreeMap<InstanceKey, Slot>,
    alive: BTreeMap<InstanceKey, AliveEndpoint>,
}

struct Slot {
    instance: Arc<Instance>,
    state: EndpointState,
    connects: u64,
    cmd: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

/// Totals since the client started (the same events the `metrics` counters count).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Connections established (and handshaken).
    pub connects: u64,
    /// Of those, re-connections to an endpoint connected before.
    pub reconnects: u64,
    /// Connect attempts that failed.
    pub connect_failures: u64,
    /// Handshakes refused or failed.
    pub handshake_failures: u64,
    /// Calls retried on another endpoint because they were not written.
    pub retries: u64,
    /// Calls that timed out.
    pub timeouts: u64,
    /// Calls failed as "may have been delivered".
    pub maybe_delivered: u64,
}

#[derive(Clone, Copy)]
enum Counter {
    Connects,
    Reconnects,
    ConnectFailures,
    HandshakeFailures,
    Retries,
    Timeouts,
    MaybeDelivered,
}

impl Counter {
    const ALL: usize = 7;

    fn metric(self) -> &'static str {
        match self {
            Counter::Connects => "meshline_rpc_connects_total",
            Counter::Reconnects => "meshline_rpc_reconnects_total",
            Counter::ConnectFailures => "meshline_rpc_connect_failures_total",
            Counter::HandshakeFailures => "meshline_rpc_handshake_failures_total",
            Counter::Retries => "meshline_rpc_retries_total",
            Counter::Timeouts => "meshline_rpc_timeouts_total",
            Counter::MaybeDelivered => "meshline_rpc_maybe_delivered_total",
        }
    }
}

struct Inner {
    target: String,
    counters: [AtomicU64; Counter::ALL],
    /// Kept for the client's lifetime: some registries stop following their source when
    /// the last handle to them is dropped.
    _discovery: Option<Discovery>,
    options: ClientOptions,
    balancer: Balancer,
    alive: ArcSwap<AliveSet>,
    alive_tx: watch::Sender<Arc<AliveSet>>,
    state: Mutex<State>,
    handshake: Option<Arc<dyn Handshake>>,
    inbound: Option<Arc<dyn InboundHandler>>,
    closing: AtomicBool,
    in_flight: AtomicUsize,
    idle: Notify,
    shutdown: CancellationToken,
}

impl Inner {
    fn count(&self, c: Counter) {
        self.counters[c as usize].fetch_add(1, Ordering::Relaxed);
        metrics::counter!(c.metric(), "target" => self.target.clone()).increment(1);
    }

    fn stats(&self) -> ClientStats {
        let g = |c: Counter| self.counters[c as usize].load(Ordering::Relaxed);
        ClientStats {
            connects: g(Counter::Connects),
            reconnects: g(Counter::Reconnects),
            connect_failures: g(Counter::ConnectFailures),
            handshake_failures: g(Counter::HandshakeFailures),
            retries: g(Counter::Retries),
            timeouts: g(Counter::Timeouts),
            maybe_delivered: g(Counter::MaybeDelivered),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn conn_config(&self) -> ConnConfig {
        let o = &self.options;
        ConnConfig {
            max_frame_len: o.max_frame_len,
            queue_capacity: o.queue_capacity,
            write_idle: o.heartbeat.then_some(o.write_idle),
            read_idle: o.heartbeat.then_some(o.read_idle),
            heartbeat_codec: CODEC_SEATA,
        }
    }

    /// Publishes the alive map to the balancer and readers. Called with the state lock
    /// held so updates are applied in order.
    fn publish_alive(&self, st: &State) {
        let entries: Vec<AliveEndpoint> = st.alive.values().cloned().collect();
        let index = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.instance.key().clone(), i))
            .collect();
        let instances: Vec<Instance> = entries.iter().map(|e| (*e.instance).clone()).collect();
        let set = Arc::new(AliveSet { entries, index });
        // Alive snapshot first: a pick from the new picker always finds its entry.
        self.alive.store(set.clone());
        self.balancer.update(&instances);
        metrics::gauge!("meshline_rpc_alive_endpoints", "target" => self.target.clone())
            .set(instances.len() as f64);
        self.alive_tx.send_replace(set);
    }

    fn set_state(&self, key: &InstanceKey, state: EndpointState) {
        if let Some(s) = self.state().endpoints.get_mut(key) {
            s.state = state;
        }
    }

    fn mark_alive(&self, key: &InstanceKey, conn: &Connection) -> bool {
        let mut st = self.state();
        let Some(slot) = st.endpoints.get_mut(key) else {
            return false;
        };
        slot.state = EndpointState::Alive;
        slot.connects += 1;
        let instance = slot.instance.clone();
        st.alive.insert(
            key.clone(),
            AliveEndpoint {
                instance,
                connection: conn.clone(),
            },
        );
        self.publish_alive(&st);
        true
    }

    fn mark_dead(&self, key: &InstanceKey, conn: &Connection, state: EndpointState) {
        let mut st = self.state();
        if let Some(s) = st.endpoints.get_mut(key) {
            s.state = state;
        }
        let same = st.alive.get(key).is_some_and(|e| e.connection.ptr_eq(conn));
        if same {
            st.alive.remove(key);
            self.publish_alive(&st);
        }
    }

    /// Applies one membership snapshot.
    fn apply(self: &Arc<Self>, instances: &[Instance]) {
        let mut st = self.state();
        let wanted: Vec<Instance> = match self.options.subset_size {
            Some(k) => {
                let current: HashSet<InstanceKey> = st.endpoints.keys().cloned().collect();
                crate::subset::choose(&current, instances, k)
            }
            None => instances.to_vec(),
        };
        let wanted_keys: HashSet<&InstanceKey> = wanted.iter().map(Instance::key).collect();
        // Removed: drain.
        let removed: Vec<InstanceKey> = st
            .endpoints
            .keys()
            .filter(|k| !wanted_keys.contains(k))
            .cloned()
            .collect();
        let mut alive_changed = false;
        for key in removed {
            if let Some(slot) = st.endpoints.remove(&key) {
                tracing::info!(endpoint = %key, "endpoint left the registry; draining");
                let _ = slot.cmd.send(false);
                // The task finishes draining on its own; nothing waits for it.
                drop(slot.task);
            }
            if st.alive.remove(&key).is_some() {
                alive_changed = true;
            }
        }
        // Added or changed.
        for inst in wanted {
            let key = inst.key().clone();
            match st.endpoints.get_mut(&key) {
                Some(slot) => {
                    if *slot.instance != inst {
                        let inst = Arc::new(inst);
                        slot.instance = inst.clone();
                        if let Some(a) = st.alive.get_mut(&key) {
                            a.instance = inst;
                            alive_changed = true;
                        }
                    }
                }
                None => {
                    tracing::info!(endpoint = %key, "endpoint joined; connecting");
                    let (cmd, cmd_rx) = watch::channel(true);
                    let instance = Arc::new(inst);
                    let span =
                        tracing::info_span!("endpoint", target = %self.target, endpoint = %key);
                    let task = tokio::spawn(
                        endpoint_task(self.clone(), instance.clone(), cmd_rx).instrument(span),
                    );
                    st.endpoints.insert(
                        key,
                        Slot {
                            instance,
                            state: EndpointState::Connecting,
                            connects: 0,
                            cmd,
                            task: Some(task),
                        },
                    );
                }
            }
        }
        if alive_changed {
            self.publish_alive(&st);
        }
    }
}

async fn follow(inner: Arc<Inner>, mut watch: Watch) {
    loop {
        let next = tokio::select! {
            n = watch.next() => n,
            _ = inner.shutdown.cancelled() => return,
        };
        match next {
            Ok(snapshot) => {
                tracing::debug!(
                    revision = snapshot.revision(),
                    members = snapshot.len(),
                    "membership snapshot"
                );
                inner.apply(snapshot.instances());
            }
            Err(e) => {
                tracing::warn!(error = %e, "membership watch ended; keeping the current endpoints");
                return;
            }
        }
    }
}

/// Waits until the endpoint is told to stop (`false`) or the sender is gone.
async fn stopped(cmd: &mut watch::Receiver<bool>) {
    while *cmd.borrow_and_update() {
        if cmd.changed().await.is_err() {
            return;
        }
    }
}

async fn connect_once(inner: &Inner, instance: &Instance) -> Result<TcpStream, String> {
    let connect = TcpStream::connect((instance.host(), instance.port()));
    match tokio::time::timeout(inner.options.connect_timeout, connect).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(format!("connect failed: {e}")),
        Err(_) => Err(format!(
            "connect timed out after {:?}",
            inner.options.connect_timeout
        )),
    }
}

async fn endpoint_task(inner: Arc<Inner>, instance: Arc<Instance>, mut cmd: watch::Receiver<bool>) {
    let key = instance.key().clone();
    let label = instance.to_string();
    let mut backoff = Backoff::new(inner.options.backoff_initial, inner.options.backoff_max);
    let mut connected_before = false;
    loop {
        if !*cmd.borrow() || inner.shutdown.is_cancelled() {
            break;
        }
        inner.set_state(&key, EndpointState::Connecting);
        let attempt = async {
            let stream = connect_once(&inner, &instance)
                .await
                .map_err(EndpointState::Down)?;
            let (conn, task) = Connection::start(
                stream,
                inner.conn_config(),
                label.clone(),
                inner.inbound.clone(),
            )
            .map_err(|e| EndpointState::Down(format!("socket setup failed: {e}")))?;
            if let Some(h) = &inner.handshake {
                let r = tokio::time::timeout(inner.options.handshake_timeout, h.handshake(&conn))
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!(
                            "handshake timed out after {:?}",
                            inner.options.handshake_timeout
                        ))
                    });
                if let Err(reason) = r {
                    conn.close();
                    let _ = task.await;
                    return Err(EndpointState::Refused(reason));
                }
            }
            Ok((conn, task))
        };
        let attempt = tokio::select! {
            a = attempt => Some(a),
            _ = stopped(&mut cmd) => None,
            _ = inner.shutdown.cancelled() => None,
        };
        let Some(attempt) = attempt else { break };
        match attempt {
            Ok((conn, mut task)) => {
                backoff.reset();
                inner.count(Counter::Connects);
                if connected_before {
                    inner.count(Counter::Reconnects);
                    tracing::info!(peer = %conn.peer(), "reconnected");
                } else {
                    tracing::info!(peer = %conn.peer(), "connected");
                }
                connected_before = true;
                if !inner.mark_alive(&key, &conn) {
                    // Removed from the registry while we were connecting.
                    conn.close();
                    let _ = task.await;
                    break;
                }
                tokio::select! {
                    reason = &mut task => {
                        let reason = reason.unwrap_or_else(|e| format!("connection task failed: {e}"));
                        tracing::warn!(%reason, "connection lost; leaving the alive set");
                        inner.mark_dead(&key, &conn, EndpointState::Down(reason));
                    }
                    _ = stopped(&mut cmd) => {
                        inner.mark_dead(&key, &conn, EndpointState::Draining);
                        conn.drain(inner.options.drain_timeout).await;
                        let _ = task.await;
                        tracing::info!("drained and closed");
                        break;
                    }
                    _ = inner.shutdown.cancelled() => {
                        inner.mark_dead(&key, &conn, EndpointState::Down("client shut down".into()));
                        conn.close();
                        let _ = task.await;
                        break;
                    }
                }
            }
            Err(state) => {
                match &state {
                    EndpointState::Refused(reason) => {
                        inner.count(Counter::HandshakeFailures);
                        tracing::warn!(%reason, "handshake refused; endpoint not used");
                    }
                    EndpointState::Down(reason) => {
                        inner.count(Counter::ConnectFailures);
                        tracing::debug!(%reason, attempt = backoff.attempts(), "connect failed");
                    }
                    _ => {}
                }
                inner.set_state(&key, state);
            }
        }
        let delay = backoff.next_delay();
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stopped(&mut cmd) => break,
            _ = inner.shutdown.cancelled() => break,
        }
    }
}

/// Counts a call for [`RpcClient::shutdown`].
struct CallGuard<'a>(&'a Inner);

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

struct Handle {
    inner: Arc<Inner>,
    follower: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        // Last client handle gone: stop every background task and close connections.
        self.inner.shutdown.cancel();
    }
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
            .field("target", &self.handle.inner.target)
            .field("alive", &self.handle.inner.alive.load().len())
            .finish()
    }
}

impl RpcClient {
    /// A builder with default options.
    pub fn builder() -> RpcClientBuilder {
        RpcClientBuilder {
            source: None,
            load_balance: None,
            lb_error: None,
            handshake: None,
            inbound: None,
            options: ClientOptions::default(),
        }
    }

    fn inner(&self) -> &Inner {
        &self.handle.inner
    }

    /// What the client follows (tx-service-group or watch name).
    pub fn target(&self) -> &str {
        &self.inner().target
    }

    /// The current alive set (connected and handshaken endpoints).
    pub fn alive(&self) -> Arc<AliveSet> {
        self.inner().alive.load_full()
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

    /// Totals of connects, reconnects, retries, timeouts... since the client started.
    pub fn stats(&self) -> ClientStats {
        self.inner().stats()
    }

    /// The balancer (for its endpoints' stats: in-flight, latency, failures).
    pub fn balancer(&self) -> &Balancer {
        &self.inner().balancer
    }

    /// Waits until at least `n` endpoints are alive, up to `timeout`.
    pub async fn wait_alive(&self, n: usize, timeout: Duration) -> Result<(), RpcError> {
        let mut rx = self.subscribe_alive();
        let wait = rx.wait_for(|s| s.len() >= n);
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(RpcError::NoEndpoint {
                target: format!(
                    "{} (waited {timeout:?} for {n} alive, have {})",
                    self.target(),
                    self.alive().len()
                ),
            }),
        }
    }

    fn begin(&self) -> Result<CallGuard<'_>, RpcError> {
        let inner = self.inner();
        inner.in_flight.fetch_add(1, Ordering::AcqRel);
        let guard = CallGuard(inner);
        if inner.closing.load(Ordering::Acquire) {
            return Err(RpcError::Shutdown);
        }
        Ok(guard)
    }

    /// Sends a request to an endpoint chosen by the balancer and waits for the answer.
    ///
    /// Retries on other endpoints when the request could not be written; fails with
    /// [`RpcError::MaybeDelivered`] when it was written and the connection died, and
    /// with [`RpcError::Timeout`] after the timeout (default
    /// [`ClientOptions::request_timeout`]).
    pub async fn call(
        &self,
        payload: Payload,
        opts: CallOptions<'_>,
    ) -> Result<Response, RpcError> {
        let _guard = self.begin()?;
        let inner = self.inner();
        let timeout = opts.timeout.unwrap_or(inner.options.request_timeout);
        let span = tracing::debug_span!("rpc_call", target = %inner.target, xid = opts.xid);
        let mut last = None;
        let fut = self.attempts(payload, &opts, &mut last, Kind::Call);
        match tokio::time::timeout(timeout, fut).instrument(span).await {
            Ok(r) => r.map(|(endpoint, payload)| Response {
                endpoint,
                payload: payload.unwrap_or_else(|| Payload::new(bytes::Bytes::new())),
            }),
            Err(_) => {
                inner.count(Counter::Timeouts);
                Err(RpcError::Timeout {
                    after: timeout,
                    endpoint: last.map(|i: Arc<Instance>| i.to_string()),
                })
            }
        }
    }

    /// Sends a one-way request (no response) to an endpoint chosen by the balancer and
    /// returns once it is written; the same retry rules as [`call`](Self::call).
    pub async fn send_oneway(
        &self,
        payload: Payload,
        opts: CallOptions<'_>,
    ) -> Result<Arc<Instance>, RpcError> {
        let _guard = self.begin()?;
        let inner = self.inner();
        let timeout = opts.timeout.unwrap_or(inner.options.request_timeout);
        let span = tracing::debug_span!("rpc_oneway", target = %inner.target, xid = opts.xid);
        let mut last = None;
        let fut = self.attempts(payload, &opts, &mut last, Kind::Oneway);
        match tokio::time::timeout(timeout, fut).instrument(span).await {
            Ok(r) => r.map(|(endpoint, _)| endpoint),
            Err(_) => {
                inner.count(Counter::Timeouts);
                Err(RpcError::Timeout {
                    after: timeout,
                    endpoint: last.map(|i: Arc<Instance>| i.to_string()),
                })
            }
        }
    }

    /// Sends a request to one named endpoint, bypassing the balancer: for state bound
    /// to a server (a game session's room, a Seata branch's TC). No retry elsewhere;
    /// [`RpcError::NoEndpoint`] when that endpoint is not alive.
    pub async fn call_to(
        &self,
        endpoint: &InstanceKey,
        payload: Payload,
        timeout: Option<Duration>,
    ) -> Result<Response, RpcError> {
        let _guard = self.begin()?;
        let inner = self.inner();
        let timeout = timeout.unwrap_or(inner.options.request_timeout);
        let Some(entry) = inner.alive.load().get(endpoint).cloned() else {
            return Err(RpcError::NoEndpoint {
                target: format!("{} (endpoint {endpoint})", inner.target),
            });
        };
        let stats = inner.balancer.endpoint(endpoint).map(|e| e.begin());
        let start = Instant::now();
        let result = entry
            .connection
            .call(payload, timeout)
            .instrument(
                tracing::debug_span!("rpc_call_to", target = %inner.target, endpoint = %endpoint),
            )
            .await;
        match (&result, stats) {
            (Ok(_), Some(g)) => g.success(start.elapsed()),
            (Err(RpcError::Timeout { .. }), Some(g)) => {
                inner.count(Counter::Timeouts);
                g.failure();
            }
            (Err(RpcError::MaybeDelivered { .. }), Some(g)) => {
                inner.count(Counter::MaybeDelivered);
                g.failure();
            }
            (Err(_), Some(g)) => g.failure(),
            (_, None) => {}
        }
        result.map(|payload| Response {
            endpoint: entry.instance,
            payload,
        })
    }

    /// Sends the request to every alive endpoint and collects each answer (or error),
    /// each with `timeout` (default [`ClientOptions::request_timeout`]). Empty when
    /// nothing is alive or the client is shutting down.
    pub async fn send_to_all(
        &self,
        payload: Payload,
        timeout: Option<Duration>,
    ) -> Vec<(Arc<Instance>, Result<Payload, RpcError>)> {
        let Ok(_guard) = self.begin() else {
            return Vec::new();
        };
        let inner = self.inner();
        let timeout = timeout.unwrap_or(inner.options.request_timeout);
        let alive = self.alive();
        let members = inner.balancer.snapshot();
        let calls = alive.endpoints().iter().map(|a| {
            let payload = payload.clone();
            let guard = members.endpoint(a.instance.key()).map(|e| e.begin());
            async move {
                let r = a.connection.call(payload, timeout).await;
                drop(guard);
                (a.instance.clone(), r)
            }
        });
        futures_util::future::join_all(calls)
            .instrument(tracing::debug_span!("rpc_send_to_all", target = %inner.target))
            .await
    }

    async fn attempts(
        &self,
        payload: Payload,
        opts: &CallOptions<'_>,
        last: &mut Option<Arc<Instance>>,
        kind: Kind,
    ) -> Result<(Arc<Instance>, Option<Payload>), RpcError> {
        let inner = self.inner();
        crate::payload::check(&payload, inner.options.max_frame_len)?;
        let mut excluded: Vec<InstanceKey> = Vec::new();
        let mut last_failure: Option<String> = None;
        let mut attempts = 0u32;
        while attempts < inner.options.max_attempts.max(1) {
            let req = opts.pick_request().excluding(&excluded);
            let Some(picked) = inner.balancer.pick(&req) else {
                break;
            };
            attempts += 1;
            let (endpoint, guard) = picked.into_parts();
            let entry = inner.alive.load().get(endpoint.key()).cloned();
            let Some(entry) = entry else {
                // The picker is a moment behind the alive set: that endpoint just left.
                excluded.push(endpoint.key().clone());
                last_failure = Some(format!("{endpoint} left the alive set"));
                continue;
            };
            *last = Some(entry.instance.clone());
            let start = Instant::now();
            let result = match kind {
                Kind::Call => entry
                    .connection
                    .request_frame(payload.clone())
                    .await
                    .map(|f| Some(Payload::from_frame(f))),
                Kind::Oneway => entry
                    .connection
                    .oneway_frame(payload.clone())
                    .await
                    .map(|()| None),
            };
            match result {
                Ok(p) => {
                    guard.success(start.elapsed());
                    return Ok((entry.instance, p));
                }
                Err(SendFailure::NotWritten(reason)) => {
                    guard.failure();
                    inner.count(Counter::Retries);
                    tracing::debug!(endpoint = %entry.instance, %reason, "not written; trying another endpoint");
                    excluded.push(endpoint.key().clone());
                    last_failure = Some(format!("{}: {reason}", entry.instance));
                }
                Err(e @ SendFailure::MaybeDelivered(_)) => {
                    guard.failure();
                    inner.count(Counter::MaybeDelivered);
                    return Err(entry.connection.failure_error(e));
                }
            }
        }
        match last_failure {
            Some(last) => Err(RpcError::RetriesExhausted { attempts, last }),
            None => Err(RpcError::NoEndpoint {
                target: inner.target.clone(),
            }),
        }
    }

    /// Stops taking calls, waits up to `deadline` for calls in flight, then closes
    /// every connection and stops following the registry.
    pub async fn shutdown(&self, deadline: Duration) {
        let inner = self.inner();
        inner.closing.store(true, Ordering::Release);
        let until = tokio::time::Instant::now() + deadline;
        loop {
            let idle = inner.idle.notified();
            if inner.in_flight.load(Ordering::Acquire) == 0 {
                break;
            }
            if tokio::time::timeout_at(until, idle).await.is_err() {
                tracing::warn!(
                    in_flight = inner.in_flight.load(Ordering::Acquire),
                    "shutdown deadline passed with calls in flight; closing anyway"
                );
                break;
            }
        }
        inner.shutdown.cancel();
        let follower = self
            .handle
            .follower
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(f) = follower {
            let _ = f.await;
        }
        let tasks: Vec<JoinHandle<()>> = inner
            .state()
            .endpoints
            .values_mut()
            .filter_map(|s| s.task.take())
            .collect();
        for t in tasks {
            let _ = t.await;
        }
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Call,
    Oneway,
}
