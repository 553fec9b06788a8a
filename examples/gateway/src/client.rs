//! A small client of the gateway (what the `bot` program and the tests use): connect
//! over TCP or WebSocket, authenticate or resume, send requests and match replies by
//! sequence, receive pushes. The API is the same whatever the transport.
//!
//! A draining gateway sends `RECONNECT` advice: this client records it
//! ([`GatewayClient::reconnect_advice`], [`GatewayClient::advised`]) instead of passing
//! it on as a push; [`crate::roaming::RoamingClient`] acts on it (moves the session to
//! another gateway at a quiet moment).
//! While the gateway's login queue holds a login, the gateway sends `QUEUE` frames
//! (position, estimated wait) before `AUTH_OK`: the client waits through them, and a
//! [`Connector`] shows the latest one on a watch channel
//! ([`Connector::queue_status`]), e.g. for a "position 8420, about 62 s" screen.
//!
//! Reliable pushes are numbered by the gateway; the client remembers the last number it
//! received, and [`GatewayClient::resume_ticket`] carries it into a resume, so the gateway
//! replays only what this client missed. Other module-0 frames (`KICK`, `REBOUND`,
//! `MOVED`, `GAP`) come out of [`GatewayClient::next_push`] like pushes; the last `KICK`
//! is also kept ([`GatewayClient::kick`]). The protocol itself is in
//! `docs/gateway-protocol.md`.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::gateway::protocol::{self, ClientFrame, GATEWAY_MODULE, op};
use crate::gateway::transport::{self, ClientReader, ClientWriter};

/// The largest frame the client accepts from a gateway.
const MAX_FRAME: usize = 16 << 20;
/// The gateway's first answer comes within this.
const FIRST_ANSWER: Duration = Duration::from_secs(5);
/// While queued, the gateway writes at least every 10 s; silence longer than this
/// means it is gone.
const QUEUE_SILENCE: Duration = Duration::from_secs(30);

/// Where a client stands in a gateway's login queue (a `QUEUE` frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueStatus {
    /// 1 = next.
    pub position: u64,
    /// The gateway's estimate of the wait; `None` when it has none yet.
    pub eta: Option<Duration>,
}

impl QueueStatus {
    /// Parses a QUEUE payload: `position eta_ms`.
    pub fn parse(payload: &[u8]) -> Option<QueueStatus> {
        let text = std::str::from_utf8(payload).ok()?;
        let (position, eta_ms) = text.trim().split_once(' ')?;
        let eta_ms: u64 = eta_ms.parse().ok()?;
        Some(QueueStatus {
            position: position.parse().ok()?,
            eta: (eta_ms > 0).then(|| Duration::from_millis(eta_ms)),
        })
    }
}

#[derive(Debug, Clone)]
enum Target {
    Tcp(SocketAddr),
    Ws(String),
}

/// How to reach a gateway: transport, local address, and where queue positions go.
///
/// ```no_run
/// # async fn f(token: &str) -> Result<(), meshline_example_gateway::client::ClientError> {
/// use meshline_example_gateway::client::Connector;
/// let connector = Connector::tcp("127.0.0.1:7000".parse().unwrap());
/// let mut queue = connector.queue_status();
/// tokio::spawn(async move {
///     while queue.changed().await.is_ok() {
///         if let Some(q) = *queue.borrow() {
///             println!("position {}, about {:?}", q.position, q.eta);
///         }
///     }
/// });
/// let client = connector.auth(token).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Connector {
    target: Target,
    local_ip: Option<IpAddr>,
    queue: watch::Sender<Option<QueueStatus>>,
}

impl Connector {
    /// The gateway's TCP listener.
    pub fn tcp(addr: SocketAddr) -> Connector {
        Self::new(Target::Tcp(addr))
    }

    /// The gateway's WebSocket listener (`ws://host:port/`).
    pub fn ws(url: impl Into<String>) -> Connector {
        Self::new(Target::Ws(url.into()))
    }

    fn new(target: Target) -> Connector {
        Connector {
            target,
            local_ip: None,
            queue: watch::Sender::new(None),
        }
    }

    /// Connects from `ip` (a local address of this host; e.g. any 127.x.y.z on Linux).
    pub fn bind(mut self, ip: IpAddr) -> Connector {
        self.local_ip = Some(ip);
        self
    }

    /// The latest login-queue status of this connector's connections (`None` until a
    /// QUEUE frame came).
    pub fn queue_status(&self) -> watch::Receiver<Option<QueueStatus>> {
        self.queue.subscribe()
    }

