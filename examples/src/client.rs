//! A small client of the gateway (what the `bot` program and the tests use): connect
//! over TCP or WebSocket, authenticate or resume, send requests and match replies by
//! sequence, receive pushes. The API is the same whatever the transport.

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
    /// The gateway's id.
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
        tokio::spawn(async move {
            loop {
                let f = tokio::select! {
                    next = reader.next() => match next {
                        Some(Ok(f)) => f,
                        _ => break,
                    },
                    _ = stopped.cancelled() => break,
                };
                if f.flags & protocol::REPLY != 0 {
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

fn resume_text(welcome: &Welcome) -> String {
    format!("{} {}", welcome.session, welcome.secret)
}
