//! The running gateway: listeners (TCP, WebSocket, admin HTTP), one task pair per
//! client whatever its transport, one `RpcClient` per backend cluster, and the handler
//! for what backends push.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use meshline::rpc::{InboundRequest, Payload, RpcClient};
use meshline::{Instance, InstanceKey, RegistryService};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_util::sync::CancellationToken;

use super::admission::{Refusal, TokenVerifier};
use super::drain::{self, DrainReport, DrainState};
use super::limits::{Limited, Limits};
use super::metrics::{GatewayMetrics, Pages};
use super::outbound::{Outbound, Pushed};
use super::protect::Protection;
use super::protocol::{self, ClientFrame, GATEWAY_MODULE, op};
use super::queue::{self, LoginQueue, Turn};
use super::route::{self, Identity};
use super::session::{Link, Session, Sessions};
use super::settings::{GatewaySettings, ModuleKind};
use super::transport::{self, ClientReader, ClientWriter, Incoming};
use super::{admin, wire};

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
}

impl Shared {
    fn backends(&self) -> &HashMap<String, RpcClient> {
        static EMPTY: OnceLock<HashMap<String, RpcClient>> = OnceLock::new();
        self.backends
            .get()
            .unwrap_or_else(|| EMPTY.get_or_init(HashMap::new))
    }
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
        self.shared.stop.cancel();
        for s in self.shared.sessions.members("*") {
            if let Some(l) = s.link() {
                l.outbound.close("gateway shutting down");
            }
        }
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

async fn accept_loop(shared: Arc<Shared>, listener: TcpListener, kind: fn(TcpStream) -> Incoming) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shared.stop.cancelled() => return,
            _ = shared.drain.accepting_stopped() => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                // Before anything is spent on the connection.
                if let Err(limited) = shared.limits.check_connect(peer.ip()) {
                    refuse_over_limit(&shared, kind(stream), peer, limited);
                    continue;
                }
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve_client(shared.clone(), kind(stream), peer));
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// AUTH_FAIL: `code text`.
fn fail_frame(r: Refusal, text: &str) -> ClientFrame {
    ClientFrame::new(
        GATEWAY_MODULE,
        op::AUTH_FAIL,
        0,
        Bytes::from(format!("{} {text}", r.code())),
    )
    .with_flags(protocol::RELIABLE)
}

async fn refuse(wr: ClientWriter, r: Refusal, stats: &GatewayStats) {
    refuse_saying(wr, r, &r.to_string(), stats).await
}

async fn refuse_saying(mut wr: ClientWriter, r: Refusal, text: &str, stats: &GatewayStats) {
    stats.refused.fetch_add(1, Ordering::Relaxed);
    let frame = fail_frame(r, text);
    let _ = tokio::time::timeout(Duration::from_millis(500), wr.write(&[frame])).await;
    wr.close(CloseCode::Policy, text).await;
}

