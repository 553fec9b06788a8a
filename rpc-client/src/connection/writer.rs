//! The writer task: takes batches from the lanes, encodes them into one buffer, and
//! writes it under the write deadline.
//!
//! A batch is bounded in bytes ([`BATCH_BYTES`]) and frames ([`BATCH_FRAMES`]), and
//! always holds at least one frame (a single frame up to the frame limit goes alone).
//! The buffer is allocated for the batch and dropped after it, so an idle connection
//! holds no write buffer.
//!
//! Delivery bookkeeping happens here, in this order: a request's sender moves into the
//! pending table and a one-way sender into `in_write` *before* the bytes are written.
//! Whatever happens next (an error, the deadline, the task being aborted), those callers
//! are told "may have been delivered"; callers whose frames never reached this point
//! are told "not written".

use std::collections::hash_map::Entry;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::oneshot;

use super::Shared;
use super::lanes::{Lanes, Outcome, Queued, Reply};
use super::merge;
use crate::codec::{Frame, HEADER_LEN};
use crate::deadline_write::write_with_deadline;
use crate::transport::CloseReason;

/// Most bytes gathered into one write (a larger single frame is written alone).
pub(crate) const BATCH_BYTES: usize = 256 * 1024;
/// Most frames gathered into one write.
pub(crate) const BATCH_FRAMES: usize = 256;

pub(super) struct Batch {
    pub responses: Vec<(Frame, usize)>,
    pub requests: Vec<Queued>,
    pub bytes: usize,
}

impl Batch {
    pub fn new() -> Self {
        Batch {
            responses: Vec::new(),
            requests: Vec::new(),
            bytes: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.responses.is_empty() && self.requests.is_empty()
    }

    fn frames(&self) -> usize {
        self.responses.len() + self.requests.len()
    }

    fn full(&self) -> bool {
        self.bytes >= BATCH_BYTES || self.frames() >= BATCH_FRAMES
    }

    /// Moves frames from the lanes into the batch: responses first, then requests, up to
    /// the batch bounds (at least one frame if any is queued).
    pub fn fill(&mut self, lanes: &Lanes) {
        let mut st = lanes.lock();
        while !self.full() {
            let Some((f, len)) = st.responses.pop_front() else {
                break;
            };
            st.response_bytes -= len;
            self.bytes += len;
            self.responses.push((f, len));
        }
        while !self.full() {
            if !self.is_empty() {
                // Do not let one large request push the batch far past its bound.
                match st.requests.front() {
                    Some(q) if self.bytes + q.len > BATCH_BYTES => break,
                    Some(_) => {}
                    None => break,
                }
            }
            let Some(q) = st.requests.pop_front() else {
                break;
            };
            self.bytes += q.len;
            self.requests.push(q);
        }
    }
}

pub(super) async fn write_loop(
    shared: Arc<Shared>,
    mut wr: OwnedWriteHalf,
    write_idle: Option<Duration>,
    ping_codec: u8,
    write_timeout: Option<Duration>,
    probing: bool,
) -> CloseReason {
    // Reused across batches (the common case is many small frames); dropped when the
    // writer goes idle so an idle connection holds nothing. The write buffer too: a busy
    // connection would otherwise allocate (and the allocator consolidate) a buffer of up
    // to `BATCH_BYTES` for every write.
    let mut batch = Batch::new();
    let mut buf = BytesMut::new();
    loop {
        // A heartbeat PING in this batch: the peer owes us a PONG.
        let mut pinged = false;
        // Wait for work (or the write-idle PING).
        loop {
            batch.fill(&shared.lanes);
            if !batch.is_empty() || shared.grpc.get().is_some_and(|l| l.has_control()) {
                break;
            }
            if batch.requests.capacity() > 0 || batch.responses.capacity() > 0 {
                batch = Batch::new();
            }
            if buf.capacity() > 0 {
                buf = BytesMut::new();
            }
            let notified = shared.lanes.wake.notified();
            let control = control_queued(&shared);
            match write_idle {
                Some(idle) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = control => {}
                        _ = tokio::time::sleep(idle) => {
                            let ping = Frame { codec: ping_codec, ..Frame::ping(shared.next_id()) };
                            tracing::trace!("write idle: sending PING");
                            batch.responses.push((ping, HEADER_LEN));
                            batch.bytes += HEADER_LEN;
                            pinged = true;
                            break;
                        }
                    }
                }
                None => {
                    tokio::select! {
                        _ = notified => {}
                        _ = control => {}
                    }
                }
            }
        }
        if !batch.full() && !shared.pending().is_empty() {
            // Other requests are in flight, so their callers are likely runnable right
            // now (woken by responses the reader just dispatched) and about to queue
            // more. Tokio runs a freshly woken task first (its LIFO slot), which would
            // have us write one frame per syscall; stepping aside once lets them queue
            // and turns N writes into one. With nothing in flight we write at once, so
            // low-concurrency latency is unaffected. (Not `tokio::task::yield_now`:
            // that defers the wake-up until the worker parks, which a busy worker may
            // not do for milliseconds.)
            YieldOnce(false).await;
            batch.fill(&shared.lanes);
        }
        if let Some(b) = shared.batch
            && !b.max_wait.is_zero()
            && !batch.full()
            && batch.requests.iter().any(|q| merge::is_mergeable(&q.frame))
            && !shared.pending().is_empty()
        {
            // Seata's client batching waits `maxMergeSendMills` for more requests to
            // merge; here only while others are in flight, when more are likely.
            tokio::time::sleep(b.max_wait).await;
            batch.fill(&shared.lanes);
        }
        let (charge, requests) = encode(&shared, &mut batch, &mut buf);
        let written = match shared.grpc.get() {
            // Also the HTTP/2 control frames the reader queued, when `buf` is empty.
            Some(link) => crate::grpc::writer::write(link, &mut wr, &buf, write_timeout).await,
            None if buf.is_empty() => Ok(()),
            None => write_with_deadline(&mut wr, &buf, write_timeout).await,
        };
        if let Err(reason) = written {
            return reason;
        }
        buf.clear();
        if requests || pinged {
            shared.expect_answer(probing);
        }
        shared.lanes.release(charge);
        let written = std::mem::take(&mut *shared.in_write());
        for tx in written {
            let _ = tx.send(Ok(None));
        }
    }
}

