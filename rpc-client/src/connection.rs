//! One long connection: a writer task, a reader, a table of pending requests.
//!
//! The same machinery serves both ends: `RpcClient` runs one per endpoint, and
//! [`crate::server::Server`] runs one per accepted client, so both can send requests,
//! answer requests and answer heartbeats.
//!
//! # How a request travels, and what a failure means
//!
//! A caller takes a request id, puts the frame and a `oneshot` sender into a bounded
//! queue, and waits. The writer task takes everything queued (up to a batch), moves each
//! request's sender into the pending table *just before* writing, encodes the batch
//! into one buffer and writes it with one syscall. The reader decodes frames and hands
//! each response to the sender registered under its id.
//!
//! That order gives the delivery guarantee `RpcClient` builds on: when a connection
//! dies, requests still in the queue are dropped with their senders (the caller sees
//! [`RpcError::NotWritten`] and can safely go elsewhere), while requests in the pending
//! table were handed to the socket and are failed with [`RpcError::MaybeDelivered`].
//! A caller that gives up (timeout, cancellation) removes its pending entry on drop,
//! and a request whose caller is gone before it reaches the writer is not sent at all.
//!
//! # Idle timers
//!
//! With `write_idle` set (clients), a PING goes out when nothing was written for that
//! long; with `read_idle` set, a connection that received nothing for that long is
//! closed (Seata: 5 s and 15 s). Either end answers a PING with a PONG carrying the same
//! id, codec and compressor.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use bytes::BytesMut;
use futures_util::{FutureExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::codec::{Frame, FrameCodec, MessageType};
use crate::error::RpcError;
use crate::payload::Payload;

/// A boxed, sendable future (what handlers and handshakes return).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A request the peer sent us: a TC's branch commit, a backend's push, or (on the
/// server side) a client's call.
#[derive(Debug)]
pub struct InboundRequest {
    /// The peer's socket address.
    pub peer: SocketAddr,
    /// True for a one-way request (type 2): any response is ignored.
    pub oneway: bool,
    /// The peer's request id (the response reuses it).
    pub request_id: u32,
    /// Head map and body.
    pub payload: Payload,
    /// The connection it came on (to push more requests back, or to identify the peer).
    pub connection: Connection,
}

/// Handles requests the peer sends. The returned payload (if any) is sent back on the
/// same connection as a response with the request's id; for one-way requests it is
/// dropped.
///
/// Implemented for any `Fn(InboundRequest) -> impl Future<Output = Option<Payload>>`.
/// A handler whose future is ready at once is run inline on the reader (no task spawn);
/// one that waits is spawned, so a slow handler never stalls the connection.
pub trait InboundHandler: Send + Sync + 'static {
    /// Handles one request.
    fn handle(&self, request: InboundRequest) -> BoxFuture<'static, Option<Payload>>;
}

impl<F, Fut> InboundHandler for F
where
    F: Fn(InboundRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<Payload>> + Send + 'static,
{
    fn handle(&self, request: InboundRequest) -> BoxFuture<'static, Option<Payload>> {
        Box::pin(self(request))
    }
}

/// Settings of one connection.
#[derive(Debug, Clone)]
pub(crate) struct ConnConfig {
    /// Largest frame accepted or written.
    pub max_frame_len: usize,
    /// Capacity of the write queue (callers wait when it is full).
    pub queue_capacity: usize,
    /// Send a PING after this long without writing.
    pub write_idle: Option<Duration>,
    /// Close after this long without reading.
    pub read_idle: Option<Duration>,
    /// Codec byte of our PINGs.
    pub heartbeat_codec: u8,
}

/// What the writer reports back to a caller. `Ok(Some)` is a response, `Ok(None)` a
/// completed one-way write, `Err` means written and then the connection failed. A
/// dropped sender means the request was never written.
type Outcome = Result<Option<Frame>, String>;

enum Reply {
    None,
    Response(oneshot::Sender<Outcome>),
    Written(oneshot::Sender<Outcome>),
}

