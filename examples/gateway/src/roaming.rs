//! A gateway client that follows `RECONNECT` advice: when its gateway drains (or the
//! connection drops), it moves its session to another gateway, transparently to the
//! caller where that is safe.
//!
//! How a move goes:
//!
//! 1. the advice arrives (or the connection ends);
//! 2. **quiet moment**: new requests wait (they are not sent to the draining gateway),
//!    and the client waits until none of its own requests is in flight, at most
//!    [`RoamOptions::quiet_wait`]. Requests already sent are answered by the draining
//!    gateway, which keeps serving until its drain deadline;
//! 3. it asks [`Gateways`] for candidates (for example the registry's `gateway`
//!    cluster, which a draining gateway has already left), skipping the gateway it
//!    leaves, and RESUMEs its session on one of them (any gateway sharing the Redis
//!    session store accepts it). When a resume is refused as unknown (the memory session
//!    store keeps sessions on their own gateway) and a [`TokenSource`] was given, it
//!    authenticates again instead: a *new* session, whose bindings and groups are gone.
//!    Candidates are retried with jittered backoff for at most
//!    [`RoamOptions::give_up_after`];
//! 4. waiting requests are released to the new connection.
//!
//! What a caller is guaranteed: **every request is sent at most once and gets exactly
//! one outcome.** A request is never re-sent (a gateway request may not be idempotent):
//! one sent before the move is answered by the old gateway, or fails with
//! [`ClientError::Closed`] if that connection ends first (it may have been executed);
//! one made during the move waits and is sent once, on the new connection. With a drain
//! deadline longer than the quiet wait, no request fails at all.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use meshline::RegistryService;
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::client::{ClientError, GatewayClient};
use crate::gateway::admission::Refusal;
use crate::gateway::protocol::ClientFrame;

type Candidates = Pin<Box<dyn Future<Output = Vec<SocketAddr>> + Send>>;

/// Where the other gateways are: a function returning candidate addresses, asked at
/// each move.
#[derive(Clone)]
pub struct Gateways(Arc<dyn Fn() -> Candidates + Send + Sync>);

impl std::fmt::Debug for Gateways {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Gateways(..)")
    }
}

impl Gateways {
    /// A fixed list.
    pub fn fixed(addrs: Vec<SocketAddr>) -> Gateways {
        let addrs = Arc::new(addrs);
        Gateways(Arc::new(move || {
            let a = addrs.clone();
            Box::pin(async move { a.to_vec() })
        }))
    }

    /// The instances registered under `cluster` (where gateways register themselves,
    /// `gateway.register-cluster`), looked up at each move.
    pub fn registry(registry: Arc<dyn RegistryService>, cluster: &str) -> Gateways {
        let cluster = cluster.to_string();
        Gateways(Arc::new(move || {
            let (r, c) = (registry.clone(), cluster.clone());
            Box::pin(async move {
                match r.lookup(&c).await {
                    Ok(list) => list.iter().filter_map(|i| i.socket_addr()).collect(),
                    Err(e) => {
                        tracing::debug!(cluster = %c, error = %e, "gateway lookup failed");
                        Vec::new()
                    }
                }
            })
        }))
    }

    /// Any async function returning the candidates.
    pub fn from_fn<F, Fut>(f: F) -> Gateways
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<SocketAddr>> + Send + 'static,
    {
        Gateways(Arc::new(move || Box::pin(f())))
    }
}

/// Mints a fresh token when a session cannot be resumed (tokens are single use).
pub type TokenSource = Arc<dyn Fn() -> String + Send + Sync>;

/// How the client connects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The gateways' TCP listeners.
    Tcp,
    /// The gateways' WebSocket listeners (`ws://<addr>/`).
    WebSocket,
}

/// Knobs of a [`RoamingClient`].
#[derive(Debug, Clone)]
pub struct RoamOptions {
    /// How the client connects; candidate addresses are of that listener.
    pub via: Via,
    /// Longest wait for the client's own requests to finish before moving.
    pub quiet_wait: Duration,
    /// Longest time spent finding a gateway that takes the session.
    pub give_up_after: Duration,
}

impl Default for RoamOptions {
    fn default() -> Self {
        RoamOptions {
            via: Via::Tcp,
            quiet_wait: Duration::from_secs(2),
            give_up_after: Duration::from_secs(30),
        }
    }
}

