//! One long connection: a writer task, a reader, a table of pending requests.
//!
//! The same machinery serves both ends: `RpcClient` runs one per endpoint, and
//! [`crate::server::Server`] runs one per accepted client, so both can send requests,
//! answer requests and answer heartbeats.
//!
//! # How a request travels, and what a failure means
//!
//! A caller takes a request id, waits for room in the request lane (bounded in bytes,
//! see [`crate::transport`]), queues the frame with a `oneshot` sender, and waits. The
//! writer takes a batch, moves each request's sender into the pending table (and each
//! one-way sender into the in-write list) *just before* writing, encodes the batch into
//! one buffer and writes it. The reader decodes frames and hands each response to the
//! sender registered under its id.
//!
//! That order gives the delivery guarantee `RpcClient` builds on: when a connection
//! dies, requests still queued are dropped with their senders (the caller sees
//! [`RpcError::NotWritten`] and can safely go elsewhere), while requests and one-way
//! sends that were handed to a write are failed with [`RpcError::MaybeDelivered`] —
//! also when the writer was stopped in the middle of that write. A caller that gives up
//! (timeout, cancellation) removes its pending entry, and a request whose caller is gone
//! before it reaches the writer is not sent at all. A caller that could not even get
//! room in the queue sees [`RpcError::Overloaded`]: not written.
//!
//! # Two-way traffic
//!
//! The reader never waits on the writer: answers to the peer's requests and PONGs go to
//! a response lane with its own byte budget, and a peer that overruns it (it pushes
//! requests and does not read the answers) is disconnected with a reason. So two peers
//! that both push as fast as they can never deadlock on each other's full queues. See
//! [`crate::transport`] for every limit and why.
//!
//! # Idle timers
//!
//! With `write_idle` set (clients), a PING goes out when nothing was written for that
//! long; with `read_idle` set, a connection that received nothing for that long is
//! closed (Seata: 5 s and 15 s). Either end answers a PING with a PONG carrying the same
//! id, codec and compressor.

mod id;
mod lanes;
pub(crate) mod liveness;
mod merge;
#[cfg(test)]
mod merge_tests;
mod queue;
mod reader;
mod shared;
mod wire;
mod writer;

use std::any::Any;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub(crate) use crate::inbound::{InboundHandler, InboundRequest};

use crate::codec::{Frame, MessageType};
use crate::error::RpcError;
use crate::payload::Payload;
use crate::transport::{CloseReason, TransportOptions};
pub use id::ConnectionId;
use lanes::{Lanes, Queued, Reply, ReserveError};
pub(crate) use queue::{SendFailure, SendKind};
use shared::{InboundGate, Shared};
pub(crate) use wire::WireMode;

/// Called once when a connection has closed, with its reason.
pub(crate) type CloseHook = Arc<dyn Fn(&Connection, &CloseReason) + Send + Sync>;

/// Settings of one connection.
#[derive(Clone)]
pub(crate) struct ConnConfig {
    /// Frame limit, queue budgets, write deadline, inbound cap.
    pub transport: TransportOptions,
    /// Send a PING after this long without writing.
    pub write_idle: Option<Duration>,
    /// Close after this long without reading.
    pub read_idle: Option<Duration>,
    /// Codec byte of our PINGs.
    pub heartbeat_codec: u8,
    /// Close a peer that goes silent with answers outstanding (see `liveness`).
    pub probe: Option<crate::transport::Probe>,
    /// Told when the connection has closed (the server's bookkeeping).
    pub on_close: Option<CloseHook>,
}

/// A handle to one live (or closed) connection. Cheap to clone.
///
/// `RpcClient` hands these to handshake hooks and inbound handlers; the server hands
/// them out for pushing requests to a client.
#[derive(Clone)]
pub struct Connection {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("id", &self.shared.id)
            .field("peer", &self.shared.peer)
            .field("label", &self.shared.label)
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl PartialEq for Connection {
    fn eq(&self, other: &Self) -> bool {
        self.shared.id == other.shared.id
    }
}

impl Eq for Connection {}

impl std::hash::Hash for Connection {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.shared.id.hash(state)
    }
}

