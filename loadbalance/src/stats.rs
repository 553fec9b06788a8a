//! Per-endpoint statistics that outlive picker rebuilds.
//!
//! Every balancer that looks at load (least-active, P2C, bounded-load hashing,
//! fill-one-by-one, load-weighted) reads an [`EndpointStats`]. The counters must survive a
//! membership change: a request that is in flight when the registry pushes a new list
//! must still be counted, and must decrement the *same* counter when it completes. So
//! stats are not owned by a picker: they live in a [`StatsRegistry`] keyed by endpoint
//! identity ([`InstanceKey`](meshline_instance::InstanceKey)) and each [`crate::Endpoint`] holds an `Arc` to its entry.
//!
//! The registry holds weak references: an identity that left the membership and has no
//! request in flight is forgotten on the next update; one that comes back while an old
//! request is still running gets its old counters back, so in-flight counts stay exact.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::board::{Board, Slot};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// A process-wide clock in nanoseconds with a cheap "coarse" reading.
///
/// Reading `Instant::now()` costs tens of nanoseconds on some virtual machines, more than
/// a whole pick should. Pickers only need time to decay latency estimates, which change
/// on the scale of seconds, so they read [`coarse_nanos`]: an atomic that every
/// completion (and every rebuild) moves forward. With no traffic completing the clock
/// stands still, and nothing needs re-balancing then anyway.
pub(crate) mod clock {
    use super::*;

    static EPOCH: OnceLock<Instant> = OnceLock::new();
    static COARSE: AtomicU64 = AtomicU64::new(0);

    /// Precise nanoseconds since the process epoch; also advances the coarse clock.
    pub(crate) fn now_nanos() -> u64 {
        let epoch = *EPOCH.get_or_init(Instant::now);
        let now = u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // Plain load + store keeps the shared line mostly read-only; a lost race only
        // means the coarse clock is a little behind, never ahead.
        if now > COARSE.load(Ordering::Relaxed) {
            COARSE.store(now, Ordering::Relaxed);
        }
        now
    }

    /// The last precise reading anybody took: one relaxed atomic load.
    #[inline]
    pub(crate) fn coarse_nanos() -> u64 {
        COARSE.load(Ordering::Relaxed)
    }
}

/// In-flight requests of a whole group of endpoints (one [`StatsRegistry`]).
///
/// Bounded-load hashing needs the group's total to compute its cap in O(1): for it the
/// total is a counter every request increments and decrements. Keeping that counter
/// costs two atomic operations per request on a line every core shares, so a
/// [`crate::Balancer`] whose algorithm does not read the total
/// ([`crate::LoadBalance::reads_group_in_flight`]) has a group that sums its load
/// board instead, when asked. Either way [`in_flight`](Self::in_flight) is exact.
///
/// A balancer whose algorithm reads no load at all
/// ([`crate::LoadBalance::reads_in_flight`] is `false`) counts nothing: its group
/// reports 0 ([`counts_in_flight`](Self::counts_in_flight) says which).
#[derive(Default)]
pub struct LoadGroup {
    in_flight: AtomicU64,
    /// `None`: `in_flight` is kept by every request. `Some`: nothing is kept; the
    /// total is the sum of this board's counters.
    board: Option<Arc<Board>>,
    counting: Counting,
}

/// What a request counts on its endpoint's stats, fixed for a group's life (so every
/// end matches its begin).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counting {
    /// Nothing: the algorithm reads no load.
    Nothing,
    /// The endpoint's lane on the load board.
    Lanes,
    /// The lane and the group's total.
    #[default]
    LanesAndTotal,
}

impl LoadGroup {
    /// A group whose total is summed from `board` on demand; `counting` is
    /// [`Counting::Lanes`] or [`Counting::Nothing`].
    fn summed(board: Arc<Board>, counting: Counting) -> LoadGroup {
        LoadGroup {
            in_flight: AtomicU64::new(0),
            board: Some(board),
            counting,
        }
    }

    /// Whether requests are counted in flight at all: `false` for a balancer whose
    /// algorithm reads no load, whose endpoints and group then report 0.
    pub fn counts_in_flight(&self) -> bool {
        self.counting != Counting::Nothing
    }