struct Inner {
    /// The connection and the address it went to.
    current: Mutex<(Arc<GatewayClient>, SocketAddr)>,
    /// True while moving: new requests wait.
    moving: watch::Sender<bool>,
    /// Requests of ours in flight.
    in_flight: AtomicUsize,
    quiet: tokio::sync::Notify,
    gateways: Gateways,
    tokens: Option<TokenSource>,
    options: RoamOptions,
    moves: AtomicU64,
    /// No gateway took the session within `give_up_after`.
    gave_up: AtomicBool,
}

impl Inner {
    fn current(&self) -> (Arc<GatewayClient>, SocketAddr) {
        let c = self.current.lock().unwrap_or_else(|p| p.into_inner());
        (c.0.clone(), c.1)
    }
}

/// Counts a request in flight while it lives.
struct InFlight<'a>(&'a Inner);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.quiet.notify_waiters();
        }
    }
}

/// A gateway client that moves its session to another gateway on `RECONNECT` advice
/// (see the module docs). Dropping it closes the connection.
pub struct RoamingClient {
    inner: Arc<Inner>,
    _mover: DropGuard,
}

impl std::fmt::Debug for RoamingClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoamingClient")
            .field("welcome", &self.inner.current().0.welcome)
            .finish_non_exhaustive()
    }
}

impl RoamingClient {
    /// Wraps `client`, connected to `addr`; later gateways come from `gateways`.
    /// `tokens`: how to authenticate again when a session cannot be resumed elsewhere
    /// (`None`: the move fails then).
    pub fn new(
        client: GatewayClient,
        addr: SocketAddr,
        gateways: Gateways,
        tokens: Option<TokenSource>,
        options: RoamOptions,
    ) -> RoamingClient {
        let inner = Arc::new(Inner {
            current: Mutex::new((Arc::new(client), addr)),
            moving: watch::channel(false).0,
            in_flight: AtomicUsize::new(0),
            quiet: tokio::sync::Notify::new(),
            gateways,
            tokens,
            options,
            moves: AtomicU64::new(0),
            gave_up: AtomicBool::new(false),
        });
        let stop = CancellationToken::new();
        tokio::spawn(roam(inner.clone(), stop.clone()));
        RoamingClient {
            inner,
            _mover: stop.drop_guard(),
        }
    }

    /// Authenticates at `addr` with a token from `tokens` and wraps the connection.
    pub async fn connect(
        addr: SocketAddr,
        gateways: Gateways,
        tokens: TokenSource,
        options: RoamOptions,
    ) -> Result<RoamingClient, ClientError> {
        let client = auth(options.via, addr, &tokens()).await?;
        Ok(RoamingClient::new(
            client,
            addr,
            gateways,
            Some(tokens),
            options,
        ))
    }

    /// The connection in use now (its `welcome` names the session and the gateway).
    pub fn current(&self) -> Arc<GatewayClient> {
        self.inner.current().0.clone()
    }

    /// The address of the gateway in use now.
    pub fn gateway_addr(&self) -> SocketAddr {
        self.inner.current().1
    }

    /// Moves made so far (successful changes of connection).
    pub fn moves(&self) -> u64 {
        self.inner.moves.load(Ordering::Relaxed)
    }

    /// True when a move failed (no gateway took the session in time): the client no
    /// longer moves, and its requests fail with [`ClientError::Closed`].
    pub fn gave_up(&self) -> bool {
        self.inner.gave_up.load(Ordering::SeqCst)
    }

    /// Sends a request on the current connection and waits for its reply; during a
    /// move, waits for the new connection first. Never re-sent (see the module docs).
    pub async fn request(
        &self,
        module: u16,
        opcode: u16,
        payload: impl Into<Bytes>,
    ) -> Result<Bytes, ClientError> {
        let payload = payload.into();
        let inner = &*self.inner;
        let mut moving = inner.moving.subscribe();
        let _counted = loop {
            // Bounded: a move ends within quiet_wait + give_up_after.
            if moving.wait_for(|m| !*m).await.is_err() {
                return Err(ClientError::Closed);
            }
            inner.in_flight.fetch_add(1, Ordering::SeqCst);
            let guard = InFlight(inner);
            if !*inner.moving.borrow() {
                break guard;
            }
            // A move began between the check and the count: wait for it.
        };
        let (client, _) = inner.current();
        client.request(module, opcode, payload).await
    }

    /// Sends a raw frame on the current connection.
    pub async fn send(&self, frame: ClientFrame) -> Result<(), ClientError> {
        self.current().send(frame).await
    }