/// A connection over a connection-rate limit: told why (AUTH_FAIL, code 10, naming the
/// limit; over WebSocket after the handshake) while a refusal slot is free, else
/// closed at once. Either way nothing else is set up for it.
fn refuse_over_limit(shared: &Arc<Shared>, conn: Incoming, peer: SocketAddr, limited: Limited) {
    tracing::debug!(%peer, %limited, "connection refused");
    let Some(slot) = shared.limits.refusal_slot() else {
        shared.stats.refused.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let shared = shared.clone();
    tokio::spawn(async move {
        let deadline = shared.settings.auth_deadline.min(Duration::from_secs(1));
        if let Ok((mut reader, wr)) = conn
            .open(shared.settings.max_frame, deadline, &shared.settings.id)
            .await
        {
            let text = format!("{}: {limited}", Refusal::RateLimited);
            refuse_saying(wr, Refusal::RateLimited, &text, &shared.stats).await;
            // Read what the client already sent until it closes (bounded): closing a
            // socket with unread data resets it, and the reset can destroy the refusal
            // before the client has read it.
            let _ = tokio::time::timeout(deadline, async {
                while let Some(Ok(_)) = reader.next().await {}
            })
            .await;
        }
        drop(slot);
    });
}

/// Who the first frame proved the client is.
enum Claim {
    /// A verified token: a new session, once the login queue admits it.
    Login(String),
    /// A resumed session.
    Resumed(Arc<Session>),
}

/// Admission: the first frame, within the deadline, must be AUTH or RESUME.
async fn admit(shared: &Arc<Shared>, reader: &mut ClientReader) -> Result<Claim, Refusal> {
    let first = tokio::time::timeout(shared.settings.auth_deadline, reader.next()).await;
    let frame = match first {
        Err(_) => return Err(Refusal::Late),
        Ok(None) | Ok(Some(Err(_))) => return Err(Refusal::Malformed),
        Ok(Some(Ok(f))) => f,
    };
    if frame.module != GATEWAY_MODULE {
        return Err(Refusal::NotAuth);
    }
    let text = std::str::from_utf8(&frame.payload).map_err(|_| Refusal::Malformed)?;
    match frame.opcode {
        op::AUTH => {
            let admitted = shared.verifier.verify(text)?;
            Ok(Claim::Login(admitted.account))
        }
        op::RESUME => {
            let (id, secret) = text.split_once(' ').ok_or(Refusal::Malformed)?;
            // From memory, or from the shared store whichever gateway held it.
            let s = shared.sessions.resume(id, secret).await?;
            tokio::spawn(rebind(shared.clone(), s.clone()));
            Ok(Claim::Resumed(s))
        }
        _ => Err(Refusal::NotAuth),
    }
}

/// Tells every backend a resumed session is bound to that the session is on this
/// gateway now (`cmd=rebind`, see [`wire`]): their pushes and fan-out for it go through
/// this gateway's connection, which carries the command.
async fn rebind(shared: Arc<Shared>, session: Arc<Session>) {
    for (slot, backend) in session.bindings() {
        // Static slots are clusters; dynamic ones `m:<module>`, served by its cluster.
        let cluster = match slot.strip_prefix("m:") {
            Some(m) => match m.parse().ok().and_then(|m| shared.settings.modules.get(&m)) {
                Some(route) => route.cluster.clone(),
                None => continue,
            },
            None => slot.clone(),
        };
        let Some(client) = shared.backends().get(&cluster) else {
            continue;
        };
        let cmd = command("rebind", Bytes::new())
            .with_head(wire::SESSION, session.id.clone())
            .with_head(wire::GATEWAY, shared.settings.id.clone());
        if let Err(e) = client.send_oneway_to(&backend, cmd, None).await {
            tracing::debug!(session = %session.id, %slot, %backend, error = %e, "rebind not sent");
        }
    }
}

/// One client, over either transport: admission, then the read loop here and the
/// write loop in its own task.
async fn serve_client(shared: Arc<Shared>, conn: Incoming, peer: SocketAddr) {
    // Connections still authenticating have their own cap, apart from players.
    let permit = shared.unauthenticated.clone().try_acquire_owned();
    // A WebSocket handshake is part of authenticating: bounded by the auth deadline (the
    // first frame then has its own). A WebSocket client over the cap is refused after
    // its handshake: AUTH_FAIL needs a message to travel in.
    let (mut reader, mut wr) = match conn
        .open(
            shared.settings.max_frame,
            shared.settings.auth_deadline,
            &shared.settings.id,
        )
        .await
    {
        Ok(x) => x,
        Err(e) => {
            tracing::debug!(%peer, error = %e, "client transport not set up");
            return;
        }
    };
    let Ok(permit) = permit else {
        refuse(wr, Refusal::Busy, &shared.stats).await;
        return;
    };
    let claim = match admit(&shared, &mut reader).await {
        Ok(x) => x,
        Err(r) => {
            drop(permit);
            tracing::debug!(%peer, reason = %r, "client refused");
            refuse(wr, r, &shared.stats).await;
            return;
        }
    };
    drop(permit);
    // A new login waits its turn in the login queue; a resume was online already and
    // bypasses it (see `queue`). Held until the connection ends: counted online.
    let (_online, session, resumed) = match claim {
        Claim::Resumed(s) => (shared.queue.bypass(), s, true),
        Claim::Login(account) => {
            match queue::wait_turn(&shared.queue, &mut reader, &mut wr, &shared.stop).await {
                Turn::Admitted(online) => (online, shared.sessions.create(account), false),
                Turn::Full(text) => {
                    tracing::debug!(%peer, %account, "login queue full; refused");
                    refuse_saying(wr, Refusal::Busy, &text, &shared.stats).await;
                    return;
                }
                Turn::Left => {
                    tracing::debug!(%peer, %account, "left the login queue");
                    return;
                }
            }
        }
    };
    shared.stats.admitted.fetch_add(1, Ordering::Relaxed);
    let link = Arc::new(Link {
        outbound: Arc::new(Outbound::new(
            shared.settings.send_queue_soft,
            shared.settings.send_queue_hard,
        )),
        addr: peer,
    });
    if let Some(old) = session.attach(link.clone()) {
        old.outbound.close("session resumed on another connection");
    }
    let ok = format!("{} {} {}", session.id, session.secret(), shared.settings.id);
    link.outbound.push(
        ClientFrame::new(
            GATEWAY_MODULE,
            op::AUTH_OK,
            u32::from(resumed),
            Bytes::from(ok),
        )
        .with_flags(protocol::RELIABLE),
    );
    tracing::debug!(%peer, session = %session.id, account = %session.account, resumed, "client admitted");
    let writer = tokio::spawn(write_client(link.outbound.clone(), wr));
    // Bounded per-client concurrency: at the cap we stop reading, and TCP pushes back.
    let in_flight = Arc::new(Semaphore::new(32));
    // The WebSocket close code, if the connection is still open at the end.
    let mut close = CloseCode::Normal;
    // Created once: the reader stops when the writer's queue closes (overflow, kick,
    // resume elsewhere).
    let queue_closed = link.outbound.closed();
    tokio::pin!(queue_closed);
    // Refused messages of this connection (`limits.kick-after`).
    let mut abuse = shared.limits.abuse_meter();
    loop {
        let next = tokio::select! {
            n = reader.next() => n,
            _ = shared.stop.cancelled() => {
                close = CloseCode::Away;
                break;
            }
            _ = &mut queue_closed => break,
        };
        let frame = match next {
            None => break,
            Some(Err(e)) => {
                tracing::debug!(%peer, error = %e, "bad client frame; closing");
                close = transport::close_code(&e);
                link.outbound.close(format!("protocol error: {e}"));
                break;
            }
            Some(Ok(f)) => f,
        };
        if frame.module == GATEWAY_MODULE {
            if frame.opcode == op::PING {
                link.outbound.push(
                    ClientFrame::new(GATEWAY_MODULE, op::PING, frame.seq, Bytes::new())
                        .with_flags(protocol::REPLY),
                );
            }
            continue;
        }
        if let Err(limited) =
            shared
                .limits
                .check_message(&session.account, frame.module, frame.opcode)
        {
            push(
                &shared,
                &link.outbound,
                ClientFrame::new(
                    frame.module,
                    frame.opcode,
                    frame.seq,
                    Bytes::from(format!("rate limited: {limited}")),
                )
                .with_flags(protocol::REPLY | protocol::RELIABLE | protocol::ERROR),
            );
            if abuse.refused() {
                tracing::info!(%peer, account = %session.account, %limited, "disconnected: over its rate limits");
                kick_after_flush(&link.outbound, "rate limited: sustained abuse").await;
                close = CloseCode::Policy;
                break;
            }
            continue;
        }
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            break;
        };
        let (shared, session, link) = (shared.clone(), session.clone(), link.clone());
        // Drawn here, in the client's order: held messages are replayed in it.
        let ticket = shared.protect.ticket();
        tokio::spawn(async move {
            forward(&shared, &session, &link, frame, ticket).await;
            drop(permit);
        });
    }
    session.detach(&link);
    link.outbound.close("client disconnected");
    if let Ok(wr) = writer.await {
        let reason = link.outbound.closed_reason().unwrap_or_default();
        wr.close(close, &reason).await;
    }
}