struct Outgoing {
    frame: Frame,
    reply: Reply,
}

struct Shared {
    tx: mpsc::Sender<Outgoing>,
    pending: Mutex<HashMap<u32, oneshot::Sender<Outcome>>>,
    next_id: AtomicU32,
    peer: SocketAddr,
    label: String,
    max_frame_len: usize,
    queue_capacity: usize,
    close_reason: OnceLock<String>,
    /// Asks the connection to close.
    shutdown: CancellationToken,
    /// Cancelled once the connection is fully closed.
    done: CancellationToken,
}

impl Shared {
    fn pending(&self) -> MutexGuard<'_, HashMap<u32, oneshot::Sender<Outcome>>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn next_id(&self) -> u32 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// A handle to one live (or closed) connection. Cheap to clone.
///
/// `RpcClient` hands these to handshake hooks and inbound handlers; the server helper
/// hands them out for pushing requests to a client.
#[derive(Clone)]
pub struct Connection {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.shared.peer)
            .field("label", &self.shared.label)
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// Removes a pending entry if the caller stops waiting (timeout, cancellation).
struct PendingGuard<'a> {
    shared: &'a Shared,
    id: u32,
    armed: bool,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.shared.pending().remove(&self.id);
        }
    }
}

/// Why [`Connection::request_frame`] failed, with delivery status.
pub(crate) enum SendFailure {
    NotWritten(String),
    MaybeDelivered(String),
}

impl Connection {
    /// Starts the reader and writer for `stream`. Returns the handle and the task that
    /// ends (with the close reason) when the connection is closed.
    pub(crate) fn start(
        stream: TcpStream,
        config: ConnConfig,
        label: String,
        handler: Option<Arc<dyn InboundHandler>>,
    ) -> std::io::Result<(Connection, JoinHandle<String>)> {
        let peer = stream.peer_addr()?;
        stream.set_nodelay(true)?;
        let (tx, rx) = mpsc::channel(config.queue_capacity.max(1));
        let shared = Arc::new(Shared {
            tx,
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU32::new(1),
            peer,
            label,
            max_frame_len: config.max_frame_len,
            queue_capacity: config.queue_capacity.max(1),
            close_reason: OnceLock::new(),
            shutdown: CancellationToken::new(),
            done: CancellationToken::new(),
        });
        let conn = Connection {
            shared: shared.clone(),
        };
        let span = tracing::info_span!("connection", peer = %peer, endpoint = %shared.label);
        let task = tokio::spawn(run(shared, stream, rx, config, handler).instrument(span));
        Ok((conn, task))
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.shared.peer
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
    pub fn close_reason(&self) -> Option<&str> {
        self.shared.close_reason.get().map(String::as_str)
    }

    /// Waits until the connection is closed.
    pub async fn closed(&self) {
        self.shared.done.cancelled().await
    }

    /// Closes the connection now. Queued requests are failed as not written, written
    /// ones as maybe delivered.
    pub fn close(&self) {
        self.shared.shutdown.cancel();
    }

    /// Requests written and not yet answered.
    pub fn pending_requests(&self) -> usize {
        self.shared.pending().len()
    }

    /// Requests queued and not yet written.
    pub fn queued(&self) -> usize {
        self.shared.queue_capacity - self.shared.tx.capacity()
    }

    /// Waits until nothing is queued or pending (or `deadline` passes), then closes.
    /// Used to drain an endpoint the registry removed: in-flight calls finish first.
    pub async fn drain(&self, deadline: Duration) {
        let until = tokio::time::Instant::now() + deadline;
        while (self.pending_requests() > 0 || self.queued() > 0)
            && tokio::time::Instant::now() < until
            && !self.is_closed()
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.close();
        self.closed().await;
    }

    /// Sends a request and waits for its response, up to `timeout`.
    pub async fn call(&self, payload: Payload, timeout: Duration) -> Result<Payload, RpcError> {
        crate::payload::check(&payload, self.shared.max_frame_len)?;
        match tokio::time::timeout(timeout, self.request_frame(payload)).await {
            Ok(Ok(f)) => Ok(Payload::from_frame(f)),
            Ok(Err(e)) => Err(self.failure_error(e)),
            Err(_) => Err(RpcError::Timeout {
                after: timeout,
                endpoint: Some(self.shared.label.clone()),
            }),
        }
    }

    /// Sends a one-way request and waits until it is written to the socket.
    pub async fn send_oneway(&self, payload: Payload) -> Result<(), RpcError> {
        crate::payload::check(&payload, self.shared.max_frame_len)?;
        self.oneway_frame(payload)
            .await
            .map_err(|e| self.failure_error(e))
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
        }
    }

