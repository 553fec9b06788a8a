//! A small client of the gateway (what the `bot` program and the tests use): connect
//! over TCP or WebSocket, authenticate or resume, send requests and match replies by
//! sequence, receive pushes. The API is the same whatever the transport.
//!
//! A draining gateway sends `RECONNECT` advice: this client records it
//! ([`GatewayClient::reconnect_advice`], [`GatewayClient::advised`]) instead of passing
//! it on as a push; [`crate::roaming::RoamingClient`] acts on it (moves the session to
//! another gateway at a quiet moment).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::gateway::protocol::{self, ClientFrame, GATEWAY_MODULE, op};
use crate::gateway::transport::{self, ClientReader, ClientWriter};

/// The largest frame the client accepts from a gateway.
const MAX_FRAME: usize = 16 << 20;

/// What AUTH_OK said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    /// The session id.
    pub session: String,
    /// The resume secret.
    pub secret: String,
    /// The gateway's id (the value of its WebSocket `MESHLINE_GW` sticky cookie), so a
    /// client can tell which gateway holds its session and aim reconnects at it.
    pub gateway: String,
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

type Waiters = Arc<Mutex<HashMap<u32, oneshot::Sender<ClientFrame>>>>;

/// One connection to a gateway. Dropping it closes the connection.
pub struct GatewayClient {
    writer: tokio::sync::Mutex<ClientWriter>,
    waiters: Waiters,
    next_seq: AtomicU32,
    pushes: tokio::sync::Mutex<mpsc::UnboundedReceiver<ClientFrame>>,
    /// Stops the reading task, which holds the WebSocket's other half.
    _reading: DropGuard,
    /// The latest `RECONNECT` advice (its reason), if any.
    advice: tokio::sync::watch::Receiver<Option<String>>,
    /// Cancelled when the connection has ended (the reading task stopped).
    ended: CancellationToken,
    /// What the gateway answered at admission.
    pub welcome: Welcome,
}

impl std::fmt::Debug for GatewayClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayClient")
            .field("welcome", &self.welcome)
            .finish_non_exhaustive()
    }
}

impl GatewayClient {
    /// Connects over TCP and authenticates with `token`.
    pub async fn auth(addr: SocketAddr, token: &str) -> Result<GatewayClient, ClientError> {
        let (rd, wr) = transport::connect_tcp(addr, MAX_FRAME).await?;
        Self::admit(rd, wr, op::AUTH, token.to_string()).await
    }

    /// Connects over TCP and resumes session `welcome`.
    pub async fn resume(addr: SocketAddr, welcome: &Welcome) -> Result<GatewayClient, ClientError> {
        let (rd, wr) = transport::connect_tcp(addr, MAX_FRAME).await?;
        Self::admit(rd, wr, op::RESUME, resume_text(welcome)).await
    }

    /// Connects to the gateway's WebSocket listener (`url`: `ws://host:port/`) and
    /// authenticates with `token`.
    pub async fn auth_ws(url: &str, token: &str) -> Result<GatewayClient, ClientError> {
        let (rd, wr) = transport::connect_ws(url, MAX_FRAME).await?;
        Self::admit(rd, wr, op::AUTH, token.to_string()).await
    }

    /// Connects to the gateway's WebSocket listener and resumes session `welcome`.
    pub async fn resume_ws(url: &str, welcome: &Welcome) -> Result<GatewayClient, ClientError> {
        let (rd, wr) = transport::connect_ws(url, MAX_FRAME).await?;
        Self::admit(rd, wr, op::RESUME, resume_text(welcome)).await
    }

    async fn admit(
        mut reader: ClientReader,
        mut wr: ClientWriter,
        opcode: u16,
        text: String,
    ) -> Result<GatewayClient, ClientError> {
        wr.write(&[ClientFrame::new(GATEWAY_MODULE, opcode, 0, text)])
            .await?;
        let first = match tokio::time::timeout(Duration::from_secs(5), reader.next()).await {
            Ok(Some(Ok(f))) => f,
            Ok(_) => return Err(ClientError::Closed),
            Err(_) => return Err(ClientError::Timeout(Duration::from_secs(5))),
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
        };
        let waiters: Waiters = Arc::default();
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
                if f.module == GATEWAY_MODULE && f.opcode == op::RECONNECT {
                    let reason = String::from_utf8_lossy(&f.payload).into_owned();
                    advice_tx.send_replace(Some(reason));
                } else if f.flags & protocol::REPLY != 0 {
                    if let Some(w) = w2.lock().unwrap_or_else(|p| p.into_inner()).remove(&f.seq) {
                        let _ = w.send(f);
                    }
                } else if tx.send(f).is_err() {
                    break;
                }
            }
            w2.lock().unwrap_or_else(|p| p.into_inner()).clear();
        });
        Ok(GatewayClient {
            writer: tokio::sync::Mutex::new(wr),
            waiters,
            next_seq: AtomicU32::new(1),
            pushes: tokio::sync::Mutex::new(rx),
            _reading: stop.drop_guard(),
            advice,
            ended,
            welcome,
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
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(seq, tx);
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
                self.waiters
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&seq);
                Err(ClientError::Timeout(limit))
            }
        }
    }

    /// Sends a raw frame.
    pub async fn send(&self, frame: ClientFrame) -> Result<(), ClientError> {
        self.writer
            .lock()
            .await
            .write(&[frame])
            .await
            .map_err(ClientError::Io)
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
        self.waiters.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// True once the connection has ended.
    pub fn is_closed(&self) -> bool {
        self.ended.is_cancelled()
    }

    /// Resolves when the connection has ended.
    pub async fn closed(&self) {
        self.ended.cancelled().await
    }
}

fn resume_text(welcome: &Welcome) -> String {
    format!("{} {}", welcome.session, welcome.secret)
}
