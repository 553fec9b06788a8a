//! Backpressure towards one client: a bounded send queue.
//!
//! Every client connection has one [`Outbound`] queue between the gateway (routing,
//! fan-out) and the task writing to the socket. A slow client must never grow the
//! gateway's memory or slow other clients, so the queue is bounded in bytes twice:
//!
//! - above the **soft limit**, the *oldest unreliable* frames are dropped to make room
//!   (position updates, chat in a busy room: newer ones supersede them) and counted;
//! - above the **hard limit** (reliable frames alone exceed it), the client is
//!   disconnected with a reason: it cannot keep up, and holding more would only delay
//!   the inevitable at the gateway's expense. What was queued is dropped and a
//!   [`Kick::SlowClient`] is the last frame written (if the client ever reads again).
//!
//! A queue ends in one of two ways: [`Outbound::close`] stops the writer at once (the
//! client is gone, or its connection was taken over), [`Outbound::finish`] writes what is
//! queued and one last frame (a `KICK`), then stops it. Either way later pushes are
//! refused.
//!
//! Pushing never waits, so a fan-out to a thousand members costs a thousand pushes,
//! whatever their sockets are doing.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::kick::Kick;
use super::protocol::ClientFrame;

/// What [`Outbound::push`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Queued.
    Queued,
    /// Queued after dropping this many older unreliable frames.
    QueuedAfterDropping(usize),
    /// The frame itself was unreliable and there was no room: dropped.
    Dropped,
    /// Over the hard limit: the queue is closed and the client must be disconnected.
    Overflow,
    /// The queue was already closed.
    Closed,
}

#[derive(Default)]
struct State {
    queue: VecDeque<ClientFrame>,
    bytes: usize,
    dropped: u64,
    closed: Option<String>,
    /// Closed by [`Outbound::finish`]: the writer still writes what is queued.
    finishing: bool,
    /// The kick that closed the queue, if one did.
    kicked: Option<Kick>,
}

/// One client's send queue.
pub struct Outbound {
    state: Mutex<State>,
    ready: Notify,
    /// Cancelled once the queue is closed (overflow, kick, resume elsewhere).
    closed: CancellationToken,
    soft: usize,
    hard: usize,
    /// Replies on their way: requests of this client being forwarded now.
    replies_due: AtomicUsize,
}

/// A reply on its way (see [`Outbound::expect_reply`]); dropping it says it came.
#[derive(Debug)]
pub struct ReplyDue<'a>(&'a Outbound);

impl Drop for ReplyDue<'_> {
    fn drop(&mut self) {
        self.0.replies_due.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.lock();
        f.debug_struct("Outbound")
            .field("frames", &st.queue.len())
            .field("bytes", &st.bytes)
            .field("dropped", &st.dropped)
            .finish()
    }
}

impl Outbound {
    /// A queue with a soft and a hard byte limit (`hard` is raised to `soft`).
    pub fn new(soft: usize, hard: usize) -> Self {
        Outbound {
            state: Mutex::new(State::default()),
            ready: Notify::new(),
            closed: CancellationToken::new(),
            soft,
            hard: hard.max(soft),
            replies_due: AtomicUsize::new(0),
        }
    }

    /// Counts a reply on its way until the guard is dropped (a forward holds it while it
    /// runs): the writer batches while more than one is due.
    pub fn expect_reply(&self) -> ReplyDue<'_> {
        self.replies_due.fetch_add(1, Ordering::Relaxed);
        ReplyDue(self)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `frame` without waiting, applying the limits.
    pub fn push(&self, frame: ClientFrame) -> Pushed {
        let len = frame.wire_len();
        let outcome = {
            let mut st = self.lock();
            if st.closed.is_some() {
                return Pushed::Closed;
            }
            let mut dropped = 0;
            if st.bytes + len > self.soft {
                // Make room by dropping the oldest unreliable frames.
                let mut i = 0;
                while st.bytes + len > self.soft && i < st.queue.len() {
                    if st.queue[i].is_reliable() {
                        i += 1;
                    } else if let Some(old) = st.queue.remove(i) {
                        st.bytes -= old.wire_len();
                        dropped += 1;
                    }
                }
                st.dropped += dropped as u64;
            }
            if st.bytes + len > self.soft && !frame.is_reliable() {
                st.dropped += 1;
                Pushed::Dropped
            } else if st.bytes + len > self.hard {
                let reason = format!(
                    "send queue over its hard limit ({} bytes queued, limit {}): the client does not keep up",
                    st.bytes + len,
                    self.hard
                );
                st.queue.clear();
                let kick = Kick::SlowClient.frame(&reason);
                st.bytes = kick.wire_len();
                st.queue.push_back(kick);
                st.closed = Some(reason);
                st.finishing = true;
                st.kicked = Some(Kick::SlowClient);
                self.closed.cancel();
                Pushed::Overflow
            } else {
                st.bytes += len;
                st.queue.push_back(frame);
                if dropped > 0 {
                    Pushed::QueuedAfterDropping(dropped)
                } else {
                    Pushed::Queued
                }
            }
        };
        self.ready.notify_one();
        outcome
    }