    fn closed_reason_or(&self, default: &str) -> String {
        self.shared
            .close_reason
            .get()
            .cloned()
            .unwrap_or_else(|| default.to_string())
    }

    /// Whether two handles refer to the same connection.
    pub fn ptr_eq(&self, other: &Connection) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Queues a request and waits for the response frame. The payload must have passed
    /// [`check`](Self::check).
    pub(crate) async fn request_frame(&self, payload: Payload) -> Result<Frame, SendFailure> {
        if self.is_closed() {
            return Err(SendFailure::NotWritten(
                self.closed_reason_or("connection closed"),
            ));
        }
        let id = self.shared.next_id();
        let (tx, rx) = oneshot::channel();
        let out = Outgoing {
            frame: payload.into_frame(MessageType::Request, id),
            reply: Reply::Response(tx),
        };
        if self.shared.tx.send(out).await.is_err() {
            return Err(SendFailure::NotWritten(
                self.closed_reason_or("connection closed"),
            ));
        }
        let mut guard = PendingGuard {
            shared: &self.shared,
            id,
            armed: true,
        };
        match rx.await {
            Ok(Ok(Some(f))) => {
                guard.armed = false;
                Ok(f)
            }
            Ok(Ok(None)) => {
                guard.armed = false;
                Err(SendFailure::MaybeDelivered("no response frame".into()))
            }
            Ok(Err(reason)) => {
                guard.armed = false;
                Err(SendFailure::MaybeDelivered(reason))
            }
            Err(_) => {
                guard.armed = false;
                Err(SendFailure::NotWritten(self.closed_reason_or(
                    "connection closed before the request was written",
                )))
            }
        }
    }

    /// Queues a one-way request and waits until it is written.
    pub(crate) async fn oneway_frame(&self, payload: Payload) -> Result<(), SendFailure> {
        if self.is_closed() {
            return Err(SendFailure::NotWritten(
                self.closed_reason_or("connection closed"),
            ));
        }
        let (tx, rx) = oneshot::channel();
        let out = Outgoing {
            frame: payload.into_frame(MessageType::Oneway, self.shared.next_id()),
            reply: Reply::Written(tx),
        };
        if self.shared.tx.send(out).await.is_err() {
            return Err(SendFailure::NotWritten(
                self.closed_reason_or("connection closed"),
            ));
        }
        match rx.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(reason)) => Err(SendFailure::MaybeDelivered(reason)),
            Err(_) => Err(SendFailure::NotWritten(
                self.closed_reason_or("connection closed before the request was written"),
            )),
        }
    }

    /// Sends a response to the peer's request `request_id`.
    pub async fn respond(&self, request_id: u32, payload: Payload) -> Result<(), RpcError> {
        crate::payload::check(&payload, self.shared.max_frame_len)?;
        let out = Outgoing {
            frame: payload.into_frame(MessageType::Response, request_id),
            reply: Reply::None,
        };
        self.shared
            .tx
            .send(out)
            .await
            .map_err(|_| RpcError::NotWritten {
                endpoint: self.shared.label.clone(),
                reason: self.closed_reason_or("connection closed"),
            })
    }
}

