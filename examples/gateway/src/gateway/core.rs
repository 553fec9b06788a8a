//! The running gateway: listeners (TCP, WebSocket, admin HTTP), one task pair per
//! client whatever its transport (see `serve`), one `RpcClient` per backend cluster,
//! and the handler for what backends push (see `commands`).

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use meshline::rpc::{AliveSet, InboundRequest, RpcClient};
use meshline::{Instance, InstanceKey, RegistryService};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

use super::admin;
use super::admission::{Refusal, TokenVerifier};
use super::commands::backend_command;
use super::drain::{self, DrainReport, DrainState};
use super::keys::{self, KeyHomes};
use super::kick::Kick;
use super::limits::Limits;
use super::metrics::{GatewayMetrics, Pages};
use super::protect::Protection;
use super::queue::LoginQueue;
use super::release;
use super::serve::accept_loop;
use super::session::{Session, Sessions};
use super::settings::GatewaySettings;
use super::transport::Incoming;

/// Counters of what the gateway did.
#[derive(Debug, Default)]
pub struct GatewayStats {
    /// Clients admitted (AUTH or RESUME accepted).
    pub admitted: AtomicU64,
    /// Clients refused at admission.
    pub refused: AtomicU64,
    /// Messages forwarded to backends.
    pub forwarded: AtomicU64,
    /// Frames pushed to clients by backends (after fan-out).
    pub pushed: AtomicU64,
    /// Backend fan-out commands received (one per backend send).
    pub fanouts: AtomicU64,
    /// Unreliable frames dropped for slow clients.
    pub dropped: AtomicU64,
    /// Clients disconnected for not keeping up.
    pub overflowed: AtomicU64,
    /// Session bindings released because their backend was gone (the client was sent
    /// `REBOUND`: at once if connected, else before the reply of its next request).
    pub rebound: AtomicU64,
    /// WebSocket connections cut because their handshake did not finish within the auth
    /// deadline (no frame can carry a refusal before it does).
    pub handshake_timeouts: AtomicU64,
    /// Connections that closed before sending a frame (a port scan, a health check, a
    /// client that gave up): nothing to refuse, and not a bad frame.
    pub closed_before_frame: AtomicU64,
    /// Refusals by reason, indexed by code - 1.
    refused_by: [AtomicU64; Refusal::ALL.len()],
}