    async fn open(&self) -> Result<(ClientReader, ClientWriter), ClientError> {
        Ok(match &self.target {
            Target::Tcp(addr) => transport::connect_tcp(*addr, self.local_ip, MAX_FRAME).await?,
            Target::Ws(url) => transport::connect_ws(url, self.local_ip, MAX_FRAME).await?,
        })
    }

    /// Connects and authenticates with `token` (waiting in the login queue if the
    /// gateway says so).
    pub async fn auth(&self, token: &str) -> Result<GatewayClient, ClientError> {
        let (rd, wr) = self.open().await?;
        GatewayClient::admit(rd, wr, op::AUTH, token.to_string(), &self.queue).await
    }

    /// Connects and resumes session `welcome`.
    pub async fn resume(&self, welcome: &Welcome) -> Result<GatewayClient, ClientError> {
        let (rd, wr) = self.open().await?;
        GatewayClient::admit(rd, wr, op::RESUME, resume_text(welcome), &self.queue).await
    }
}

/// What AUTH_OK said (and, in a [resume ticket](GatewayClient::resume_ticket), the last
/// numbered push received).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    /// The session id.
    pub session: String,
    /// The resume secret.
    pub secret: String,
    /// The gateway's id (the value of its WebSocket `MESHLINE_GW` sticky cookie), so a
    /// client can tell which gateway holds its session and aim reconnects at it.
    pub gateway: String,
    /// The last numbered push received (0: none), sent with a resume: the gateway
    /// replays the kept pushes after it.
    pub last_push: u32,
}

/// Why the client stopped or a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The gateway refused admission.
    #[error("refused: {0}")]
    Refused(String),
    /// The gateway closed the connection.
    #[error("connection closed")]
    Closed,
    /// An error reply.
    #[error("error reply: {0}")]
    Reply(String),
    /// No reply in time.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// Socket error.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// The requests waiting for their replies, by sequence; `None` once the connection has
/// ended. The reader lets every waiting request go when it ends, and a request made
/// after that must fail at once: registered in a map no reader serves, it would wait
/// for a reply that cannot come.
type Waiters = Arc<Mutex<Option<HashMap<u32, oneshot::Sender<ClientFrame>>>>>;

/// How many requests wait for their replies (none once the connection has ended).
fn waiting(waiters: &Waiters) -> usize {
    waiters
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .map_or(0, HashMap::len)
}

/// One connection to a gateway. Dropping it closes the connection.
///
/// Frames are written by a task of the connection's own: [`GatewayClient::send`] queues
/// a frame, and the writer takes everything queued when it runs (after letting the
/// tasks woken with it queue theirs) and writes it at once, one system call over TCP. A
/// game client with several requests in flight pays one write for several of them.
pub struct GatewayClient {
    /// Frames to the writer task.
    outgoing: mpsc::UnboundedSender<ClientFrame>,
    waiters: Waiters,
    next_seq: AtomicU32,
    pushes: tokio::sync::Mutex<mpsc::UnboundedReceiver<ClientFrame>>,
    /// Stops the reading task, which holds the WebSocket's other half.
    _reading: DropGuard,
    /// The latest `RECONNECT` advice (its reason), if any.
    advice: tokio::sync::watch::Receiver<Option<String>>,
    /// Cancelled when the connection has ended (the reading task stopped).
    ended: CancellationToken,
    /// The last numbered push received.
    last_push: Arc<AtomicU32>,
    /// The last KICK: code and text.
    kick: Arc<Mutex<Option<(u16, String)>>>,
    /// What the gateway answered at admission.
    pub welcome: Welcome,
    /// The last QUEUE status before admission (`None`: admitted without waiting).
    pub queued: Option<QueueStatus>,
}

impl std::fmt::Debug for GatewayClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayClient")
            .field("welcome", &self.welcome)
            .finish_non_exhaustive()
    }
}

impl GatewayClient {
    /// Connects over TCP and authenticates with `token` (see [`Connector`] for more
    /// choices).
    pub async fn auth(addr: SocketAddr, token: &str) -> Result<GatewayClient, ClientError> {
        Connector::tcp(addr).auth(token).await
    }

    /// Connects over TCP and resumes session `welcome`.
    pub async fn resume(addr: SocketAddr, welcome: &Welcome) -> Result<GatewayClient, ClientError> {
        Connector::tcp(addr).resume(welcome).await
    }

    /// Connects to the gateway's WebSocket listener (`url`: `ws://host:port/`) and
    /// authenticates with `token`.
    pub async fn auth_ws(url: &str, token: &str) -> Result<GatewayClient, ClientError> {
        Connector::ws(url).auth(token).await
    }