/// Returns when the reader has queued HTTP/2 control frames (acknowledgements, window
/// updates) for a gRPC connection; never on v1. A window update wakes it too: the
/// writer then finds nothing to send and waits again.
async fn control_queued(shared: &Shared) {
    match shared.grpc.get() {
        Some(link) => link.changed.notified().await,
        None => std::future::pending().await,
    }
}

/// Encodes the batch into `buf` (empty, grown to the batch's size) and does the delivery
/// bookkeeping. Returns the request budget the batch held, and whether it holds requests
/// the peer must answer.
fn encode(shared: &Shared, batch: &mut Batch, buf: &mut BytesMut) -> (usize, bool) {
    buf.reserve(batch.bytes);
    batch.bytes = 0;
    for (f, _) in batch.responses.drain(..) {
        if let Err(e) = shared.put(&f, buf) {
            tracing::error!(error = %e, "dropping unframeable response");
        }
    }
    let mut charge = 0usize;
    let mut requests = false;
    let mut pending = None;
    let mut in_write = None;
    let mut mergeable: Vec<(Frame, oneshot::Sender<Outcome>)> = Vec::new();
    for q in batch.requests.drain(..) {
        charge += q.charge as usize;
        let mut frame = q.frame;
        let id = frame.request_id;
        match q.reply {
            Reply::Response(tx) => {
                if shared.batch.is_some() && merge::is_mergeable(&frame) {
                    mergeable.push((frame, tx));
                    continue;
                }
                let table = pending.get_or_insert_with(|| shared.pending());
                // Checked under the pending lock: a caller that gives up closes its
                // receiver first and then removes its entry under this lock, so either
                // we see it closed here or it finds and removes what we insert.
                if tx.is_closed() {
                    continue;
                }
                match table.entry(id) {
                    Entry::Occupied(_) => {
                        // The id space wrapped onto a request still waiting for its
                        // answer. Keep the old one; this one is not written (dropping
                        // `tx` says so) and is retried elsewhere.
                        tracing::warn!(id, "request id still in use after wrapping; not sent");
                    }
                    Entry::Vacant(slot) => {
                        merge::prepare_request(shared, &mut frame);
                        match shared.put(&frame, buf) {
                            Ok(()) => {
                                slot.insert(tx);
                                requests = true;
                            }
                            Err(e) => tracing::error!(error = %e, "dropping unframeable request"),
                        }
                    }
                }
            }
            Reply::Written(tx) => {
                merge::prepare_request(shared, &mut frame);
                if let Err(e) = shared.put(&frame, buf) {
                    tracing::error!(error = %e, "dropping unframeable one-way request");
                    continue;
                }
                in_write.get_or_insert_with(|| shared.in_write()).push(tx);
            }
        }
    }
    if !mergeable.is_empty() {
        let table = pending.get_or_insert_with(|| shared.pending());
        merge::write_merged(shared, mergeable, table, buf);
        requests = true;
    }
    (charge, requests)
}

/// Returns `Pending` once after waking itself, so the scheduler puts this task at the
/// back of its run queue and runs the tasks already waiting first.
struct YieldOnce(bool);

impl std::future::Future for YieldOnce {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            std::task::Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    }
}
