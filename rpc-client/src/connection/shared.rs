//! The state one connection's handle, reader and writer share: the lanes, the pending
//! table, the in-write list, the inbound cap, the close reason and the state slot.

use std::any::Any;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use super::ConnectionId;
use super::lanes::{Lanes, Outcome, PushError};
use super::liveness::Awaiting;
use crate::codec::{Frame, MessageType};
use crate::compress::Compressor;
use crate::payload::Payload;
use crate::transport::BatchOptions;
use crate::transport::CloseReason;

/// The inbound cap: how many handlers run, and a wake-up when one finishes.
pub(crate) struct InboundGate {
    pub active: AtomicUsize,
    pub max: usize,
    pub freed: Notify,
}

impl InboundGate {
    /// Takes a place, waiting while `max` handlers run. Only the reader calls this, so
    /// the check and the increment cannot race each other past the cap.
    pub async fn acquire(&self) {
        loop {
            if self.active.load(Ordering::Acquire) < self.max {
                self.active.fetch_add(1, Ordering::AcqRel);
                return;
            }
            let freed = self.freed.notified();
            if self.active.load(Ordering::Acquire) < self.max {
                continue;
            }
            freed.await;
        }
    }
}

pub(crate) struct Shared {
    pub id: ConnectionId,
    pub lanes: Lanes,
    pub pending: Mutex<HashMap<u32, oneshot::Sender<Outcome>>>,
    /// Merged frames written and not yet fully answered: outer id -> the ids of the
    /// requests inside (each also in `pending`). See `merge.rs`.
    pub merges: Mutex<HashMap<u32, Vec<u32>>>,
    /// Compressor of the Seata request bodies we write.
    pub compressor: Compressor,
    /// Codec of the Seata request bodies we write (seata or protobuf).
    pub codec: u8,
    /// Merge Seata transaction requests (Seata's client batching).
    pub batch: Option<BatchOptions>,
    /// When we started waiting for the peer (see `liveness`).
    pub awaiting: Awaiting,
    /// Wakes the reader when the writer starts waiting for answers.
    pub armed: Notify,
    /// `Connection::ping` callers waiting for their PONG, by PING id.
    pub pings: Mutex<HashMap<u32, oneshot::Sender<()>>>,
    /// One-way senders whose bytes are in the write under way.
    pub in_write: Mutex<Vec<oneshot::Sender<Outcome>>>,
    pub next_id: AtomicU32,
    pub peer: SocketAddr,
    pub label: String,
    pub max_frame_len: usize,
    pub close_reason: OnceLock<CloseReason>,
    /// Asks the connection to close.
    pub shutdown: CancellationToken,
    /// Cancelled once the connection is fully closed.
    pub done: CancellationToken,
    pub inbound: InboundGate,
    /// The gRPC link when the connection speaks Seata's gRPC (set at start for a
    /// client, when the first bytes arrive for a server).
    pub grpc: OnceLock<Arc<crate::grpc::Link>>,
    pub slot: Mutex<Option<Arc<dyn Any + Send + Sync>>>,
}

impl Shared {
    pub fn pending(&self) -> MutexGuard<'_, HashMap<u32, oneshot::Sender<Outcome>>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn pings(&self) -> MutexGuard<'_, HashMap<u32, oneshot::Sender<()>>> {
        self.pings.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The writer wrote something the peer must answer: start the silence clock.
    pub fn expect_answer(&self, probing: bool) {
        if probing && self.awaiting.arm() {
            self.armed.notify_one();
        }
    }

    pub fn merges(&self) -> MutexGuard<'_, HashMap<u32, Vec<u32>>> {
        self.merges.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn in_write(&self) -> MutexGuard<'_, Vec<oneshot::Sender<Outcome>>> {
        self.in_write.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn next_id(&self) -> u32 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Records `reason` (the first one wins) and asks the connection to close.
    pub fn close_with(&self, reason: CloseReason) {
        let _ = self.close_reason.set(reason);
        self.shutdown.cancel();
    }

    pub fn reason_or(&self, default: &str) -> CloseReason {
        self.close_reason
            .get()
            .cloned()
            .unwrap_or_else(|| CloseReason::new(default))
    }

    /// Queues a response or PONG without waiting; a full response lane closes the
    /// connection (the peer is not reading what it asked for).
    pub fn queue_response(&self, frame: Frame) -> Result<(), CloseReason> {
        let len = frame
            .encoded_len(self.max_frame_len)
            .map_err(|e| CloseReason::new(format!("unframeable response: {e}")))?;
        match self.lanes.push_response(frame, len) {
            Ok(()) => Ok(()),
            Err(PushError::Closed) => Err(self.reason_or("connection closed")),
            Err(PushError::OverBudget { queued, budget }) => {
                let reason = CloseReason::new(format!(
                    "the peer sends requests faster than it reads the answers: {queued} bytes \
                     of responses unsent, over the {budget}-byte budget \
                     (transport.responseQueueBytes)"
                ));
                tracing::warn!(%reason, "closing the connection");
                self.close_with(reason.clone());
                Err(reason)
            }
        }
    }

    /// Answers the peer's request `id`. An unframeable answer is logged and dropped (the
    /// peer's call times out); only a connection-level failure is an error.
    pub fn answer(&self, id: u32, payload: Payload) -> Result<(), CloseReason> {
        if let Err(e) = crate::payload::check(&payload, self.max_frame_len) {
            tracing::error!(error = %e, id, "handler answer cannot be framed; dropped");
            return Ok(());
        }
        self.queue_response(payload.into_frame(MessageType::Response, id))
    }
}
