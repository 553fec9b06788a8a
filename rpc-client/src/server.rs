//! A server speaking the same frames: what the examples' `tc-server`, game backends, the tests and
//! the benches run on the other end of an `RpcClient`.
//!
//! It accepts connections, answers PINGs with PONGs, hands every request to an
//! [`InboundHandler`] and sends the handler's answer back with the request's id, closes
//! connections that stay silent past `read_idle` (Seata's TC: 15 s), and can push
//! requests to connected clients ([`Server::connections`] or [`Server::connection`],
//! then [`Connection::call`]) the way a TC sends a branch commit to an RM.
//!
//! What a real backend needs around that:
//! - a **connection limit** ([`ServerConfig::max_connections`]): beyond it a new
//!   connection is closed at once, before any task or buffer is set up for it;
//! - an **accept hook** ([`ServerBuilder::on_accept`]): the peer's address decides
//!   whether it may connect at all (an allow-list, a per-IP quota);
//! - **connection ids** ([`ConnectionId`]) and a per-connection [state slot]
//!   (Connection::set_state) for the server's own bookkeeping;
//! - **connect and close hooks** ([`ServerBuilder::on_connect`],
//!   [`ServerBuilder::on_close`]) to set that state up and tear it down;
//! - O(1) bookkeeping: connections live in a map by id and remove themselves when they
//!   close.
//!
//! It is deliberately not a framework: no routing, no registration policy. Those live
//! in the handler (see `message::register_reply` for the Seata registration answer).
//!
//! Dropping a [`Server`] stops it: the listener closes and every connection is closed
//! (as [`Server::kill`]); [`Server::shutdown`] drains them first.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::codec::CODEC_SEATA;
use crate::connection::{CloseHook, ConnConfig, Connection, ConnectionId, InboundHandler};
use crate::transport::{CloseReason, TransportOptions};

/// Settings of a [`Server`].
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Frame limit, queue budgets, write deadline and inbound cap of every connection.
    pub transport: TransportOptions,
    /// Close a connection that sent nothing for this long (default 15 s, as a Seata TC;
    /// `None` disables).
    pub read_idle: Option<Duration>,
    /// Most connections open at once (default 10,000); more are closed on accept.
    pub max_connections: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            transport: TransportOptions::default(),
            read_idle: Some(Duration::from_secs(15)),
            max_connections: 10_000,
        }
    }
}

impl ServerConfig {
    /// Defaults with the `transport.*` limits of `config` applied; an invalid value is
    /// an error naming the key.
    pub fn from_config(
        config: &meshline_registry_core::Config,
    ) -> Result<Self, meshline_registry_core::RegistryError> {
        Ok(ServerConfig {
            transport: TransportOptions::from_config(config)?,
            ..ServerConfig::default()
        })
    }
}

/// Counts of what the accept loop did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Connections accepted and served.
    pub accepted: u64,
    /// Connections closed on accept because `max_connections` were open.
    pub refused_over_limit: u64,
    /// Connections the accept hook refused.
    pub refused_by_hook: u64,
}

type AcceptHook = Arc<dyn Fn(SocketAddr) -> Result<(), String> + Send + Sync>;
type ConnectHook = Arc<dyn Fn(&Connection) + Send + Sync>;

struct Registry {
    connections: Mutex<HashMap<ConnectionId, Connection>>,
    accepted: AtomicU64,
    refused_over_limit: AtomicU64,
    refused_by_hook: AtomicU64,
}