    /// Takes queued frames (up to `max_bytes`, at least one), waiting for one; `Err`
    /// with the reason once the queue is closed.
    ///
    /// When it had to wait and more replies are on their way (see
    /// [`Outbound::expect_reply`]), it lets the other ready tasks run once before taking:
    /// replies to a client's requests in flight come from tasks woken together, and the
    /// ones that finish in that turn go out in the same write. With nothing else on its
    /// way (one request at a time) it takes at once: nothing to wait for.
    pub async fn next_batch(&self, max_bytes: usize) -> Result<Vec<ClientFrame>, String> {
        let mut waited = false;
        loop {
            if waited && self.replies_due.load(Ordering::Relaxed) > 1 {
                tokio::task::yield_now().await;
            }
            let ready = self.ready.notified();
            {
                let mut st = self.lock();
                if let Some(reason) = &st.closed
                    && (!st.finishing || st.queue.is_empty())
                {
                    return Err(reason.clone());
                }
                if !st.queue.is_empty() {
                    let mut out = Vec::new();
                    let mut bytes = 0;
                    while let Some(f) = st.queue.front() {
                        if !out.is_empty() && bytes + f.wire_len() > max_bytes {
                            break;
                        }
                        let f = st.queue.pop_front().expect("front exists");
                        bytes += f.wire_len();
                        out.push(f);
                    }
                    st.bytes -= bytes;
                    return Ok(out);
                }
            }
            ready.await;
            waited = true;
        }
    }

    /// Closes the queue with `reason` (the writer stops, later pushes are refused). A
    /// queue [finishing](Outbound::finish) still writes its last frame.
    pub fn close(&self, reason: impl Into<String>) {
        let mut st = self.lock();
        if st.closed.is_none() {
            st.closed = Some(reason.into());
        }
        drop(st);
        self.closed.cancel();
        self.ready.notify_one();
    }

    /// Queues `last` (whatever the limits) after what is queued, then closes the queue
    /// with `reason`: the writer writes everything up to `last`, then stops. Later pushes
    /// are refused. Does nothing on a queue already closed.
    pub fn finish(&self, last: ClientFrame, reason: impl Into<String>) {
        let mut st = self.lock();
        if st.closed.is_some() {
            return;
        }
        st.bytes += last.wire_len();
        st.queue.push_back(last);
        st.closed = Some(reason.into());
        st.finishing = true;
        drop(st);
        self.closed.cancel();
        self.ready.notify_one();
    }

    /// Sends `kick` with `text` as the last frame (see [`Outbound::finish`]).
    pub fn kick(&self, kick: Kick, text: &str) {
        {
            let mut st = self.lock();
            if st.closed.is_none() {
                st.kicked = Some(kick);
            }
        }
        self.finish(
            kick.frame(text),
            format!("kicked ({}): {text}", kick.name()),
        );
    }

    /// The kick that closed the queue, if one did.
    pub fn kicked(&self) -> Option<Kick> {
        self.lock().kicked
    }

    /// Waits until the queue is closed.
    pub async fn closed(&self) {
        self.closed.cancelled().await
    }

    /// Why it is closed, if it is.
    pub fn closed_reason(&self) -> Option<String> {
        self.lock().closed.clone()
    }