async fn run(
    shared: Arc<Shared>,
    stream: TcpStream,
    rx: mpsc::Receiver<Outgoing>,
    config: ConnConfig,
    handler: Option<Arc<dyn InboundHandler>>,
) -> String {
    let (rd, wr) = stream.into_split();
    let mut writer = tokio::spawn(
        write_loop(
            shared.clone(),
            wr,
            rx,
            config.write_idle,
            config.heartbeat_codec,
        )
        .instrument(tracing::Span::current()),
    );
    let framed = FramedRead::with_capacity(rd, FrameCodec::new(config.max_frame_len), 64 * 1024);
    let mut writer_done = false;
    let reason = tokio::select! {
        r = read_loop(&shared, framed, config.read_idle, handler) => r,
        w = &mut writer => {
            writer_done = true;
            w.unwrap_or_else(|e| format!("writer task failed: {e}"))
        }
        _ = shared.shutdown.cancelled() => "closed locally".to_string(),
    };
    let _ = shared.close_reason.set(reason.clone());
    if !writer_done {
        // Dropping the writer drops the queue: queued requests see "not written".
        writer.abort();
        let _ = (&mut writer).await;
    }
    // Whatever is pending now was handed to the socket.
    let pending: Vec<_> = shared.pending().drain().collect();
    let failed = pending.len();
    for (_, tx) in pending {
        let _ = tx.send(Err(reason.clone()));
    }
    tracing::debug!(reason = %reason, failed_in_flight = failed, "connection closed");
    shared.done.cancel();
    reason
}

async fn write_loop(
    shared: Arc<Shared>,
    mut wr: OwnedWriteHalf,
    mut rx: mpsc::Receiver<Outgoing>,
    write_idle: Option<Duration>,
    ping_codec: u8,
) -> String {
    const BATCH: usize = 256;
    let mut batch: Vec<Outgoing> = Vec::with_capacity(BATCH);
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut written: Vec<oneshot::Sender<Outcome>> = Vec::new();
    loop {
        let n = match write_idle {
            Some(idle) => match tokio::time::timeout(idle, rx.recv_many(&mut batch, BATCH)).await {
                Ok(n) => n,
                Err(_) => {
                    let ping = Frame {
                        codec: ping_codec,
                        ..Frame::ping(shared.next_id())
                    };
                    batch.push(Outgoing {
                        frame: ping,
                        reply: Reply::None,
                    });
                    tracing::trace!("write idle: sending PING");
                    1
                }
            },
            None => rx.recv_many(&mut batch, BATCH).await,
        };
        if n == 0 {
            return "write queue closed".to_string();
        }
        if n < BATCH && !shared.pending().is_empty() {
            // Other requests are in flight, so their callers are likely runnable right
            // now (woken by responses the reader just dispatched) and about to queue
            // more. Tokio runs a freshly woken task first (its LIFO slot), which would
            // have us write one frame per syscall; stepping aside once lets them queue
            // and turns N writes into one. With a single call in flight (nothing
            // pending) we write at once, so low-concurrency latency is unaffected.
            // (Not `tokio::task::yield_now`: that defers the wake-up until the worker
            // parks, which a busy worker may not do for milliseconds.)
            YieldOnce(false).await;
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(out) => batch.push(out),
                    Err(_) => break,
                }
            }
        }
        {
            let mut pending = None;
            for out in batch.drain(..) {
                let id = out.frame.request_id;
                match out.reply {
                    Reply::Response(tx) => {
                        if tx.is_closed() {
                            // The caller gave up before we got to it: do not send.
                            continue;
                        }
                        if let Err(e) = out.frame.encode_into(&mut buf, shared.max_frame_len) {
                            tracing::error!(error = %e, "dropping unframeable request");
                            continue;
                        }
                        pending
                            .get_or_insert_with(|| shared.pending())
                            .insert(id, tx);
                    }
                    Reply::Written(tx) => {
                        if let Err(e) = out.frame.encode_into(&mut buf, shared.max_frame_len) {
                            tracing::error!(error = %e, "dropping unframeable one-way request");
                            continue;
                        }
                        written.push(tx);
                    }
                    Reply::None => {
                        if let Err(e) = out.frame.encode_into(&mut buf, shared.max_frame_len) {
                            tracing::error!(error = %e, "dropping unframeable frame");
                        }
                    }
                }
            }
        }
        if let Err(e) = wr.write_all(&buf).await {
            let reason = format!("write failed: {e}");
            for w in written.drain(..) {
                let _ = w.send(Err(reason.clone()));
            }
            return reason;
        }
        buf.clear();
        if buf.capacity() > 1024 * 1024 {
            // One huge frame should not pin a huge buffer forever.
            buf = BytesMut::with_capacity(64 * 1024);
        }
        for w in written.drain(..) {
            let _ = w.send(Ok(None));
        }
    }
}

