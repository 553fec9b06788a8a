//! Queueing a frame on the request lane, and waiting for what became of it: the
//! delivery status a caller's retry decision rests on (see the parent module).

use tokio::sync::oneshot;

use super::Connection;
use super::lanes::{Outcome, Queued, Reply, ReserveError};
use super::shared::Shared;
use crate::codec::{Frame, MessageType};
use crate::payload::Payload;
use crate::transport::CloseReason;

/// Why sending on a connection failed, with delivery status.
pub(crate) enum SendFailure {
    /// Never handed to a write: safe to send elsewhere.
    NotWritten(CloseReason),
    /// Handed to a write, then the connection failed.
    MaybeDelivered(CloseReason),
    /// No room in the request lane (a `try_*` send, or the deadline passed waiting).
    Full,
}

/// What kind of frame a caller queues.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendKind {
    Request,
    Oneway,
}

/// A frame in the request lane, waiting for its outcome. Dropping it before the outcome
/// (timeout, cancellation) removes the pending entry, so nothing is left behind.
pub(crate) struct Enqueued<'a> {
    shared: &'a Shared,
    id: u32,
    rx: Option<oneshot::Receiver<Outcome>>,
    kind: SendKind,
}

impl Enqueued<'_> {
    /// Waits for the response (requests) or the write (one-way sends).
    pub(crate) async fn outcome(mut self) -> Result<Option<Frame>, SendFailure> {
        let rx = self.rx.as_mut().expect("outcome awaited once");
        let r = rx.await;
        // Settled: nothing to clean up on drop.
        self.rx = None;
        match r {
            Ok(Ok(Some(f))) => Ok(Some(f)),
            Ok(Ok(None)) if self.kind == SendKind::Oneway => Ok(None),
            Ok(Ok(None)) => Err(SendFailure::MaybeDelivered(CloseReason::new(
                "no response frame",
            ))),
            Ok(Err(reason)) => Err(SendFailure::MaybeDelivered(reason)),
            Err(_) => Err(SendFailure::NotWritten(
                self.shared
                    .reason_or("connection closed before the request was written"),
            )),
        }
    }
}

impl Drop for Enqueued<'_> {
    fn drop(&mut self) {
        if let Some(rx) = self.rx.take() {
            // Close the receiver first, then look under the pending lock: the writer
            // checks `is_closed` under that lock before inserting, so an entry is either
            // never inserted or found here. Only a closed entry is ours: the id may
            // have wrapped onto another caller's request.
            drop(rx);
            if self.kind == SendKind::Request {
                let mut p = self.shared.pending();
                if p.get(&self.id).is_some_and(|tx| tx.is_closed()) {
                    p.remove(&self.id);
                }
            }
        }
    }
}

impl Connection {
    pub(super) fn frame_for(&self, payload: Payload, kind: SendKind) -> (Frame, usize) {
        let t = match kind {
            SendKind::Request => MessageType::Request,
            SendKind::Oneway => MessageType::Oneway,
        };
        let frame = payload.into_frame(t, self.shared.next_id());
        // The payload passed `check`, so this cannot fail; the fallback only keeps the
        // accounting conservative.
        let len = frame
            .encoded_len(self.shared.max_frame_len)
            .unwrap_or(self.shared.max_frame_len);
        (frame, len)
    }

    /// Queues a frame (the payload must have passed `payload::check`). With `wait`,
    /// waits for room in the request lane; without, fails with `Full` at once (as
    /// [`Connection::try_enqueue`]).
    pub(crate) async fn enqueue(
        &self,
        payload: Payload,
        kind: SendKind,
        wait: bool,
    ) -> Result<Enqueued<'_>, SendFailure> {
        if !wait {
            return self.try_enqueue(payload, kind);
        }
        if self.is_closed() {
            return Err(self.closed_failure());
        }
        let (frame, len) = self.frame_for(payload, kind);
        let charge = self.shared.lanes.reserve(len).await;
        self.queue_charged(frame, len, charge, kind)
    }

    /// Queues a frame if the request lane has room now, `Full` otherwise. Not `async`:
    /// a caller on the common path carries no waiting state in its future.
    pub(crate) fn try_enqueue(
        &self,
        payload: Payload,
        kind: SendKind,
    ) -> Result<Enqueued<'_>, SendFailure> {
        if self.is_closed() {
            return Err(self.closed_failure());
        }
        let (frame, len) = self.frame_for(payload, kind);
        let charge = self.shared.lanes.try_reserve(len);
        self.queue_charged(frame, len, charge, kind)
    }

    pub(super) fn closed_failure(&self) -> SendFailure {
        SendFailure::NotWritten(self.shared.reason_or("connection closed"))
    }

    /// Puts `frame` in the request lane once its room is reserved (`charge`).
    fn queue_charged(
        &self,
        frame: Frame,
        len: usize,
        charge: Result<u32, ReserveError>,
        kind: SendKind,
    ) -> Result<Enqueued<'_>, SendFailure> {
        let charge = match charge {
            Ok(c) => c,
            Err(ReserveError::Closed) => return Err(self.closed_failure()),
            Err(ReserveError::Full) => return Err(SendFailure::Full),
        };
        let id = frame.request_id;
        let (tx, rx) = oneshot::channel();
        let reply = match kind {
            SendKind::Request => Reply::Response(tx),
            SendKind::Oneway => Reply::Written(tx),
        };
        let q = Queued {
            frame,
            reply,
            len,
            charge,
        };
        if self.shared.lanes.push_request(q).is_err() {
            return Err(self.closed_failure());
        }
        Ok(Enqueued {
            shared: &self.shared,
            id,
            rx: Some(rx),
            kind,
        })
    }
}