    /// Connects to the gateway's WebSocket listener and resumes session `welcome`.
    pub async fn resume_ws(url: &str, welcome: &Welcome) -> Result<GatewayClient, ClientError> {
        Connector::ws(url).resume(welcome).await
    }

    async fn admit(
        mut reader: ClientReader,
        mut wr: ClientWriter,
        opcode: u16,
        text: String,
        queue: &watch::Sender<Option<QueueStatus>>,
    ) -> Result<GatewayClient, ClientError> {
        wr.write(&[ClientFrame::new(GATEWAY_MODULE, opcode, 0, text)])
            .await?;
        // AUTH_OK or AUTH_FAIL, after any number of QUEUE frames.
        let mut queued = None;
        let first = loop {
            let limit = if queued.is_some() {
                QUEUE_SILENCE
            } else {
                FIRST_ANSWER
            };
            let f = match tokio::time::timeout(limit, reader.next()).await {
                Ok(Some(Ok(f))) => f,
                Ok(_) => return Err(ClientError::Closed),
                Err(_) => return Err(ClientError::Timeout(limit)),
            };
            if f.module == GATEWAY_MODULE && f.opcode == op::QUEUE {
                if let Some(status) = QueueStatus::parse(&f.payload) {
                    queued = Some(status);
                    queue.send_replace(Some(status));
                }
                continue;
            }
            break f;
        };
        let text = String::from_utf8_lossy(&first.payload).into_owned();
        if first.module != GATEWAY_MODULE || first.opcode != op::AUTH_OK {
            return Err(ClientError::Refused(text));
        }
        let mut parts = text.split(' ');
        let welcome = Welcome {
            session: parts.next().unwrap_or("").to_string(),
            secret: parts.next().unwrap_or("").to_string(),
            gateway: parts.next().unwrap_or("").to_string(),
            last_push: 0,
        };
        let last_push = Arc::new(AtomicU32::new(0));
        let kick: Arc<Mutex<Option<(u16, String)>>> = Arc::default();
        let (seen, kicked) = (last_push.clone(), kick.clone());
        let waiters: Waiters = Arc::new(Mutex::new(Some(HashMap::new())));
        let (tx, rx) = mpsc::unbounded_channel();
        let w2 = waiters.clone();
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let (advice_tx, advice) = tokio::sync::watch::channel(None);
        let ended = CancellationToken::new();
        let ending = ended.clone().drop_guard();
        tokio::spawn(async move {
            let _ending = ending;
            loop {
                let f = tokio::select! {
                    next = reader.next() => match next {
                        Some(Ok(f)) => f,
                        _ => break,
                    },
                    _ = stopped.cancelled() => break,
                };
                if f.flags & protocol::REPLY == 0
                    && f.is_reliable()
                    && f.seq != 0
                    && !(f.module == GATEWAY_MODULE && f.opcode == op::REBOUND)
                {
                    seen.store(f.seq, Ordering::Relaxed);
                }
                if f.module == GATEWAY_MODULE && f.opcode == op::KICK {
                    *kicked.lock().unwrap_or_else(|p| p.into_inner()) =
                        crate::gateway::kick::split_coded(&f.payload);
                }
                if f.module == GATEWAY_MODULE && f.opcode == op::RECONNECT {
                    let reason = String::from_utf8_lossy(&f.payload).into_owned();
                    advice_tx.send_replace(Some(reason));
                } else if f.flags & protocol::REPLY != 0 {
                    let waiting = w2
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .as_mut()
                        .and_then(|w| w.remove(&f.seq));
                    if let Some(w) = waiting {
                        let _ = w.send(f);
                    }
                } else if tx.send(f).is_err() {
                    break;
                }
            }
            *w2.lock().unwrap_or_else(|p| p.into_inner()) = None;
        });
        let (outgoing, to_write) = mpsc::unbounded_channel();
        tokio::spawn(write_frames(wr, to_write, waiters.clone()));
        Ok(GatewayClient {
            outgoing,
            waiters,
            next_seq: AtomicU32::new(1),
            pushes: tokio::sync::Mutex::new(rx),
            _reading: stop.drop_guard(),
            advice,
            ended,
            last_push,
            kick,
            welcome,
            queued,
        })
    }