impl Connection {
    /// Starts the reader and writer for `stream`, speaking the wire
    /// `transport.protocol` names. Returns the handle and the task that ends (with the
    /// close reason) when the connection is closed.
    pub(crate) fn start(
        stream: TcpStream,
        config: ConnConfig,
        label: String,
        handler: Option<Arc<dyn InboundHandler>>,
    ) -> std::io::Result<(Connection, JoinHandle<CloseReason>)> {
        let mode = match config.transport.protocol {
            crate::transport::Protocol::Seata => WireMode::V1,
            crate::transport::Protocol::Grpc => WireMode::GrpcClient,
        };
        Connection::start_as(stream, config, label, handler, mode)
    }

    /// Like [`start`](Self::start), for an accepted connection: the wire is whichever
    /// the peer opens with.
    pub(crate) fn start_accepted(
        stream: TcpStream,
        config: ConnConfig,
        label: String,
        handler: Option<Arc<dyn InboundHandler>>,
    ) -> std::io::Result<(Connection, JoinHandle<CloseReason>)> {
        Connection::start_as(stream, config, label, handler, WireMode::Detect)
    }

    fn start_as(
        stream: TcpStream,
        config: ConnConfig,
        label: String,
        handler: Option<Arc<dyn InboundHandler>>,
        mode: WireMode,
    ) -> std::io::Result<(Connection, JoinHandle<CloseReason>)> {
        let peer = stream.peer_addr()?;
        stream.set_nodelay(true)?;
        let t = config.transport.normalized();
        let grpc = OnceLock::new();
        if mode == WireMode::GrpcClient {
            let _ = grpc.set(Arc::new(crate::grpc::Link::client(&label)));
        }
        let shared = Arc::new(Shared {
            id: ConnectionId::next(),
            lanes: Lanes::new(t.request_queue_bytes, t.response_queue_bytes),
            pending: Mutex::new(HashMap::new()),
            merges: Mutex::new(HashMap::new()),
            compressor: t.compressor,
            // Seata's gRPC bodies are protobuf whatever `transport.serialization` says.
            codec: if mode == WireMode::GrpcClient {
                crate::codec::CODEC_PROTOBUF
            } else {
                t.codec
            },
            grpc,
            batch: t.batch,
            awaiting: liveness::Awaiting::new(),
            armed: Notify::new(),
            pings: Mutex::new(HashMap::new()),
            in_write: Mutex::new(Vec::new()),
            next_id: AtomicU32::new(1),
            peer,
            label,
            max_frame_len: t.max_frame_len,
            close_reason: OnceLock::new(),
            shutdown: CancellationToken::new(),
            done: CancellationToken::new(),
            inbound: InboundGate {
                active: AtomicUsize::new(0),
                max: t.max_inbound_requests,
                freed: Notify::new(),
            },
            slot: Mutex::new(None),
        });
        let conn = Connection {
            shared: shared.clone(),
        };
        let span = tracing::info_span!("connection", id = %shared.id, peer = %peer, endpoint = %shared.label);
        let task = tokio::spawn(run(shared, stream, config, t, handler, mode).instrument(span));
        Ok((conn, task))
    }

    /// This connection's process-unique id.
    pub fn id(&self) -> ConnectionId {
        self.shared.id
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.shared.peer
    }

    /// The wire this connection speaks: Seata RPC v1, or Seata's gRPC. An accepted
    /// connection says [`Protocol::Seata`](crate::Protocol::Seata) until the peer's
    /// first bytes are read.
    pub fn protocol(&self) -> crate::Protocol {
        if self.shared.grpc.get().is_some() {
            crate::Protocol::Grpc
        } else {
            crate::Protocol::Seata
        }
    }

    /// The endpoint label used in logs and errors (`host:port` as the registry said).
    pub fn label(&self) -> &str {
        &self.shared.label
    }

    /// True once the connection is closed (or closing).
    pub fn is_closed(&self) -> bool {
        self.shared.close_reason.get().is_some() || self.shared.shutdown.is_cancelled()
    }

