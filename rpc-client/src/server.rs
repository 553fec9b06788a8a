//! A small server speaking the same frames: what `tc-server`, the tests and the bench
//! run on the other end of an `RpcClient`.
//!
//! It accepts connections, answers PINGs with PONGs, hands every request to an
//! [`InboundHandler`] and sends the handler's answer back with the request's id, closes
//! connections that stay silent past `read_idle` (Seata's TC: 15 s), and can push
//! requests to connected clients ([`Server::connections`], then
//! [`Connection::call`]) the way a TC sends a branch commit to an RM.
//!
//! It is deliberately not a framework: no routing, no registration policy. Those live
//! in the handler (see `message::register_reply` for the Seata registration answer).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::codec::{CODEC_SEATA, DEFAULT_MAX_FRAME_LEN};
use crate::connection::{ConnConfig, Connection, InboundHandler};

/// Settings of a [`Server`].
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest frame accepted or written (default 8 MiB).
    pub max_frame_len: usize,
    /// Close a connection that sent nothing for this long (default 15 s, as a Seata TC;
    /// `None` disables).
    pub read_idle: Option<Duration>,
    /// Per-connection write queue capacity (default 1024).
    pub queue_capacity: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_frame_len: DEFAULT_MAX_FRAME_LEN,
            read_idle: Some(Duration::from_secs(15)),
            queue_capacity: 1024,
        }
    }
}

/// A running server. Dropping it does not stop it; call [`shutdown`](Server::shutdown)
/// or [`kill`](Server::kill).
pub struct Server {
    local_addr: SocketAddr,
    accept: JoinHandle<()>,
    connections: Arc<Mutex<Vec<Connection>>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.local_addr)
            .field("connections", &self.connections().len())
            .finish()
    }
}

impl Server {
    /// Binds `addr` (port 0 picks a free port) with default settings and starts
    /// accepting.
    pub async fn bind(addr: SocketAddr, handler: impl InboundHandler) -> std::io::Result<Server> {
        Server::bind_with(addr, ServerConfig::default(), handler).await
    }

    /// Binds `addr` with `config` and starts accepting.
    pub async fn bind_with(
        addr: SocketAddr,
        config: ServerConfig,
        handler: impl InboundHandler,
    ) -> std::io::Result<Server> {
        let listener = TcpListener::bind(addr).await?;
        Server::from_listener(listener, config, handler)
    }

    /// Serves an already bound listener.
    pub fn from_listener(
        listener: TcpListener,
        config: ServerConfig,
        handler: impl InboundHandler,
    ) -> std::io::Result<Server> {
        let local_addr = listener.local_addr()?;
        let connections: Arc<Mutex<Vec<Connection>>> = Arc::default();
        let handler: Arc<dyn InboundHandler> = Arc::new(handler);
        let conns = connections.clone();
        let conn_config = ConnConfig {
            max_frame_len: config.max_frame_len,
            queue_capacity: config.queue_capacity,
            write_idle: None,
            read_idle: config.read_idle,
            heartbeat_codec: CODEC_SEATA,
        };
        let span = tracing::info_span!("server", addr = %local_addr);
        let accept = tokio::spawn(tracing::Instrument::instrument(
            async move {
                loop {
                    let (stream, peer) = match listener.accept().await {
                        Ok(x) => x,
                        Err(e) => {
                            // EMFILE and friends: back off briefly instead of spinning.
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    match Connection::start(
                        stream,
                        conn_config.clone(),
                        peer.to_string(),
                        Some(handler.clone()),
                    ) {
                        Ok((conn, _task)) => {
                            tracing::debug!(%peer, "client connected");
                            let mut list = conns.lock().unwrap_or_else(|p| p.into_inner());
                            list.retain(|c: &Connection| !c.is_closed());
                            list.push(conn);
                        }
                        Err(e) => tracing::warn!(%peer, error = %e, "could not set up connection"),
                    }
                }
            },
            span,
        ));
        Ok(Server {
            local_addr,
            accept,
            connections,
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The open client connections (to push requests to them).
    pub fn connections(&self) -> Vec<Connection> {
        let mut list = self.connections.lock().unwrap_or_else(|p| p.into_inner());
        list.retain(|c| !c.is_closed());
        list.clone()
    }

    /// Stops accepting and closes every connection at once, without waiting for
    /// handlers: what a crash looks like to the clients (they see the sockets close).
    pub fn kill(&self) {
        self.accept.abort();
        for c in self
            .connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            c.close();
        }
    }

    /// Stops accepting, lets connections finish what is queued or pending for up to
    /// `grace`, then closes them.
    pub async fn shutdown(self, grace: Duration) {
        self.accept.abort();
        let conns: Vec<Connection> = self
            .connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        futures_util::future::join_all(conns.iter().map(|c| c.drain(grace))).await;
    }
}