    /// Sends a request and waits for its reply's payload.
    pub async fn request(
        &self,
        module: u16,
        opcode: u16,
        payload: impl Into<Bytes>,
    ) -> Result<Bytes, ClientError> {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        match self
            .waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            Some(waiting) => waiting.insert(seq, tx),
            None => return Err(ClientError::Closed),
        };
        self.send(ClientFrame::new(module, opcode, seq, payload).with_flags(protocol::RELIABLE))
            .await?;
        let limit = Duration::from_secs(10);
        match tokio::time::timeout(limit, rx).await {
            Ok(Ok(f)) if f.flags & protocol::ERROR != 0 => Err(ClientError::Reply(
                String::from_utf8_lossy(&f.payload).into_owned(),
            )),
            Ok(Ok(f)) => Ok(f.payload),
            Ok(Err(_)) => Err(ClientError::Closed),
            Err(_) => {
                if let Some(waiting) = self
                    .waiters
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .as_mut()
                {
                    waiting.remove(&seq);
                }
                Err(ClientError::Timeout(limit))
            }
        }
    }

    /// Sends a raw frame: queues it for the connection's writer (frames go out in the
    /// order they were sent). [`ClientError::Closed`] once the connection has ended; a
    /// frame the writer then fails to write shows as its reply never coming (requests
    /// fail with [`ClientError::Closed`] when the connection ends).
    pub async fn send(&self, frame: ClientFrame) -> Result<(), ClientError> {
        self.outgoing.send(frame).map_err(|_| ClientError::Closed)
    }

    /// The next push (a frame that is not a reply), within `limit`.
    pub async fn next_push(&self, limit: Duration) -> Option<ClientFrame> {
        let mut rx = self.pushes.lock().await;
        tokio::time::timeout(limit, rx.recv()).await.ok().flatten()
    }
}

impl GatewayClient {
    /// The id of the gateway holding this connection (from AUTH_OK).
    pub fn gateway_id(&self) -> &str {
        &self.welcome.gateway
    }

    /// The reason of the gateway's `RECONNECT` advice, once it sent one.
    pub fn reconnect_advice(&self) -> Option<String> {
        self.advice.borrow().clone()
    }

    /// Waits for `RECONNECT` advice: `Some(reason)`, or `None` when the connection
    /// ends without any.
    pub async fn advised(&self) -> Option<String> {
        let mut rx = self.advice.clone();
        tokio::select! {
            r = rx.wait_for(Option::is_some) => r.ok().and_then(|r| r.clone()),
            _ = self.ended.cancelled() => self.reconnect_advice(),
        }
    }

    /// Requests sent and not answered yet.
    pub fn in_flight(&self) -> usize {
        waiting(&self.waiters)
    }

    /// True once the connection has ended.
    pub fn is_closed(&self) -> bool {
        self.ended.is_cancelled()
    }

    /// Resolves when the connection has ended.
    pub async fn closed(&self) {
        self.ended.cancelled().await
    }

    /// The last numbered push received (0: none yet).
    pub fn last_push(&self) -> u32 {
        self.last_push.load(Ordering::Relaxed)
    }

    /// What a resume of this session needs: the welcome with the last numbered push
    /// received.
    pub fn resume_ticket(&self) -> Welcome {
        Welcome {
            last_push: self.last_push(),
            ..self.welcome.clone()
        }
    }

    /// The code and text of the `KICK` the gateway sent, if it sent one.
    pub fn kick(&self) -> Option<(u16, String)> {
        self.kick.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Frames taken from the queue per write, at most.
const WRITE_BATCH: usize = 256;

/// The connection's writer: waits for a frame; when other requests are in flight, lets
/// the other ready tasks run once (they may queue more: replies to several requests
/// arrive together and wake their senders together); then writes everything queued in
/// one go. Ends when the client is dropped (the queue closes) or a write fails, and the
/// connection's write side with it.
async fn write_frames(
    mut wr: ClientWriter,
    mut queue: mpsc::UnboundedReceiver<ClientFrame>,
    waiters: Waiters,
) {
    let mut batch = Vec::new();
    while let Some(first) = queue.recv().await {
        batch.push(first);
        if waiting(&waiters) > 1 {
            tokio::task::yield_now().await;
        }
        while batch.len() < WRITE_BATCH {
            match queue.try_recv() {
                Ok(f) => batch.push(f),
                Err(_) => break,
            }
        }
        if let Err(e) = wr.write(&batch).await {
            tracing::debug!(error = %e, "gateway client: write failed; closing");
            break;
        }
        batch.clear();
    }
}

fn resume_text(welcome: &Welcome) -> String {
    format!(
        "{} {} {}",
        welcome.session, welcome.secret, welcome.last_push
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_status_parses() {
        assert_eq!(
            QueueStatus::parse(b"8420 62000"),
            Some(QueueStatus {
                position: 8420,
                eta: Some(Duration::from_secs(62))
            })
        );
        assert_eq!(QueueStatus::parse(b"3 0").unwrap().eta, None);
        assert_eq!(QueueStatus::parse(b"3"), None);
        assert_eq!(QueueStatus::parse(b"x 1"), None);
    }
}
