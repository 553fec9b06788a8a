//! Telling a silent peer from a quiet one.
//!
//! A peer that crashed answers with a reset, and the connection closes at once. A peer
//! whose host vanished, whose link was cut or that froze answers nothing at all: TCP
//! keeps the connection open and keeps our bytes in its buffers, and every request
//! written to it waits for its timeout. Two rules find such a peer:
//!
//! - **Busy** (requests or a PING are waiting for an answer): when the peer has sent no
//!   byte for [`Probe::after`] since we started waiting, a PING goes out (a live peer
//!   answers it at once, even while its handlers are slow: PONGs are answered by the
//!   reader); when nothing comes back within [`Probe::timeout`] either, the connection
//!   is closed as silent. Every request in flight on it then fails as "may have been
//!   delivered" at once instead of at its own timeout, and the endpoint leaves the
//!   alive set. A peer that stops for longer than `after + timeout` (a long GC pause)
//!   is treated the same way: that is the price of finding a dead one in well under a
//!   second.
//! - **Idle**: nothing received for `read_idle` closes the connection (the heartbeat's
//!   PINGs make a live peer answer well before that).
//!
//! The writer arms the busy rule when it writes requests or a PING; every read disarms
//! it, or restarts its clock when requests are still outstanding. Bytes waiting in the
//! socket always count before a deadline: a deadline that passed while our own
//! runtime was stalled says nothing about the peer when its answer is there.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::tcp::OwnedReadHalf;
use tokio::time::Instant;

use super::Shared;
use crate::codec::Frame;
use crate::transport::{CloseReason, Probe};

/// When we started waiting for the peer (nanoseconds since the connection's epoch, plus
/// one; zero: not waiting), shared by the writer (arms) and the reader (disarms).
#[derive(Debug)]
pub(crate) struct Awaiting {
    epoch: Instant,
    since: AtomicU64,
}

impl Awaiting {
    pub fn new() -> Self {
        Awaiting {
            epoch: Instant::now(),
            since: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64 + 1
    }

    /// Starts the clock unless it runs. True when it was stopped (the reader must hear
    /// of the new deadline).
    pub fn arm(&self) -> bool {
        self.since
            .compare_exchange(0, self.now(), Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// The peer spoke: stop the clock, or restart it while answers are still due.
    pub fn heard(&self, still_waiting: bool) {
        let v = if still_waiting { self.now() } else { 0 };
        self.since.store(v, Ordering::Release);
    }

    fn since(&self) -> Option<Instant> {
        match self.since.load(Ordering::Acquire) {
            0 => None,
            n => Some(self.epoch + Duration::from_nanos(n - 1)),
        }
    }
}

/// The reader's side: waits for the socket to be readable, or for one of the rules to
/// close the connection.
pub(super) struct Liveness {
    pub probe: Option<Probe>,
    pub read_idle: Option<Duration>,
    pub last_read: Instant,
    /// When the probe PING went out, while it is unanswered.
    probe_sent: Option<Instant>,
}

impl Liveness {
    pub fn new(probe: Option<Probe>, read_idle: Option<Duration>) -> Self {
        Liveness {
            probe,
            read_idle,
            last_read: Instant::now(),
            probe_sent: None,
        }
    }

    /// Bytes arrived.
    pub fn heard(&mut self, shared: &Shared) {
        self.last_read = Instant::now();
        self.probe_sent = None;
        if self.probe.is_some() {
            let waiting = !shared.pending().is_empty() || !shared.merges().is_empty();
            shared.awaiting.heard(waiting);
        }
    }

    /// Waits until `rd` is readable; `Err` when a rule closes the connection.
    pub async fn readable(
        &mut self,
        shared: &Shared,
        rd: &OwnedReadHalf,
    ) -> Result<(), CloseReason> {
        loop {
            let busy = self.probe.zip(shared.awaiting.since());
            let deadline = match (busy, self.probe_sent) {
                (Some((p, _)), Some(sent)) => Some(sent + p.timeout),
                (Some((p, since)), None) => Some(since.max(self.last_read) + p.after),
                (None, _) => self.read_idle.map(|idle| self.last_read + idle),
            };
            let armed = shared.armed.notified();
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            // Readable first: when this task wakes late (its own runtime was busy or
            // blocked) to a passed deadline *and* bytes waiting, the peer did answer;
            // judging the deadline first would close a live connection for our stall.
            tokio::select! {
                biased;
                r = rd.readable() => return r.map_err(|e| CloseReason::io("read failed", e)),
                // The writer started waiting for answers: a nearer deadline.
                _ = armed => continue,
                _ = sleep => {}
            }
            match (busy, self.probe_sent) {
                (Some((p, _)), Some(sent)) => {
                    return Err(CloseReason::new(format!(
                        "peer silent: no answer to requests or to a PING for {:?} \
                         (transport.probeAfter {:?} + probeTimeout {:?}); the host may be \
                         gone or the link cut",
                        sent.saturating_duration_since(self.last_read) + p.timeout,
                        p.after,
                        p.timeout
                    )));
                }
                (Some(_), None) => {
                    tracing::debug!("peer quiet with answers outstanding: probing with a PING");
                    self.probe_sent = Some(Instant::now());
                    shared.queue_response(Frame::ping(shared.next_id()))?;
                }
                (None, _) => {
                    if let Some(idle) = self.read_idle
                        && self.last_read.elapsed() >= idle
                    {
                        return Err(CloseReason::new(format!(
                            "nothing received for {idle:?} (read idle)"
                        )));
                    }
                }
            }
        }
    }
}
