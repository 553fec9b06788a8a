//! A sliding window of outcomes (successes and failures over the last `width`), as ten
//! buckets of `width / 10`: recording and summing are a few array operations, with no
//! allocation, and an outcome leaves the window at most one bucket late.

use std::time::Duration;

use tokio::time::Instant;

const BUCKETS: usize = 10;

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// Which bucket-wide slice of time since `epoch` this bucket counts.
    index: u64,
    ok: u32,
    failed: u32,
}

/// Successes and failures over a sliding window.
#[derive(Debug)]
pub(crate) struct Window {
    epoch: Instant,
    bucket: Duration,
    buckets: [Bucket; BUCKETS],
}

impl Window {
    /// An empty window of `width` (at least 10 ms).
    pub(crate) fn new(width: Duration, now: Instant) -> Window {
        let width = width.max(Duration::from_millis(10));
        Window {
            epoch: now,
            bucket: width / BUCKETS as u32,
            buckets: [Bucket::default(); BUCKETS],
        }
    }

    fn index(&self, now: Instant) -> u64 {
        // Indices start at 1 so that a zeroed bucket never counts as current.
        (now.saturating_duration_since(self.epoch).as_nanos() / self.bucket.as_nanos()) as u64 + 1
    }

    /// Counts one outcome at `now`.
    pub(crate) fn record(&mut self, now: Instant, failed: bool) {
        let i = self.index(now);
        let b = &mut self.buckets[(i % BUCKETS as u64) as usize];
        if b.index != i {
            *b = Bucket {
                index: i,
                ..Bucket::default()
            };
        }
        if failed {
            b.failed = b.failed.saturating_add(1);
        } else {
            b.ok = b.ok.saturating_add(1);
        }
    }

    /// `(successes, failures)` in the window ending at `now`.
    pub(crate) fn totals(&self, now: Instant) -> (u32, u32) {
        let i = self.index(now);
        let oldest = i.saturating_sub(BUCKETS as u64 - 1);
        self.buckets
            .iter()
            .filter(|b| b.index >= oldest && b.index <= i)
            .fold((0u32, 0u32), |(ok, failed), b| {
                (ok.saturating_add(b.ok), failed.saturating_add(b.failed))
            })
    }

    /// Forgets every outcome.
    pub(crate) fn clear(&mut self) {
        self.buckets = [Bucket::default(); BUCKETS];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_forgets_what_slides_out() {
        let t0 = Instant::now();
        let mut w = Window::new(Duration::from_secs(10), t0);
        w.record(t0, true);
        w.record(t0 + Duration::from_secs(3), false);
        w.record(t0 + Duration::from_secs(3), true);
        assert_eq!(w.totals(t0 + Duration::from_secs(3)), (1, 2));
        // Just under 10 s after the first: still in.
        assert_eq!(w.totals(t0 + Duration::from_millis(9_900)), (1, 2));
        // The first bucket slid out.
        assert_eq!(w.totals(t0 + Duration::from_millis(10_100)), (1, 1));
        // A bucket reused for a later slice starts from zero.
        w.record(t0 + Duration::from_secs(13), true);
        assert_eq!(w.totals(t0 + Duration::from_secs(13)), (0, 1));
        w.clear();
        assert_eq!(w.totals(t0 + Duration::from_secs(13)), (0, 0));
    }
}