    /// Why the connection closed, once it has.
    pub fn close_reason(&self) -> Option<&CloseReason> {
        self.shared.close_reason.get()
    }

    /// Waits until the connection is closed.
    pub async fn closed(&self) {
        self.shared.done.cancelled().await
    }

    /// Closes the connection now. Queued requests are failed as not written, written
    /// ones as maybe delivered.
    pub fn close(&self) {
        self.close_with("closed locally");
    }

    /// Closes the connection now with `reason` (what [`close_reason`](Self::close_reason)
    /// and the failed callers will say).
    pub fn close_with(&self, reason: impl Into<String>) {
        self.shared.close_with(CloseReason::new(reason));
    }

    /// Stores a per-connection value (a gateway's session, a server's subscriber
    /// record), replacing any earlier one. Any type; read it back with
    /// [`state`](Self::state).
    pub fn set_state<T: Any + Send + Sync>(&self, value: T) {
        *self.shared.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(value));
    }

    /// The per-connection value, if one of type `T` was stored.
    pub fn state<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let slot = self.shared.slot.lock().unwrap_or_else(|p| p.into_inner());
        slot.clone().and_then(|v| v.downcast::<T>().ok())
    }

    /// Removes and returns the per-connection value of type `T`.
    pub fn take_state<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let mut slot = self.shared.slot.lock().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().is_some_and(|v| v.is::<T>()) {
            slot.take().and_then(|v| v.downcast::<T>().ok())
        } else {
            None
        }
    }

    /// Requests written and not yet answered.
    pub fn pending_requests(&self) -> usize {
        self.shared.pending().len()
    }

    /// Requests and one-way sends queued and not yet taken by the writer.
    pub fn queued(&self) -> usize {
        self.shared.lanes.queued_requests()
    }

    /// Bytes of the request budget in use: queued, or in the write under way.
    pub fn queued_bytes(&self) -> usize {
        self.shared.lanes.request_bytes_in_use()
    }

    /// Waits until nothing is queued or pending (or `deadline` passes, or the connection
    /// closes), then closes. Used to drain an endpoint the registry removed: in-flight
    /// calls finish first.
    pub async fn drain(&self, deadline: Duration) {
        let until = crate::deadline_after(deadline);
        while (self.pending_requests() > 0 || self.queued_bytes() > 0)
            && tokio::time::Instant::now() < until
            && !self.is_closed()
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.close_with("drained");
        self.closed().await;
    }

    /// Sends a request and waits for its response, up to `timeout`.
    ///
    /// Waits for room in the request queue within the same `timeout`; if none came, the
    /// error is [`RpcError::Overloaded`] (not written).
    pub async fn call(&self, payload: Payload, timeout: Duration) -> Result<Payload, RpcError> {
        self.call_inner(payload, timeout, true).await
    }

    /// Like [`call`](Self::call), but fails at once with [`RpcError::Overloaded`] when the
    /// request queue has no room, instead of waiting for it.
    pub async fn try_call(&self, payload: Payload, timeout: Duration) -> Result<Payload, RpcError> {
        self.call_inner(payload, timeout, false).await
    }

    async fn call_inner(
        &self,
        payload: Payload,
        timeout: Duration,
        wait: bool,
    ) -> Result<Payload, RpcError> {
        crate::payload::check(&payload, self.shared.max_frame_len)?;
        let f = self
            .send_within(payload, SendKind::Request, timeout, wait)
            .await?;
        // A request's outcome is always a frame (`outcome` turns a missing one into a
        // failure); the empty payload is only a type-level fallback.
        Ok(f.map(Payload::from_frame)
            .unwrap_or_else(|| Payload::new(bytes::Bytes::new())))
    }

    /// Queues (waiting for room if `wait`) and waits for the outcome, all within
    /// `timeout`. A timeout before the frame was queued is [`RpcError::Overloaded`]
    /// (not written); after, [`RpcError::Timeout`] (may have been delivered).
    pub(crate) async fn send_within(
        &self,
        payload: Payload,
        kind: SendKind,
        timeout: Duration,
        wait: bool,
    ) -> Result<Option<Frame>, RpcError> {
        let mut queued = false;
        let fut = async {
            let e = self.enqueue(payload, kind, wait).await?;
            queued = true;
            e.outcome().await
        };
        match tokio::time::timeout(timeout, fut).await {
            Ok(Ok(f)) => Ok(f),
            Ok(Err(e)) => Err(self.failure_error(e)),
            Err(_) if !queued => Err(self.overloaded(Some(timeout))),
            Err(_) => Err(RpcError::Timeout {
                after: timeout,
                endpoint: Some(self.shared.label.clone()),
            }),
        }
    }

    /// Sends a one-way request and waits until it is handed to the socket (waiting for
    /// queue room first, without limit: wrap it in a timeout to bound the wait).
    pub async fn send_oneway(&self, payload: Payload) -> Result<(), RpcError> {
        crate::payload::check(&payload, self.shared.max_frame_len)?;
        let e = self
            .enqueue(payload, SendKind::Oneway, true)
            .await
            .map_err(|e| self.failure_error(e))?;
        e.outcome()
            .await
            .map(|_| ())
            .map_err(|e| self.failure_error(e))
    }

    /// Queues a one-way request without waiting: `Ok` once it is queued (the writer
    /// sends it in order with everything else), [`RpcError::Overloaded`] at once when the
    /// queue has no room. Whether it was then written is not reported: use
    /// [`send_oneway`](Self::send_oneway) for that.
    pub fn try_send_oneway(&self, payload: Payload) -> Result<(), RpcError> {
        crate::payload::check(&payload, self.shared.max_frame_len)?;
        let (frame, len) = self.frame_for(payload, SendKind::Oneway);
        let charge = match self.shared.lanes.try_reserve(len) {
            Ok(c) => c,
            Err(ReserveError::Full) => return Err(self.overloaded(None)),
            Err(ReserveError::Closed) => {
                return Err(self.failure_error(SendFailure::NotWritten(
                    self.shared.reason_or("connection closed"),
                )));
            }
        };
        // Nobody waits for the outcome: the sender's receiver is dropped at once, and
        // the writer's report to it goes nowhere.
        let (tx, _rx) = oneshot::channel();
        let q = Queued {
            frame,
            reply: Reply::Written(tx),
            len,
            charge,
        };
        self.shared.lanes.push_request(q).map_err(|_| {
            self.failure_error(SendFailure::NotWritten(
                self.shared.reason_or("connection closed"),
            ))
        })
    }

    pub(crate) fn overloaded(&self, waited: Option<Duration>) -> RpcError {
        RpcError::Overloaded {
            endpoint: self.shared.label.clone(),
            queued_bytes: self.queued_bytes(),
            waited,
        }
    }

    pub(crate) fn failure_error(&self, e: SendFailure) -> RpcError {
        match e {
            SendFailure::NotWritten(reason) => RpcError::NotWritten {
                endpoint: self.shared.label.clone(),
                reason,
            },
            SendFailure::MaybeDelivered(reason) => RpcError::MaybeDelivered {
                endpoint: self.shared.label.clone(),
                reason,
            },
            SendFailure::Full => self.overloaded(None),
        }
    }

    /// Sends a PING and waits for its PONG: the round trip, or an error when no PONG
    /// came within `timeout` ([`RpcError::Timeout`]) or the connection failed. A peer
    /// answers PINGs on its reader, ahead of its request handlers, so this measures the
    /// connection and the peer's liveness, not its load.
    pub async fn ping(&self, timeout: Duration) -> Result<Duration, RpcError> {
        if self.is_closed() {
            return Err(RpcError::NotWritten {
                endpoint: self.shared.label.clone(),
                reason: self.shared.reason_or("connection closed"),
            });
        }
        let id = self.shared.next_id();
        let (tx, rx) = oneshot::channel();
        self.shared.pings().insert(id, tx);
        let started = tokio::time::Instant::now();
        let sent = self.shared.queue_response(Frame::ping(id));
        let r = match sent {
            Err(reason) => Err(RpcError::NotWritten {
                endpoint: self.shared.label.clone(),
                reason,
            }),
            Ok(()) => tokio::select! {
                r = rx => r.map(|()| started.elapsed()).map_err(|_| RpcError::MaybeDelivered {
                    endpoint: self.shared.label.clone(),
                    reason: self.shared.reason_or("connection closed"),
                }),
                _ = tokio::time::sleep(timeout) => Err(RpcError::Timeout {
                    after: timeout,
                    endpoint: Some(self.shared.label.clone()),
                }),
                _ = self.shared.done.cancelled() => Err(RpcError::MaybeDelivered {
                    endpoint: self.shared.label.clone(),
                    reason: self.shared.reason_or("connection closed"),
                }),
            },
        };
        self.shared.pings().remove(&id);
        r
    }

    /// Whether two handles refer to the same connection.
    pub fn ptr_eq(&self, other: &Connection) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Sends a response to the peer's request `request_id`.
    ///
    /// Never waits for the writer (it is `async` for compatibility only): the answer goes
    /// to the response lane, and if that lane is over its budget the connection is closed
    /// and the reason returned.
    pub async fn respond(&self, request_id: u32, payload: Payload) -> Result<(), RpcError> {
        crate::payload::check(&payload, self.shared.max_frame_len)?;
        self.shared
            .queue_response(payload.into_frame(MessageType::Response, request_id))
            .map_err(|reason| RpcError::NotWritten {
                endpoint: self.shared.label.clone(),
                reason,
            })
    }

    /// Sets the next request id (tests of id wrap-around).
    #[cfg(test)]
    pub(crate) fn set_next_id(&self, id: u32) {
        self.shared
            .next_id
            .store(id, std::sync::atomic::Ordering::Relaxed);
    }
}