/// Sends KICK with `reason` and closes the queue once what is queued before it has been
/// taken by the writer (within 250 ms): a closed queue is not written any more.
async fn kick_after_flush(outbound: &Outbound, reason: &str) {
    outbound.push(
        ClientFrame::new(GATEWAY_MODULE, op::KICK, 0, Bytes::from(reason.to_string()))
            .with_flags(protocol::RELIABLE),
    );
    let _ = tokio::time::timeout(Duration::from_millis(250), async {
        while outbound.queued_bytes() > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    outbound.close(reason);
}

/// Writes the queue to the client until it is closed; hands the writer back so the
/// connection can be closed with the reason.
async fn write_client(outbound: Arc<Outbound>, mut wr: ClientWriter) -> ClientWriter {
    while let Ok(batch) = outbound.next_batch(64 * 1024).await {
        match tokio::time::timeout(Duration::from_secs(10), wr.write(&batch)).await {
            Ok(Ok(())) => {}
            _ => {
                outbound.close("client write failed or stalled");
                break;
            }
        }
    }
    wr
}

async fn forward(shared: &Shared, session: &Session, link: &Link, frame: ClientFrame, ticket: u64) {
    let reply = |flags: u8, payload: Bytes| {
        ClientFrame::new(frame.module, frame.opcode, frame.seq, payload)
            .with_flags(protocol::REPLY | protocol::RELIABLE | flags)
    };
    let Some(route) = shared.settings.modules.get(&frame.module) else {
        link.outbound.push(reply(
            protocol::ERROR,
            Bytes::from(format!("unknown module {}", frame.module)),
        ));
        return;
    };
    let Some(client) = shared.backends().get(&route.cluster) else {
        return;
    };
    // Bulkhead, shedding, breaker: a busy answer at once, without a backend.
    let pass = match shared.protect.admit(route, frame.opcode, client, ticket) {
        Ok(p) => p,
        Err(busy) => {
            return push(
                shared,
                &link.outbound,
                reply(protocol::ERROR, busy.to_string().into()),
            );
        }
    };
    // Only a new static binding consults the backends that take no new sessions:
    // every other message skips this work.
    let refused = if route.kind == ModuleKind::Static
        && route::slot(route).is_some_and(|slot| session.binding(&slot).is_none())
    {
        refused_backends(shared, &route.cluster, client)
    } else {
        Vec::new()
    };
    let who = Identity {
        session,
        gateway: &shared.settings.id,
        addr: link.addr,
    };
    shared.stats.forwarded.fetch_add(1, Ordering::Relaxed);
    let _timer = shared.metrics.time(frame.module);
    // One call per attempt (held while the cluster has no endpoint, then sent).
    let attempt = || route::route(route, client, &frame, &who, &refused);
    match shared.protect.forward(pass, client, attempt).await {
        Ok(answer) => {
            if answer.head.get(wire::NO_REPLY).is_some() {
                return;
            }
            let flags = if answer.head.get(wire::ERROR).is_some() {
                protocol::ERROR
            } else {
                0
            };
            push(shared, &link.outbound, reply(flags, answer.body));
        }
        Err(e) => {
            push(
                shared,
                &link.outbound,
                reply(protocol::ERROR, Bytes::from(e.to_string())),
            );
        }
    }
}

fn push(shared: &Shared, outbound: &Outbound, frame: ClientFrame) {
    match outbound.push(frame) {
        Pushed::Queued => {}
        Pushed::QueuedAfterDropping(n) => {
            shared.stats.dropped.fetch_add(n as u64, Ordering::Relaxed);
        }
        Pushed::Dropped => {
            shared.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
        Pushed::Overflow => {
            shared.stats.overflowed.fetch_add(1, Ordering::Relaxed);
        }
        Pushed::Closed => {}
    }
}

/// Backends of `cluster` that take no new sessions: disabled or overloaded (backend
/// commands), or of another major app version than `gateway.app-version`.
fn refused_backends(shared: &Shared, cluster: &str, client: &RpcClient) -> Vec<InstanceKey> {
    let mut refused: Vec<InstanceKey> = shared
        .refused
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(cluster)
        .map(|s| s.iter().cloned().collect())
        .unwrap_or_default();
    if let Some(ours) = &shared.settings.app_version {
        let major = |v: &str| v.split('.').next().unwrap_or("").trim().to_string();
        let want = major(ours);
        for e in client.alive().endpoints() {
            if let Some(v) = e.instance.metadata().get("version")
                && major(v) != want
            {
                refused.push(e.instance.key().clone());
            }
        }
    }
    refused
}

/// A command a backend pushed (see [`wire`]).
fn backend_command(shared: &Shared, cluster: &str, req: InboundRequest) {
    let head = &req.payload.head;
    let Some(cmd) = head.get(wire::CMD) else {
        tracing::debug!(%cluster, "backend request without a command; ignored");
        return;
    };
    // The sending backend: its connection's label is the instance as the registry
    // listed it.
    let backend = Instance::parse(req.connection.label())
        .ok()
        .map(|i| i.key().clone());
    let frame = || {
        let module = head
            .get(wire::MODULE)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let opcode = head
            .get(wire::OPCODE)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let flags = if head.get(wire::RELIABLE) == Some("1") {
            protocol::RELIABLE
        } else {
            0
        };
        // `Bytes` clone: every member's frame shares the one body.
        ClientFrame::new(module, opcode, 0, req.payload.body.clone()).with_flags(flags)
    };
    let to = || wire::list(head.get(wire::TO));
    match cmd {
        "send" => {
            for sid in to() {
                if let Some(l) = shared.sessions.get(sid).and_then(|s| s.link()) {
                    shared.stats.pushed.fetch_add(1, Ordering::Relaxed);
                    push(shared, &l.outbound, frame());
                }
            }
        }
        "bcast" => {
            shared.stats.fanouts.fetch_add(1, Ordering::Relaxed);
            let group = head.get(wire::GROUP).unwrap_or("*");
            let f = frame();
            for s in shared.sessions.members(group) {
                if let Some(l) = s.link() {
                    shared.stats.pushed.fetch_add(1, Ordering::Relaxed);
                    push(shared, &l.outbound, f.clone());
                }
            }
        }
        "join" | "leave" => {
            let Some(group) = head.get(wire::GROUP) else {
                return;
            };
            for sid in to() {
                if cmd == "join" {
                    shared.sessions.join(sid, group);
                } else {
                    shared.sessions.leave(sid, group);
                }
            }
        }
        "kick" => {
            let reason = head.get(wire::REASON).unwrap_or("kicked").to_string();
            let keep = head.get(wire::KEEP) == Some("1");
            for sid in to() {
                let session = if keep {
                    shared.sessions.get(sid)
                } else {
                    shared.sessions.remove(sid)
                };
                if let Some(l) = session.and_then(|s| s.link()) {
                    l.outbound.push(
                        ClientFrame::new(GATEWAY_MODULE, op::KICK, 0, Bytes::from(reason.clone()))
                            .with_flags(protocol::RELIABLE),
                    );
                    l.outbound.close(format!("kicked: {reason}"));
                }
            }
        }
        "bind" | "unbind" => {
            let Some(backend) = backend else { return };
            for sid in to() {
                let Some(s) = shared.sessions.get(sid) else {
                    continue;
                };
                for m in wire::list(head.get(wire::MODULES)) {
                    let slot = format!("m:{m}");
                    if cmd == "bind" {
                        s.bind(slot, backend.clone());
                    } else {
                        s.unbind(&slot);
                    }
                }
            }
        }
        "state" => {
            let state = String::from_utf8_lossy(&req.payload.body).into_owned();
            for sid in to() {
                if let Some(s) = shared.sessions.get(sid) {
                    s.set_user_state(state.clone());
                }
            }
        }
        "disable" | "enable" | "load" => {
            let Some(backend) = backend else { return };
            let refuse = match cmd {
                "disable" => true,
                "enable" => false,
                _ => {
                    let load = std::str::from_utf8(&req.payload.body)
                        .ok()
                        .and_then(|v| v.trim().parse::<u32>().ok());
                    // Shedding reads every report; new sessions avoid the overloaded.
                    if let Some(l) = load {
                        shared.protect.report_load(cluster, backend.clone(), l);
                    }
                    load.is_some_and(|load| load > 90)
                }
            };
            let mut r = shared.refused.lock().unwrap_or_else(|p| p.into_inner());
            let set = r.entry(cluster.to_string()).or_default();
            if refuse {
                set.insert(backend);
            } else {
                set.remove(&backend);
            }
        }
        other => tracing::debug!(%cluster, cmd = other, "unknown backend command; ignored"),
    }
}

/// Builds a backend command (for backends; see [`wire`]).
pub fn command(cmd: &str, body: impl Into<Bytes>) -> Payload {
    Payload::new(body).with_head(wire::CMD, cmd)
}
