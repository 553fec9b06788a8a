//! The latencies hedging reads its delay from: a rotating histogram, as tower's
//! `hedge` keeps one. Calls record into the current period's counts; the delay is read
//! from the last full period's, so a burst of slow answers raises the delay one period
//! later rather than at once, and a reading never sees a half-filled period.
//!
//! Buckets are log-linear (four per power of two of microseconds, about 19 % wide),
//! atomic counters: recording is one atomic add, reading a walk of 160 counters.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Sub-buckets per power of two.
const SUB: u32 = 4;
/// Buckets: up to 2^40 µs (12 days); longer latencies share the last.
const BUCKETS: usize = 40 * SUB as usize;

fn bucket_of(latency: Duration) -> usize {
    let us = (latency.as_micros() as u64).max(1);
    let octave = 63 - us.leading_zeros();
    // The two bits after the leading one pick the quarter of the octave.
    let quarter = if octave >= 2 {
        (us >> (octave - 2)) & 3
    } else {
        (us << (2 - octave)) & 3
    };
    ((octave * SUB) as usize + quarter as usize).min(BUCKETS - 1)
}

/// The upper bound of bucket `b`.
fn upper_of(b: usize) -> Duration {
    let octave = b as u32 / SUB;
    let quarter = u64::from(b as u32 % SUB);
    let base = 1u64 << octave;
    // The bucket holds [base * (4 + quarter) / 4, base * (5 + quarter) / 4).
    Duration::from_micros((base * (5 + quarter)).div_ceil(4))
}

/// Latencies of the current and the last period.
pub(super) struct Latencies {
    counts: [Box<[AtomicU64; BUCKETS]>; 2],
    /// Which of `counts` records now.
    current: AtomicU8,
    /// When the current period began, in nanoseconds since `epoch`.
    began: AtomicU64,
    epoch: Instant,
    period: Duration,
}

impl Latencies {
    pub fn new(period: Duration) -> Latencies {
        let zeroed = || Box::new(std::array::from_fn(|_| AtomicU64::new(0)));
        Latencies {
            counts: [zeroed(), zeroed()],
            current: AtomicU8::new(0),
            began: AtomicU64::new(0),
            epoch: Instant::now(),
            period: period.max(Duration::from_millis(10)),
        }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Starts a new period when the current one is over: the current counts become the
    /// last period's, the other array is cleared and records from now on. A recording
    /// racing the clearing may be lost: a latency is a sample, not a count to keep.
    fn rotate(&self) {
        let now = self.now();
        let began = self.began.load(Ordering::Acquire);
        if now.saturating_sub(began) < self.period.as_nanos() as u64 {
            return;
        }
        if self
            .began
            .compare_exchange(began, now, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        let next = 1 - self.current.load(Ordering::Acquire);
        for c in self.counts[next as usize].iter() {
            c.store(0, Ordering::Relaxed);
        }
        self.current.store(next, Ordering::Release);
    }

    /// Counts one answer that took `latency`.
    pub fn record(&self, latency: Duration) {
        self.rotate();
        let current = self.current.load(Ordering::Acquire) as usize;
        self.counts[current][bucket_of(latency)].fetch_add(1, Ordering::Relaxed);
    }

    /// The `percentile` (0 to 100) of the last full period, rounded up to its bucket's
    /// bound; `None` with fewer than `min_samples` answers in it.
    pub fn percentile(&self, percentile: f64, min_samples: u64) -> Option<Duration> {
        self.rotate();
        let last = &self.counts[1 - self.current.load(Ordering::Acquire) as usize];
        // The last period is closed: read twice (sum, then walk) without a copy; only a
        // recording racing a rotation can still land in it.
        let total: u64 = last.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        if total < min_samples.max(1) {
            return None;
        }
        let rank = ((percentile / 100.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (b, n) in last.iter().enumerate() {
            seen += n.load(Ordering::Relaxed);
            if seen >= rank {
                return Some(upper_of(b));
            }
        }
        Some(upper_of(BUCKETS - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_bound_what_they_hold() {
        let mut last = 0;
        for us in [
            1u64, 2, 3, 4, 5, 7, 8, 100, 999, 1000, 1234, 65_000, 10_000_000,
        ] {
            let d = Duration::from_micros(us);
            let b = bucket_of(d);
            assert!(b >= last, "{us} µs in bucket {b}, before {last}");
            assert!(
                upper_of(b) >= d,
                "{us} µs above its bucket's bound {:?}",
                upper_of(b)
            );
            // About 25 % wide at most.
            assert!(
                upper_of(b).as_micros() as f64 <= us as f64 * 1.25 + 1.0,
                "{us}"
            );
            last = b;
        }
        assert_eq!(bucket_of(Duration::from_secs(86_400 * 365)), BUCKETS - 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_percentile_is_the_last_full_periods() {
        let l = Latencies::new(Duration::from_secs(1));
        for i in 0..100u64 {
            l.record(Duration::from_micros(100 + i * 10)); // 100 µs to 1090 µs
        }
        // Still the first period: nothing full to read.
        assert_eq!(l.percentile(95.0, 20), None);
        tokio::time::advance(Duration::from_millis(1001)).await;
        let p95 = l.percentile(95.0, 20).expect("a full period");
        // The 95th of 100..1090 µs is 1040 µs; its bucket's bound is within 25 %.
        assert!(
            p95 >= Duration::from_micros(1040) && p95 <= Duration::from_micros(1300),
            "{p95:?}"
        );
        assert_eq!(
            l.percentile(95.0, 101),
            None,
            "fewer samples than asked for"
        );
        // A period with nothing recorded: the next reading has no data.
        tokio::time::advance(Duration::from_millis(1001)).await;
        assert_eq!(l.percentile(95.0, 20), None);
    }
}