    /// Unreliable frames dropped so far.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    /// Bytes queued now.
    pub fn queued_bytes(&self) -> usize {
        self.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::super::protocol::{ClientFrame, RELIABLE};
    use super::*;

    fn f(n: usize, reliable: bool) -> ClientFrame {
        ClientFrame::new(1, 1, n as u32, vec![0u8; 87]).with_flags(if reliable {
            RELIABLE
        } else {
            0
        })
    }

    #[test]
    fn soft_limit_drops_oldest_unreliable_and_hard_limit_closes() {
        // Each frame is 100 bytes on the wire.
        let q = Outbound::new(300, 500);
        assert_eq!(q.push(f(0, false)), Pushed::Queued);
        assert_eq!(q.push(f(1, true)), Pushed::Queued);
        assert_eq!(q.push(f(2, false)), Pushed::Queued);
        // Over soft: frame 0 (oldest unreliable) goes.
        assert_eq!(q.push(f(3, false)), Pushed::QueuedAfterDropping(1));
        assert_eq!(q.dropped(), 1);
        // Reliable frames are kept; unreliable ones make room until none is left.
        assert_eq!(q.push(f(4, true)), Pushed::QueuedAfterDropping(1));
        assert_eq!(q.push(f(5, true)), Pushed::QueuedAfterDropping(1));
        // Only reliable ones queued (1, 4, 5): an unreliable newcomer is dropped.
        assert_eq!(q.push(f(6, false)), Pushed::Dropped);
        assert_eq!(q.dropped(), 4);
        assert_eq!(q.push(f(7, true)), Pushed::Queued); // 400 of 500
        assert_eq!(q.push(f(8, true)), Pushed::Queued); // 500 of 500
        assert_eq!(q.push(f(9, true)), Pushed::Overflow);
        assert!(q.closed_reason().unwrap().contains("hard limit"));
        assert_eq!(q.push(f(10, true)), Pushed::Closed);
    }

    #[tokio::test]
    async fn an_overflow_leaves_only_the_kick_to_write() {
        let q = Outbound::new(300, 300);
        for i in 0..3 {
            q.push(f(i, true));
        }
        assert_eq!(q.push(f(3, true)), Pushed::Overflow);
        let last = q.next_batch(10_000).await.unwrap();
        assert_eq!(last.len(), 1);
        let (code, text) = crate::gateway::kick::split_coded(&last[0].payload).unwrap();
        assert_eq!(code, Kick::SlowClient.code());
        assert!(text.contains("hard limit"), "{text}");
        assert!(
            q.next_batch(10_000)
                .await
                .unwrap_err()
                .contains("hard limit")
        );
    }

    #[tokio::test]
    async fn finish_writes_what_is_queued_then_the_last_frame() {
        let q = Outbound::new(10_000, 10_000);
        q.push(f(0, true));
        q.kick(Kick::Abuse, "rate limited: sustained abuse");
        assert_eq!(q.push(f(1, true)), Pushed::Closed);
        let batch = q.next_batch(10_000).await.unwrap();
        assert_eq!(batch.len(), 2);
        assert_eq!(batch[0].seq, 0);
        assert_eq!(&batch[1].payload[..], b"6 rate limited: sustained abuse");
        assert!(q.next_batch(10_000).await.is_err());
        // close() after finish() still lets the last frame go.
        let q = Outbound::new(10_000, 10_000);
        q.kick(Kick::Drain, "bye");
        q.close("gone");
        assert_eq!(q.next_batch(10_000).await.unwrap().len(), 1);
        assert!(q.next_batch(10_000).await.unwrap_err().contains("bye"));
        // close() first: nothing more is written.
        let q = Outbound::new(10_000, 10_000);
        q.push(f(0, true));
        q.close("gone");
        q.kick(Kick::Drain, "bye");
        assert_eq!(q.next_batch(10_000).await.unwrap_err(), "gone");
    }

    #[tokio::test]
    async fn batches_keep_order_and_bound_bytes() {
        let q = Outbound::new(10_000, 10_000);
        for i in 0..10 {
            q.push(f(i, true));
        }
        let a = q.next_batch(350).await.unwrap();
        assert_eq!(a.iter().map(|f| f.seq).collect::<Vec<_>>(), vec![0, 1, 2]);
        let b = q.next_batch(10_000).await.unwrap();
        assert_eq!(b.len(), 7);
        assert_eq!(q.queued_bytes(), 0);
        q.close("bye");
        assert_eq!(q.next_batch(1).await.unwrap_err(), "bye");
    }
}