impl GatewayStats {
    /// Counts a refusal (the total and its reason).
    pub(crate) fn count_refusal(&self, r: Refusal) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        if let Some(c) = self.refused_by.get(usize::from(r.code()) - 1) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Clients refused for `r` so far.
    pub fn refused_for(&self, r: Refusal) -> u64 {
        self.refused_by
            .get(usize::from(r.code()) - 1)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

impl Shared {
    pub(crate) fn backends(&self) -> &HashMap<String, RpcClient> {
        static EMPTY: OnceLock<HashMap<String, RpcClient>> = OnceLock::new();
        self.backends
            .get()
            .unwrap_or_else(|| EMPTY.get_or_init(HashMap::new))
    }

    /// The backends of `cluster` a `disable` or a high `load` took off new sessions.
    pub(crate) fn refused_in(&self, cluster: &str) -> Vec<InstanceKey> {
        self.refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(cluster)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// The next alive set of a backend cluster (`alive`, from its rpc-client) and the
/// gateway it is for: `None` when either is gone (the followers of the alive set
/// then end). Cancel-safe, as `select!` wants: only the wait for a change can be
/// interrupted.
pub(crate) async fn alive_changed(
    alive: &mut watch::Receiver<Arc<AliveSet>>,
    shared: &Weak<Shared>,
) -> Option<(Arc<Shared>, Arc<AliveSet>)> {
    alive.changed().await.ok()?;
    let now = alive.borrow_and_update().clone();
    Some((shared.upgrade()?, now))
}

pub(crate) struct Shared {
    pub settings: GatewaySettings,
    pub sessions: Sessions,
    pub verifier: TokenVerifier,
    pub backends: OnceLock<HashMap<String, RpcClient>>,
    /// Backends that take no new sessions (disabled or overloaded), by cluster.
    pub refused: Mutex<HashMap<String, HashSet<InstanceKey>>>,
    /// Bulkheads, breakers, held requests, reported loads.
    pub protect: Protection,
    pub unauthenticated: Arc<Semaphore>,
    pub stats: GatewayStats,
    pub stop: CancellationToken,
    /// Graceful drain: stops the accept loops, says whether a drain was asked for.
    pub drain: DrainState,
    /// Connection and message rate limits.
    pub limits: Limits,
    /// The login queue.
    pub queue: Arc<LoginQueue>,
    pub metrics: GatewayMetrics,
    /// The last five minutes, a sample a second (the status page's charts).
    pub history: super::history::History,
    /// Where keyed modules' keys live.
    pub keys: KeyHomes,
}

/// A running gateway. Dropping it stops accepting; [`Gateway::shutdown`] also
/// unregisters it and closes every client.
pub struct Gateway {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    ws_addr: Option<SocketAddr>,
    admin_addr: Option<SocketAddr>,
    registry: Arc<dyn RegistryService>,
    registered: Option<(String, Instance)>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("id", &self.shared.settings.id)
            .field("addr", &self.local_addr)
            .field("ws_addr", &self.ws_addr)
            .field("admin_addr", &self.admin_addr)
            .finish()
    }
}

impl Gateway {
    /// Starts a gateway: one client per backend cluster (following `registry`), the
    /// listeners (TCP; WebSocket and admin HTTP when configured), and the registration
    /// under `register_cluster`.
    pub async fn start(
        settings: GatewaySettings,
        registry: Arc<dyn RegistryService>,
    ) -> Result<Gateway, Box<dyn std::error::Error + Send + Sync>> {
        let listener = TcpListener::bind(settings.listen).await?;
        let local_addr = listener.local_addr()?;
        let ws_listener = match settings.ws_listen {
            Some(a) => Some(TcpListener::bind(a).await?),
            None => None,
        };
        let ws_addr = ws_listener.as_ref().map(|l| l.local_addr()).transpose()?;
        let admin_listener = match settings.admin_listen {
            Some(a) => Some(TcpListener::bind(a).await?),
            None => None,
        };
        let admin_addr = admin_listener
            .as_ref()
            .map(|l| l.local_addr())
            .transpose()?;
        // The recorder first: what the parts below record at their start (the drain
        // gauge at 0) must not go to the no-op recorder of a process without one yet.
        let _ = super::metrics::handle();
        let shared = Arc::new(Shared {
            verifier: TokenVerifier::new(settings.secret.as_bytes().to_vec()),
            sessions: Sessions::from_settings(&settings)?,
            backends: OnceLock::new(),
            refused: Mutex::new(HashMap::new()),
            protect: Protection::new(&settings),
            unauthenticated: Arc::new(Semaphore::new(settings.max_unauthenticated.max(1))),
            stats: GatewayStats::default(),
            stop: CancellationToken::new(),
            drain: DrainState::new(&settings.id),
            limits: Limits::new(&settings.limits),
            queue: LoginQueue::new(settings.queue.clone()),
            metrics: GatewayMetrics::new(&settings),
            history: Default::default(),
            keys: KeyHomes::new(&settings),
            settings: settings.clone(),
        });
        // One client per cluster. Their inbound handlers (backend pushes) reach the
        // gateway through a weak handle, so a dropped gateway is not kept alive by them.
        let mut backends = HashMap::new();
        for cluster in settings.clusters() {
            let choice = settings
                .modules
                .values()
                .find(|m| m.cluster == cluster)
                .map(|m| m.choice.clone())
                .unwrap_or_else(|| "RoundRobinLoadBalance".into());
            let weak = Arc::downgrade(&shared);
            let c2 = cluster.clone();
            let client = RpcClient::builder()
                .watch(registry.watch(&cluster).await?, cluster.clone())
                .load_balance_name(&choice)
                .configure(|o| {
                    o.request_timeout = settings.backend_timeout;
                    // A restarted backend is found quickly, within the hold's time.
                    o.backoff_max = settings.protect.reconnect_max;
                })
                .inbound(move |req: InboundRequest| {
                    let weak = weak.clone();
                    let cluster = c2.clone();
                    async move {
                        if let Some(shared) = weak.upgrade() {
                            backend_command(&shared, &cluster, req);
                        }
                        None
                    }
                })
                .build()
                .await?;
            shared
                .protect
                .start_release(&cluster, &client, shared.stop.clone());
            tokio::spawn(keys::follow(
                Arc::downgrade(&shared),
                cluster.clone(),
                client.clone(),
            ));
            tokio::spawn(release::follow(
                Arc::downgrade(&shared),
                cluster.clone(),
                client.clone(),
            ));
            backends.insert(cluster, client);
        }
        let _ = shared.backends.set(backends);
        let s2 = shared.clone();
        tokio::spawn(accept_loop(s2, listener, Incoming::Tcp));
        if let Some(l) = ws_listener {
            tokio::spawn(accept_loop(shared.clone(), l, Incoming::WebSocket));
        }
        if let Some(l) = admin_listener {
            let pages = Pages::new(&shared);
            tokio::spawn(admin::serve(
                l,
                shared.stop.clone(),
                drain::request_token(&shared),
                pages,
            ));
        }
        // Sessions: detached ones expire; with a shared store, changes are written and
        // connected sessions' TTLs refreshed.
        let s3 = shared.clone();
        tokio::spawn(async move { s3.sessions.maintain(&s3.stop).await });
        // Ended sessions, told to the backends that may keep state for them.
        tokio::spawn(super::backend_news::announce_ended(shared.clone()));
        // The history the status page draws: a sample a second.
        tokio::spawn(super::history::sample_until_stopped(shared.clone()));
        // The login queue's admitting task; the limiters forget refilled keys each second.
        tokio::spawn(shared.queue.clone().run(shared.stop.clone()));
        let s4 = shared.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = every.tick() => s4.limits.sweep(),
                    _ = s4.stop.cancelled() => return,
                }
            }
        });
        let registered = match &settings.register_cluster {
            Some(cluster) => {
                let inst = Instance::new(&local_addr.ip().to_string(), local_addr.port())?;
                registry.register(cluster, &inst).await?;
                Some((cluster.clone(), inst))
            }
            None => None,
        };
        tracing::info!(id = %settings.id, addr = %local_addr, ws = ?ws_addr, admin = ?admin_addr, "gateway listening");
        Ok(Gateway {
            shared,
            local_addr,
            ws_addr,
            admin_addr,
            registry,
            registered,
        })
    }

    /// The TCP listening address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The WebSocket listening address (`gateway.ws-listen`), if configured.
    pub fn ws_addr(&self) -> Option<SocketAddr> {
        self.ws_addr
    }

    /// The admin HTTP address (`gateway.admin-listen`: `GET /gateway.html`), if
    /// configured.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// Counters.
    pub fn stats(&self) -> &GatewayStats {
        &self.shared.stats
    }

    /// Sessions held now.
    pub fn sessions(&self) -> usize {
        self.shared.sessions.len()
    }

    /// Session store operations that failed so far (writes are retried; a resume that
    /// could not ask the store was refused).
    pub fn session_store_failures(&self) -> u64 {
        self.shared.sessions.store_failures()
    }

    /// Session `id`, if this gateway holds it.
    pub fn session(&self, id: &str) -> Option<Arc<Session>> {
        self.shared.sessions.get(id)
    }

    /// Where keyed modules' keys live, as this gateway routed them.
    pub fn keys(&self) -> &KeyHomes {
        &self.shared.keys
    }

    /// Backends of `cluster` that take no new sessions after a `disable` or a `load`
    /// over 90 (the `enable` command and lower loads take them off).
    pub fn refused_backends(&self, cluster: &str) -> Vec<meshline::InstanceKey> {
        let mut v = self.shared.refused_in(cluster);
        v.sort();
        v
    }

    /// The rate limiters (refusals by kind, addresses tracked).
    pub fn limits(&self) -> &Limits {
        &self.shared.limits
    }

    /// The login queue (waiting, online, admitted after waiting).
    pub fn login_queue(&self) -> &LoginQueue {
        &self.shared.queue
    }

    /// The backend client of `cluster`.
    pub fn backend(&self, cluster: &str) -> Option<&RpcClient> {
        self.shared.backends().get(cluster)
    }

    /// Drains the gateway (see [`drain`](super::drain)): unregisters, stops accepting,
    /// advises every client to reconnect elsewhere, waits for them to leave (down to
    /// `drain.threshold`, at most `drain.deadline`), closes the rest and flushes the
    /// sessions to the store. Call [`Gateway::shutdown`] after it.
    pub async fn drain(&self) -> DrainReport {
        drain::run(&self.shared, &*self.registry, self.registered.as_ref()).await
    }

    /// Resolves once a drain was asked for on the admin port (`POST /drain`): the
    /// owner of the gateway then runs [`Gateway::drain`].
    pub async fn drain_requested(&self) {
        self.shared.drain.requested().await
    }

    /// Asks for a drain, as `POST /drain` does (it does not run it).
    pub fn request_drain(&self) {
        self.shared.drain.request()
    }

    /// True once a drain has started.
    pub fn is_draining(&self) -> bool {
        self.shared.drain.is_draining()
    }

    /// Bulkheads, breakers and held requests, per module and cluster.
    pub fn protection(&self) -> &Protection {
        &self.shared.protect
    }

    /// Unregisters, stops accepting, closes every client and backend connection.
    pub async fn shutdown(&self) {
        if !self.shared.drain.unregistered()
            && let Some((cluster, inst)) = &self.registered
            && let Err(e) = self.registry.unregister(cluster, inst).await
        {
            tracing::warn!(error = %e, "could not unregister the gateway");
        }
        // Each connection's KICK is queued before the stop: a connection that saw the
        // stop first closed its queue, and the client was left without the reason.
        for s in self.shared.sessions.members("*") {
            if let Some(l) = s.link() {
                l.outbound.kick(Kick::Shutdown, "gateway shutting down");
            }
        }
        self.shared.stop.cancel();
        for c in self.shared.backends().values() {
            c.shutdown(Duration::from_secs(1)).await;
        }
        // Sessions outlive the gateway in a shared store: write their last changes.
        self.shared.sessions.flush().await;
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}