    /// The next push within `limit`, from whichever connection is current (a move
    /// during the wait switches to the new connection).
    pub async fn next_push(&self, limit: Duration) -> Option<ClientFrame> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut moving = self.inner.moving.subscribe();
        loop {
            let client = self.current();
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            tokio::select! {
                f = client.next_push(left) => return f,
                changed = moving.changed() => {
                    if changed.is_err() || tokio::time::Instant::now() >= deadline {
                        return None;
                    }
                }
            }
        }
    }
}

async fn auth(via: Via, addr: SocketAddr, token: &str) -> Result<GatewayClient, ClientError> {
    match via {
        Via::Tcp => GatewayClient::auth(addr, token).await,
        Via::WebSocket => GatewayClient::auth_ws(&format!("ws://{addr}/"), token).await,
    }
}

async fn resume(
    via: Via,
    addr: SocketAddr,
    welcome: &crate::client::Welcome,
) -> Result<GatewayClient, ClientError> {
    match via {
        Via::Tcp => GatewayClient::resume(addr, welcome).await,
        Via::WebSocket => GatewayClient::resume_ws(&format!("ws://{addr}/"), welcome).await,
    }
}

/// The refusal a `Refused` error carries (`code text`).
fn refusal(e: &ClientError) -> Option<Refusal> {
    match e {
        ClientError::Refused(text) => text
            .split(' ')
            .next()
            .and_then(|c| c.parse().ok())
            .and_then(Refusal::from_code),
        _ => None,
    }
}

/// The mover: waits for advice (or the end of the connection), then moves.
async fn roam(inner: Arc<Inner>, stop: CancellationToken) {
    loop {
        let (client, addr) = inner.current();
        let advice = tokio::select! {
            a = client.advised() => a,
            _ = stop.cancelled() => return,
        };
        tracing::debug!(gateway = %client.welcome.gateway, ?advice, "leaving the gateway");
        inner.moving.send_replace(true);
        // The quiet moment: our requests in flight are answered where they were sent.
        let quiet = async {
            loop {
                let notified = inner.quiet.notified();
                if inner.in_flight.load(Ordering::SeqCst) == 0 {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(inner.options.quiet_wait, quiet)
            .await
            .is_err()
        {
            tracing::debug!("no quiet moment in time; moving with requests in flight");
        }
        // After advice the old gateway is avoided; after a plain disconnect it is a
        // candidate like any other.
        let avoid = advice.is_some().then_some(addr);
        let moved = tokio::select! {
            m = move_session(&inner, &client, avoid) => m,
            _ = stop.cancelled() => return,
        };
        match moved {
            Ok((next, at)) => {
                tracing::debug!(from = %client.welcome.gateway, to = %next.welcome.gateway,
                    session = %next.welcome.session, "moved");
                *inner.current.lock().unwrap_or_else(|p| p.into_inner()) = (Arc::new(next), at);
                inner.moves.fetch_add(1, Ordering::Relaxed);
                inner.moving.send_replace(false);
            }
            Err(e) => {
                tracing::warn!(error = %e, "no gateway took the session; the client is closed");
                // Requests go to the closed connection and fail with `Closed`.
                inner.gave_up.store(true, Ordering::SeqCst);
                inner.moving.send_replace(false);
                return;
            }
        }
    }
}

/// Resumes (or re-authenticates) on a candidate other than `avoid`, retrying with
/// jittered backoff up to `give_up_after`.
async fn move_session(
    inner: &Inner,
    from: &GatewayClient,
    avoid: Option<SocketAddr>,
) -> Result<(GatewayClient, SocketAddr), ClientError> {
    let give_up = tokio::time::Instant::now() + inner.options.give_up_after;
    let mut delay = Duration::from_millis(50);
    let mut last = ClientError::Closed;
    loop {
        let mut candidates = (inner.gateways.0)().await;
        candidates.retain(|a| Some(*a) != avoid);
        fastrand::shuffle(&mut candidates);
        for addr in candidates {
            match resume(inner.options.via, addr, &from.resume_ticket()).await {
                Ok(c) => return Ok((c, addr)),
                Err(e) => {
                    let unknown = refusal(&e) == Some(Refusal::BadResume);
                    match &inner.tokens {
                        Some(tokens) if unknown => {
                            tracing::debug!(%addr, "session unknown there; authenticating again");
                            match auth(inner.options.via, addr, &tokens()).await {
                                Ok(c) => return Ok((c, addr)),
                                Err(e) => last = e,
                            }
                        }
                        _ => last = e,
                    }
                }
            }
        }
        let now = tokio::time::Instant::now();
        if now >= give_up {
            return Err(last);
        }
        let wait = Duration::from_micros(fastrand::u64(0..=delay.as_micros() as u64));
        tokio::time::sleep(wait.min(give_up - now)).await;
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}