    /// Requests in flight on all endpoints of the group.
    ///
    /// O(1) for a counted group (one built for an algorithm that reads it, and any
    /// group made with `LoadGroup::default()`); otherwise a sum over the group's
    /// counters, under the lock that hands out their slots.
    pub fn in_flight(&self) -> u64 {
        match &self.board {
            None => self.in_flight.load(Ordering::Relaxed),
            Some(board) => board.total(),
        }
    }

    /// Whether every request updates the total (so reading it is one load).
    #[inline]
    pub(crate) fn counted(&self) -> bool {
        self.counting == Counting::LanesAndTotal
    }
}

impl std::fmt::Debug for LoadGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadGroup")
            .field("in_flight", &self.in_flight())
            .field("counting", &self.counting)
            .finish()
    }
}

/// Load, latency and failure counters of one endpoint, shared by every picker built
/// over it and by every [`crate::InFlightGuard`] taken on it.
///
/// All fields are atomics: readers (pickers) never lock; writers are the guards.
/// The struct is cache-line aligned so that two endpoints' latency and failure counters
/// never share a line between cores. The in-flight count is the exception: it is a lane
/// of the registry's dense load board (see `board.rs`), so that least-active can scan a
/// whole cluster's counts with a few vector loads.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct EndpointStats {
    // What every pick and completion touches, first, in one cache line.
    in_flight: Slot,
    /// The group's [`Counting`], copied: a request reads it without reaching the group.
    counting: Counting,
    group: Arc<LoadGroup>,
    successes: AtomicU64,
    failures: AtomicU64,
    consecutive_failures: AtomicU32,
    /// Reported load in per-mille of capacity; `u32::MAX` = never reported.
    reported_load: AtomicU32,
    /// Peak-EWMA latency in nanoseconds, as `f64` bits; 0 = no sample yet.
    ewma_bits: AtomicU64,
    /// Clock reading of the last EWMA update.
    ewma_at: AtomicU64,
    /// `1 / decay` in 1/ns as `f64` bits: the rate at which the estimate decays, in
    /// the update as in every reading. P2C sets its configured decay here
    /// ([`P2cLoadBalance::with_decay`](crate::P2cLoadBalance::with_decay)); the update
    /// used [`DEFAULT_EWMA_DECAY`] whatever P2C decayed with, so a recovered endpoint's
    /// fast answers barely moved its old slow estimate.
    inv_decay_bits: AtomicU64,
    created_at: u64,
}

/// The decay constant of the peak-EWMA latency estimate, as in linkerd and Finagle.
pub const DEFAULT_EWMA_DECAY: Duration = Duration::from_secs(10);

impl EndpointStats {
    /// Fresh stats in their own group (use a [`StatsRegistry`] to share a group).
    pub fn new() -> Self {
        EndpointStats::in_group(Arc::new(LoadGroup::default()))
    }

    /// Fresh stats counted in `group`.
    ///
    /// Their in-flight counter is alone on its own board, so a least-active picker over
    /// such endpoints reads them one by one; stats made by a [`StatsRegistry`] share
    /// the registry's board and are scanned with vector loads.
    pub fn in_group(group: Arc<LoadGroup>) -> Self {
        EndpointStats::on_board(group, &Board::new(), clock::now_nanos())
    }

    /// Fresh stats on `board`, created at clock reading `now` (one reading serves a
    /// whole membership update: the clock costs as much as the rest of the stats).
    pub(crate) fn on_board(group: Arc<LoadGroup>, board: &Arc<Board>, now: u64) -> Self {
        EndpointStats {
            in_flight: board.acquire(),
            counting: group.counting,
            successes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            consecutive_failures: AtomicU32::new(0),
            reported_load: AtomicU32::new(u32::MAX),
            ewma_bits: AtomicU64::new(0),
            ewma_at: AtomicU64::new(0),
            inv_decay_bits: AtomicU64::new(inv_decay_ns(DEFAULT_EWMA_DECAY).to_bits()),
            created_at: now,
            group,
        }
    }

    /// Requests picked on this endpoint whose guard has not been dropped yet; always 0
    /// on a balancer whose algorithm reads no load (see
    /// [`LoadGroup::counts_in_flight`]).
    #[inline]
    pub fn in_flight(&self) -> u64 {
        u64::from(self.in_flight.counter().load(Ordering::Relaxed))
    }

    /// The in-flight counter itself, for a picker that keeps the endpoint alive as long
    /// as it reads the pointer.
    #[inline]
    pub(crate) fn lane(&self) -> std::ptr::NonNull<AtomicU32> {
        std::ptr::NonNull::from(self.in_flight.counter())
    }