impl Registry {
    fn map(&self) -> MutexGuard<'_, HashMap<ConnectionId, Connection>> {
        self.connections.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Builds a [`Server`] with hooks. [`Server::bind`] and [`Server::bind_with`] are the
/// short forms without hooks.
pub struct ServerBuilder {
    handler: Arc<dyn InboundHandler>,
    config: ServerConfig,
    on_accept: Option<AcceptHook>,
    on_connect: Option<ConnectHook>,
    on_close: Option<CloseHook>,
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ServerBuilder {
    /// Sets the server's settings.
    pub fn config(mut self, config: ServerConfig) -> Self {
        self.config = config;
        self
    }

    /// Decides, from the peer's address alone, whether a new connection is served.
    /// `Err(reason)` closes it at once (the reason is logged at debug level). Runs on the
    /// accept loop: keep it quick.
    pub fn on_accept(
        mut self,
        hook: impl Fn(SocketAddr) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.on_accept = Some(Arc::new(hook));
        self
    }

    /// Runs once for every served connection, before its first request is read (set up
    /// its [state](Connection::set_state) here).
    pub fn on_connect(mut self, hook: impl Fn(&Connection) + Send + Sync + 'static) -> Self {
        self.on_connect = Some(Arc::new(hook));
        self
    }

    /// Runs once when a served connection has closed, with the reason (after its pending
    /// calls were failed). The connection is already gone from [`Server::connections`].
    pub fn on_close(
        mut self,
        hook: impl Fn(&Connection, &CloseReason) + Send + Sync + 'static,
    ) -> Self {
        self.on_close = Some(Arc::new(hook));
        self
    }

    /// Binds `addr` (port 0 picks a free port) and starts accepting.
    pub async fn bind(self, addr: SocketAddr) -> std::io::Result<Server> {
        let listener = TcpListener::bind(addr).await?;
        self.serve(listener)
    }

    /// Serves an already bound listener.
    pub fn serve(self, listener: TcpListener) -> std::io::Result<Server> {
        let local_addr = listener.local_addr()?;
        let registry = Arc::new(Registry {
            connections: Mutex::new(HashMap::new()),
            accepted: AtomicU64::new(0),
            refused_over_limit: AtomicU64::new(0),
            refused_by_hook: AtomicU64::new(0),
        });
        let weak = Arc::downgrade(&registry);
        let user_close = self.on_close.clone();
        let on_close: CloseHook = Arc::new(move |conn: &Connection, reason: &CloseReason| {
            if let Some(reg) = weak.upgrade() {
                reg.map().remove(&conn.id());
            }
            if let Some(h) = &user_close {
                h(conn, reason);
            }
        });
        let conn_config = ConnConfig {
            transport: self.config.transport.clone(),
            write_idle: None,
            read_idle: self.config.read_idle,
            heartbeat_codec: CODEC_SEATA,
            // A server answers; it does not wait on its clients (its own calls to them,
            // a TC's phase two, have their timeouts).
            probe: None,
            on_close: Some(on_close),
        };
        let span = tracing::info_span!("server", addr = %local_addr);
        let accept = tokio::spawn(tracing::Instrument::instrument(
            accept_loop(
                listener,
                registry.clone(),
                conn_config,
                self.handler,
                self.config.max_connections.max(1),
                self.on_accept,
                self.on_connect,
            ),
            span,
        ));
        Ok(Server {
            local_addr,
            accept,
            registry,
        })
    }
}

async fn accept_loop(
    listener: TcpListener,
    registry: Arc<Registry>,
    conn_config: ConnConfig,
    handler: Arc<dyn InboundHandler>,
    max_connections: usize,
    on_accept: Option<AcceptHook>,
    on_connect: Option<ConnectHook>,
) {
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
        if let Some(hook) = &on_accept
            && let Err(reason) = hook(peer)
        {
            registry.refused_by_hook.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%peer, %reason, "connection refused by the accept hook");
            drop(stream);
            continue;
        }
        // Held across start + insert, so the count cannot overshoot the limit; a closing
        // connection's removal waits for it.
        let mut map = registry.map();
        if map.len() >= max_connections {
            drop(map);
            registry.refused_over_limit.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%peer, max_connections, "connection refused: at the connection limit");
            drop(stream);
            continue;
        }
        match Connection::start_accepted(
            stream,
            conn_config.clone(),
            peer.to_string(),
            Some(handler.clone()),
        ) {
            Ok((conn, _task)) => {
                registry.accepted.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%peer, id = %conn.id(), "client connected");
                map.insert(conn.id(), conn.clone());
                drop(map);
                if let Some(hook) = &on_connect {
                    hook(&conn);
                }
            }
            Err(e) => tracing::warn!(%peer, error = %e, "could not set up connection"),
        }
    }
}

/// A running server. Dropping it stops it (the listener and every connection close);
/// [`shutdown`](Server::shutdown) lets connections drain first.
pub struct Server {
    local_addr: SocketAddr,
    accept: JoinHandle<()>,
    registry: Arc<Registry>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local_addr", &self.local_addr)
            .field("connections", &self.connection_count())
            .finish()
    }
}

impl Server {
    /// A builder serving `handler`, for the limits and hooks.
    pub fn builder(handler: impl InboundHandler) -> ServerBuilder {
        ServerBuilder {
            handler: Arc::new(handler),
            config: ServerConfig::default(),
            on_accept: None,
            on_connect: None,
            on_close: None,
        }
    }

    /// Binds `addr` (port 0 picks a free port) with default settings and starts
    /// accepting.
    pub async fn bind(addr: SocketAddr, handler: impl InboundHandler) -> std::io::Result<Server> {
        Server::builder(handler).bind(addr).await
    }

    /// Binds `addr` with `config` and starts accepting.
    pub async fn bind_with(
        addr: SocketAddr,
        config: ServerConfig,
        handler: impl InboundHandler,
    ) -> std::io::Result<Server> {
        Server::builder(handler).config(config).bind(addr).await
    }

    /// Serves an already bound listener.
    pub fn from_listener(
        listener: TcpListener,
        config: ServerConfig,
        handler: impl InboundHandler,
    ) -> std::io::Result<Server> {
        Server::builder(handler).config(config).serve(listener)
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The open client connections (a snapshot, to push requests to them).
    pub fn connections(&self) -> Vec<Connection> {
        self.registry.map().values().cloned().collect()
    }

    /// The open connection with this id.
    pub fn connection(&self, id: ConnectionId) -> Option<Connection> {
        self.registry.map().get(&id).cloned()
    }

    /// How many connections are open.
    pub fn connection_count(&self) -> usize {
        self.registry.map().len()
    }

    /// What the accept loop did so far.
    pub fn stats(&self) -> ServerStats {
        ServerStats {
            accepted: self.registry.accepted.load(Ordering::Relaxed),
            refused_over_limit: self.registry.refused_over_limit.load(Ordering::Relaxed),
            refused_by_hook: self.registry.refused_by_hook.load(Ordering::Relaxed),
        }
    }

    /// Stops accepting and closes every connection at once, without waiting for
    /// handlers: what a crash looks like to the clients (they see the sockets close).
    pub fn kill(&self) {
        self.accept.abort();
        let conns: Vec<Connection> = self.registry.map().values().cloned().collect();
        for c in conns {
            c.close_with("server stopped");
        }
    }

    /// Stops accepting, lets connections finish what is queued or pending for up to
    /// `grace`, then closes them.
    pub async fn shutdown(self, grace: Duration) {
        self.accept.abort();
        let conns: Vec<Connection> = self.registry.map().values().cloned().collect();
        futures_util::future::join_all(conns.iter().map(|c| c.drain(grace))).await;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}
