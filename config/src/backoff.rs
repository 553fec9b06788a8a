//! Jittered exponential backoff for reconnect loops.
//!
//! Every reconnect loop in meshline (registry sessions, watches, rpc connections) uses
//! this, so a fleet of clients that lost the same server does not come back in lock
//! step. The delay before attempt *n* (counting from 0) is drawn uniformly from
//! `[d/2, d]` where `d = min(max, initial * 2^n)` ("equal jitter"): never shorter than
//! half the nominal delay, never longer than `max`.

use std::time::Duration;

/// Jittered exponential backoff state. Call [`next_delay`](Backoff::next_delay) after
/// each failure and [`reset`](Backoff::reset) after a success.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    attempt: u32,
}

impl Default for Backoff {
    /// 100 ms doubling up to 10 s.
    fn default() -> Self {
        Backoff::new(Duration::from_millis(100), Duration::from_secs(10))
    }
}

impl Backoff {
    /// A backoff starting at `initial` and capped at `max` (both clamped to at least
    /// 1 ms; `max` is raised to `initial` if smaller).
    pub fn new(initial: Duration, max: Duration) -> Self {
        let initial = initial.max(Duration::from_millis(1));
        Backoff {
            initial,
            max: max.max(initial),
            attempt: 0,
        }
    }

    /// The nominal (un-jittered) delay for the current attempt: `min(max, initial*2^n)`.
    pub fn nominal(&self) -> Duration {
        let factor = 1u32.checked_shl(self.attempt.min(31)).unwrap_or(u32::MAX);
        self.initial
            .checked_mul(factor)
            .unwrap_or(self.max)
            .min(self.max)
    }

    /// The delay to wait before the next attempt; advances the attempt counter.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.nominal();
        self.attempt = self.attempt.saturating_add(1);
        let half = d / 2;
        let span = (d - half).as_nanos() as u64;
        half + Duration::from_nanos(if span == 0 {
            0
        } else {
            fastrand::u64(0..=span)
        })
    }

    /// Sleeps for [`next_delay`](Self::next_delay).
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }

    /// Back to the first delay (call after a success).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// How many delays were handed out since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_stay_within_bounds_and_grow_to_the_cap() {
        let initial = Duration::from_millis(100);
        let max = Duration::from_secs(5);
        let mut b = Backoff::new(initial, max);
        for n in 0..200u32 {
            let nominal = (initial * 2u32.saturating_pow(n.min(20))).min(max);
            assert_eq!(b.nominal(), nominal, "attempt {n}");
            let d = b.next_delay();
            assert!(
                d >= nominal / 2 && d <= nominal,
                "attempt {n}: {d:?} outside [{:?}, {nominal:?}]",
                nominal / 2
            );
        }
        assert_eq!(b.nominal(), max);
        b.reset();
        assert_eq!(b.nominal(), initial);
        assert_eq!(b.attempts(), 0);
    }

    #[test]
    fn jitter_spreads_values() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..50 {
            let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
            seen.insert(b.next_delay());
        }
        assert!(seen.len() > 10, "jitter should spread delays, got {seen:?}");
    }

    #[test]
    fn degenerate_inputs_are_clamped() {
        // A zero initial delay is raised to 1 ms (and a zero max with it): delays are
        // in [0.5 ms, 1 ms], never a busy loop of zero-length sleeps.
        let mut b = Backoff::new(Duration::ZERO, Duration::ZERO);
        for n in 0..50 {
            assert_eq!(b.nominal(), Duration::from_millis(1), "attempt {n}");
            let d = b.next_delay();
            assert!(
                d >= Duration::from_micros(500) && d <= Duration::from_millis(1),
                "attempt {n}: {d:?}"
            );
        }
        // A max below the initial delay is raised to it: the initial delay is kept,
        // not cut to the max.
        let mut b = Backoff::new(Duration::from_secs(2), Duration::from_secs(1));
        for n in 0..50 {
            assert_eq!(b.nominal(), Duration::from_secs(2), "attempt {n}");
            let d = b.next_delay();
            assert!(
                d >= Duration::from_secs(1) && d <= Duration::from_secs(2),
                "attempt {n}: {d:?}"
            );
        }
    }
}