async fn read_loop(
    shared: &Arc<Shared>,
    mut framed: FramedRead<OwnedReadHalf, FrameCodec>,
    read_idle: Option<Duration>,
    handler: Option<Arc<dyn InboundHandler>>,
) -> String {
    loop {
        let next = match read_idle {
            Some(idle) => match tokio::time::timeout(idle, framed.next()).await {
                Ok(n) => n,
                Err(_) => return format!("nothing received for {idle:?} (read idle)"),
            },
            None => framed.next().await,
        };
        let frame = match next {
            None => return "connection closed by peer".to_string(),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "protocol error; closing the connection");
                return e.to_string();
            }
            Some(Ok(f)) => f,
        };
        match frame.msg_type {
            MessageType::Response => {
                let tx = shared.pending().remove(&frame.request_id);
                match tx {
                    Some(tx) => {
                        let _ = tx.send(Ok(Some(frame)));
                    }
                    None => tracing::debug!(
                        id = frame.request_id,
                        "response for an unknown or abandoned request"
                    ),
                }
            }
            MessageType::HeartbeatRequest => {
                let pong = Outgoing {
                    frame: Frame::pong_for(&frame),
                    reply: Reply::None,
                };
                if shared.tx.send(pong).await.is_err() {
                    return "write queue closed".to_string();
                }
            }
            MessageType::HeartbeatResponse => {}
            MessageType::Request | MessageType::Oneway => {
                let Some(h) = handler.as_ref() else {
                    tracing::warn!(
                        id = frame.request_id,
                        "the peer sent a request but no inbound handler is set; ignored"
                    );
                    continue;
                };
                let oneway = frame.msg_type == MessageType::Oneway;
                let id = frame.request_id;
                let conn = Connection {
                    shared: shared.clone(),
                };
                let req = InboundRequest {
                    peer: shared.peer,
                    oneway,
                    request_id: id,
                    payload: Payload::from_frame(frame),
                    connection: conn.clone(),
                };
                let mut fut = h.handle(req);
                match (&mut fut).now_or_never() {
                    Some(resp) => {
                        if let (false, Some(p)) = (oneway, resp)
                            && let Err(e) = conn.respond(id, p).await
                        {
                            tracing::warn!(error = %e, id, "could not send response");
                        }
                    }
                    None => {
                        tokio::spawn(
                            async move {
                                let resp = fut.await;
                                if oneway {
                                    return;
                                }
                                match resp {
                                    Some(p) => {
                                        if let Err(e) = conn.respond(id, p).await {
                                            tracing::warn!(error = %e, id, "could not send response");
                                        }
                                    }
                                    None => {
                                        tracing::debug!(id, "handler gave no response")
                                    }
                                }
                            }
                            .in_current_span(),
                        );
                    }
                }
            }
        }
    }
}

/// Returns `Pending` once after waking itself, so the scheduler puts this task at the
/// back of its run queue and runs the tasks already waiting first.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.0 {
            std::task::Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    }
}
