//! The gateway's recent history, kept by the gateway itself: every second, the messages
//! forwarded and pushed per second, the p99 of the messages forwarded in that second and
//! the sessions; the last five minutes of it. The status page draws its charts from it
//! and `GET /status.json` serves it, so a page opened (or reloaded) now shows the last
//! five minutes at once, not only what it sampled since it was opened.
//!
//! The p99 comes from a latency histogram of its own, not from the Prometheus
//! exporter's: √2-wide buckets of microseconds, one atomic add per message, read and
//! differenced once a second (the exporter's buckets are for scrapers; reading them
//! back would mean rendering and parsing its text every second).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long the history reaches back.
pub const WINDOW: Duration = Duration::from_secs(300);
/// How often it is sampled.
pub const EVERY: Duration = Duration::from_secs(1);

/// √2-wide buckets of microseconds: 1 µs to about 73 minutes.
const BUCKETS: usize = 64;

/// The bucket of a latency of `us` microseconds: two per power of two.
fn bucket(us: u64) -> usize {
    let us = us.max(1);
    let e = 63 - us.leading_zeros() as usize;
    let half = if e == 0 {
        0
    } else {
        ((us >> (e - 1)) & 1) as usize
    };
    (2 * e + half).min(BUCKETS - 1)
}

/// The upper bound of bucket `b` (exclusive), in milliseconds.
fn upper_ms(b: usize) -> f64 {
    let e = (b / 2) as i32;
    let us = if b.is_multiple_of(2) {
        1.5 * 2f64.powi(e)
    } else {
        2f64.powi(e + 1)
    };
    us / 1000.0
}

/// Latencies of forwarded messages since the gateway started, by bucket.
#[derive(Debug)]
pub struct Latencies([AtomicU64; BUCKETS]);

impl Default for Latencies {
    fn default() -> Self {
        Latencies(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl Latencies {
    /// One message took `took`.
    #[inline]
    pub fn record(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.0[bucket(us)].fetch_add(1, Ordering::Relaxed);
    }

    fn counts(&self) -> [u64; BUCKETS] {
        std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed))
    }
}

/// The 99th percentile (a bucket's upper bound, ms) of the latencies counted between
/// `before` and `now`; `None` when there were none.
fn p99_between(before: &[u64; BUCKETS], now: &[u64; BUCKETS]) -> Option<f64> {
    let diff: Vec<u64> = now
        .iter()
        .zip(before)
        .map(|(n, b)| n.saturating_sub(*b))
        .collect();
    let total: u64 = diff.iter().sum();
    if total == 0 {
        return None;
    }
    let want = (total as f64 * 0.99).ceil() as u64;
    let mut seen = 0;
    for (b, n) in diff.iter().enumerate() {
        seen += n;
        if seen >= want {
            return Some(upper_ms(b));
        }
    }
    None
}

/// One second of the gateway.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Sample {
    /// When it was taken, in milliseconds since the Unix epoch.
    pub t: u64,
    /// Messages forwarded to backends per second.
    pub msgs: f64,
    /// Frames pushed to clients per second.
    pub pushes: f64,
    /// The p99 of the messages forwarded in the second, ms (`None`: none forwarded).
    pub p99_ms: Option<f64>,
    /// Sessions held.
    pub sessions: u64,
}

/// The counters a sample is the difference of.
#[derive(Debug, Clone, Copy)]
pub struct Reading {
    /// Messages forwarded to backends since the gateway started.
    pub forwarded: u64,
    /// Frames pushed to clients since the gateway started.
    pub pushed: u64,
    /// Sessions held now.
    pub sessions: u64,
}

/// The last [`WINDOW`] of samples, and what the next one is taken against.
#[derive(Debug, Default)]
pub struct History {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    samples: VecDeque<Sample>,
    last: Option<(std::time::Instant, Reading, [u64; BUCKETS])>,
}

impl History {
    /// Takes a sample of `reading` and `latencies` now (the first call only sets the
    /// base the next is measured against).
    pub fn sample(&self, reading: Reading, latencies: &Latencies) {
        let now = std::time::Instant::now();
        let counts = latencies.counts();
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, before, before_counts)) = &inner.last {
            let secs = now.duration_since(*at).as_secs_f64().max(1e-3);
            let t = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let sample = Sample {
                t,
                msgs: reading.forwarded.saturating_sub(before.forwarded) as f64 / secs,
                pushes: reading.pushed.saturating_sub(before.pushed) as f64 / secs,
                p99_ms: p99_between(before_counts, &counts),
                sessions: reading.sessions,
            };
            inner.samples.push_back(sample);
            let keep = (WINDOW.as_secs_f64() / EVERY.as_secs_f64()).ceil() as usize;
            while inner.samples.len() > keep {
                inner.samples.pop_front();
            }
        }
        inner.last = Some((now, reading, counts));
    }

    /// The samples of the last [`WINDOW`], oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.samples.iter().copied().collect()
    }
}

/// Samples `shared`'s gateway every [`EVERY`] into its history, until it stops.
pub(crate) async fn sample_until_stopped(shared: std::sync::Arc<super::core::Shared>) {
    let mut every = tokio::time::interval(EVERY);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = shared.stop.cancelled() => return,
        }
        let reading = Reading {
            forwarded: shared.stats.forwarded.load(Ordering::Relaxed),
            pushed: shared.stats.pushed.load(Ordering::Relaxed),
            sessions: shared.sessions.len() as u64,
        };
        shared.history.sample(reading, &shared.metrics.latencies);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_two_per_power_of_two_and_bound_their_values() {
        for us in [1u64, 2, 3, 5, 100, 150, 999, 1000, 1500, 65_000, 4_000_000] {
            let b = bucket(us);
            // Bounds are exclusive: a bucket holds what is below its bound and at or
            // above the one before.
            assert!(upper_ms(b) * 1000.0 > us as f64, "{us} in {b}");
            if b > 0 {
                assert!(upper_ms(b - 1) * 1000.0 <= us as f64, "{us} in {b}");
            }
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn a_sample_is_the_difference_since_the_last_one() {
        let (h, l) = (History::default(), Latencies::default());
        let reading = |forwarded, sessions| Reading {
            forwarded,
            pushed: 0,
            sessions,
        };
        h.sample(reading(10, 1), &l);
        assert!(h.samples().is_empty(), "the first call sets the base");
        for _ in 0..99 {
            l.record(Duration::from_micros(300));
        }
        l.record(Duration::from_millis(40));
        h.sample(reading(110, 2), &l);
        let s = h.samples();
        assert_eq!(s.len(), 1);
        assert!(s[0].msgs > 0.0);
        assert_eq!(s[0].sessions, 2);
        // 99 of 100 took 300 µs: the p99 is that bucket's bound, not the 40 ms one.
        let p99 = s[0].p99_ms.unwrap();
        assert!((0.3..0.5).contains(&p99), "{p99}");
        // Nothing forwarded since: no p99.
        h.sample(reading(110, 2), &l);
        assert_eq!(h.samples()[1].p99_ms, None);
    }
}