    /// The board slot holding the in-flight counter.
    #[inline]
    pub(crate) fn slot(&self) -> &Slot {
        &self.in_flight
    }

    /// Requests recorded as successful.
    pub fn successes(&self) -> u64 {
        self.successes.load(Ordering::Relaxed)
    }

    /// Requests recorded as failed (errors and timeouts).
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Failures since the last success: the "recent failures" a circuit breaker or a
    /// health filter looks at.
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures.load(Ordering::Relaxed)
    }

    /// The group this endpoint's in-flight requests are also counted in.
    pub fn group(&self) -> &Arc<LoadGroup> {
        &self.group
    }

    /// Records the load the backend reports about itself, in per-mille of its capacity
    /// (0 = idle, 1000 = full; larger values are read as full). Used by the
    /// load-weighted game balancer.
    pub fn report_load(&self, per_mille: u32) {
        self.reported_load
            .store(per_mille.min(1000), Ordering::Relaxed);
    }

    /// The last reported load in per-mille, if the backend ever reported one.
    #[inline]
    pub fn reported_load(&self) -> Option<u32> {
        match self.reported_load.load(Ordering::Relaxed) {
            u32::MAX => None,
            v => Some(v),
        }
    }

    /// The current peak-EWMA latency estimate, decayed to now; `None` before the first
    /// recorded success.
    pub fn latency_estimate(&self) -> Option<Duration> {
        let ewma = f64::from_bits(self.ewma_bits.load(Ordering::Relaxed));
        if ewma <= 0.0 {
            return None;
        }
        let at = self.ewma_at.load(Ordering::Relaxed);
        let x = clock::now_nanos().saturating_sub(at) as f64 * self.inv_decay();
        Some(Duration::from_nanos((ewma * (-x).exp()) as u64))
    }

    /// Peak-EWMA estimate in nanoseconds for P2C, decayed with the coarse clock.
    ///
    /// An endpoint without samples is costed at `default_rtt_ns`, decayed from its
    /// creation: it starts expensive (so a fresh endpoint is not flooded before it has
    /// answered once) and becomes attractive if it stays unused.
    #[inline]
    pub(crate) fn rtt_estimate_ns(&self, now: u64, default_rtt_ns: f64, inv_decay_ns: f64) -> f64 {
        let ewma = f64::from_bits(self.ewma_bits.load(Ordering::Relaxed));
        let (base, at) = if ewma > 0.0 {
            (ewma, self.ewma_at.load(Ordering::Relaxed))
        } else {
            (default_rtt_ns, self.created_at)
        };
        // Nanoseconds since the process epoch fit in an i64 (292 years): one
        // conversion instruction, where u64 -> f64 takes several.
        let x = now.saturating_sub(at) as i64 as f64 * inv_decay_ns;
        // e^-x ~ 1 - x within 5e-7 for small x (the usual case: the clock moves with
        // every completion), which spares an `exp` per candidate.
        if x < 1e-3 {
            base * (1.0 - x)
        } else {
            decayed(base, x)
        }
    }

    /// Counts one more request in flight (here, and in the group if it is counted).
    ///
    /// The counter is 32 bits: it cannot wrap, since every count is a live guard.
    #[inline]
    pub(crate) fn begin(&self) {
        match self.counting {
            Counting::Nothing => {}
            Counting::Lanes => {
                self.in_flight.counter().fetch_add(1, Ordering::Relaxed);
            }
            Counting::LanesAndTotal => {
                self.in_flight.counter().fetch_add(1, Ordering::Relaxed);
                self.group.in_flight.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Counts one request out (here, and in the group if it is counted: a group is
    /// counted or not for its whole life, so every end matches its begin).
    #[inline]
    pub(crate) fn end(&self) {
        match self.counting {
            Counting::Nothing => {}
            Counting::Lanes => {
                self.in_flight.counter().fetch_sub(1, Ordering::Relaxed);
            }
            Counting::LanesAndTotal => {
                self.in_flight.counter().fetch_sub(1, Ordering::Relaxed);
                self.group.in_flight.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// The estimate's decay rate (see `inv_decay_bits`).
    #[inline]
    fn inv_decay(&self) -> f64 {
        f64::from_bits(self.inv_decay_bits.load(Ordering::Relaxed))
    }

    /// Sets the estimate's decay rate, `1 / decay` in 1/ns ([`inv_decay_ns`]): P2C's
    /// build gives its own to every endpoint it balances, so that an update blends at
    /// the rate its picks decay at.
    pub(crate) fn set_inv_decay(&self, inv_decay_ns: f64) {
        self.inv_decay_bits
            .store(inv_decay_ns.to_bits(), Ordering::Relaxed);
    }

    /// Records a success and its latency in the peak-EWMA estimate.
    pub(crate) fn record_success(&self, latency: Duration) {
        self.successes.fetch_add(1, Ordering::Relaxed);
        self.consecutive_failures.store(0, Ordering::Relaxed);
        self.record_latency(latency);
    }

    /// Records a failure (an error or a timeout). [`InFlightGuard::failure`](crate::InFlightGuard::failure)
    /// does this as the request ends; a caller whose guard already ended (the call timed
    /// out and its future was dropped) records the timeout here.
    pub fn record_failure(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.consecutive_failures.fetch_add(1, Ordering::Relaxed);
        // Move the coarse clock even when only failures complete.
        clock::now_nanos();
    }

    /// Records a failure that costs as an answer taking `cost` would: counted as
    /// [`record_failure`](Self::record_failure) does, and `cost` fed into the latency
    /// estimate. For a server that answered, fast, that it cannot work (a TC whose
    /// store failed): recorded as a plain failure its fast answers would leave it the
    /// cheapest endpoint to the load-aware balancers, which then send it more of the
    /// traffic the faster it fails. Priced as a slow answer, it loses the picks the way
    /// a slow server does (linkerd and Finagle cost failures the same way), and the
    /// price decays with the estimate.
    pub fn record_failure_costing(&self, cost: Duration) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.consecutive_failures.fetch_add(1, Ordering::Relaxed);
        self.record_latency(cost);
    }

    /// Starts the latency estimate again at `latency`, forgetting what it held. For an
    /// endpoint that returns after being out of the picks (ejected, or priced out by
    /// failures, then answered a probe): what the estimate held was priced while it
    /// failed. Decayed as usual, a failure's price would keep it from the latency-led
    /// picks for a minute after it works again, and with no picks nothing would correct
    /// it sooner. A caller passes what it expects of the endpoint now (the rpc-client:
    /// its costliest peer's estimate, so the endpoint takes a share at once without
    /// drawing every pick before its first answer); its next slower answer replaces it
    /// at once (peak-sensitivity), faster ones blend in.
    pub fn restart_estimate(&self, latency: Duration) {
        let rtt = (latency.as_nanos() as f64).max(1.0);
        self.ewma_bits.store(rtt.to_bits(), Ordering::Relaxed);
        self.ewma_at.store(clock::now_nanos(), Ordering::Relaxed);
    }

    /// Peak-EWMA update (Finagle / tower `PeakEwma`): a sample above the estimate
    /// replaces it at once (peak sensitivity); a lower one is blended in with a weight
    /// that grows with the time since the last update.
    fn record_latency(&self, latency: Duration) {
        let now = clock::now_nanos();
        let rtt = (latency.as_nanos() as f64).max(1.0);
        let prev_at = self.ewma_at.swap(now, Ordering::Relaxed);
        let elapsed = now.saturating_sub(prev_at);
        let mut cur = self.ewma_bits.load(Ordering::Relaxed);
        loop {
            let old = f64::from_bits(cur);
            let next = if old <= 0.0 || rtt > old {
                rtt
            } else {
                let w = (-(elapsed as f64) * self.inv_decay()).exp();
                old * w + rtt * (1.0 - w)
            };
            match self.ewma_bits.compare_exchange_weak(
                cur,
                next.to_bits(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(actual) => cur = actual,
            }
        }
    }
}

impl Default for EndpointStats {
    fn default() -> Self {
        EndpointStats::new()
    }
}

/// `base × e^-x`, out of line: the rare branch of [`EndpointStats::rtt_estimate_ns`],
/// kept out of the pickers' inlined code.
#[cold]
#[inline(never)]
fn decayed(base: f64, x: f64) -> f64 {
    base * (-x).exp()
}

/// `1 / decay` in 1/ns, the decay floored at 1 ms.
pub(crate) fn inv_decay_ns(decay: Duration) -> f64 {
    1.0 / decay.max(Duration::from_millis(1)).as_nanos() as f64
}

mod registry;
pub use registry::StatsRegistry;

#[cfg(test)]
mod tests;