async fn run(
    shared: Arc<Shared>,
    stream: TcpStream,
    config: ConnConfig,
    transport: TransportOptions,
    handler: Option<Arc<dyn InboundHandler>>,
    mode: WireMode,
) -> CloseReason {
    let (rd, wr) = stream.into_split();
    let mut writer = tokio::spawn(
        writer::write_loop(
            shared.clone(),
            wr,
            config.write_idle,
            config.heartbeat_codec,
            transport.write_timeout,
            config.probe.is_some(),
        )
        .instrument(tracing::Span::current()),
    );
    let codec = wire::Decoder::new(mode, &shared, transport.max_frame_len);
    let mut writer_done = false;
    let reason = tokio::select! {
        r = reader::read_loop(
            &shared,
            rd,
            codec,
            liveness::Liveness::new(config.probe, config.read_idle),
            handler,
        ) => r,
        w = &mut writer => {
            writer_done = true;
            w.unwrap_or_else(|e| CloseReason::new(format!("writer task failed: {e}")))
        }
        _ = shared.shutdown.cancelled() => shared.reason_or("closed locally"),
    };
    let _ = shared.close_reason.set(reason);
    let reason = shared.reason_or("closed");
    shared.shutdown.cancel();
    // Queued requests were never handed to a write: dropping them says "not written".
    drop(shared.lanes.close());
    if !writer_done {
        writer.abort();
        let _ = (&mut writer).await;
    }
    // Whatever is in the write under way, or pending, was handed to the socket.
    let in_write: Vec<_> = std::mem::take(&mut *shared.in_write());
    for tx in in_write {
        let _ = tx.send(Err(reason.clone()));
    }
    let pending: Vec<_> = shared.pending().drain().collect();
    let failed = pending.len();
    for (_, tx) in pending {
        let _ = tx.send(Err(reason.clone()));
    }
    tracing::debug!(reason = %reason, failed_in_flight = failed, "connection closed");
    shared.done.cancel();
    if let Some(hook) = &config.on_close {
        hook(&Connection { shared }, &reason);
    }
    reason
}

#[cfg(test)]
mod tests;
