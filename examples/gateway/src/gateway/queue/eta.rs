//! The ETA a waiting client is told: its position divided by the admission rate
//! measured over the last admissions (at most the configured rate); before anything
//! was measured, the configured rate; with neither, no estimate.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{LoginQueue, State};

/// Admissions the ETA is measured over.
const MEASURED: usize = 32;
/// An ETA is never said to be longer than this.
const MAX_ETA: Duration = Duration::from_secs(24 * 3600);

/// When the last admissions through the gate happened (at most `MEASURED`).
#[derive(Default)]
pub(super) struct Admissions(VecDeque<Instant>);

impl Admissions {
    /// Records an admission at `at`, forgetting the oldest past `MEASURED`.
    pub(super) fn record(&mut self, at: Instant) {
        if self.0.len() == MEASURED {
            self.0.pop_front();
        }
        self.0.push_back(at);
    }
}

impl LoginQueue {
    /// The admissions a second the ETA is computed with.
    fn rate_estimate(&self, st: &State, now: Instant) -> Option<f64> {
        let configured =
            (self.settings.admit_per_sec > 0).then_some(self.settings.admit_per_sec as f64);
        let measured = match st.admissions.0.front() {
            Some(first) if st.admissions.0.len() >= 2 => {
                let span = now.duration_since(*first).max(Duration::from_secs(1));
                Some(st.admissions.0.len() as f64 / span.as_secs_f64())
            }
            _ => None,
        };
        match (measured, configured) {
            (Some(m), Some(c)) => Some(m.min(c)),
            (m, c) => m.or(c),
        }
    }

    /// The expected wait at `position`, if there is an estimate.
    pub fn eta(&self, position: usize) -> Option<Duration> {
        let st = self.lock();
        let rate = self.rate_estimate(&st, Instant::now())?;
        let secs = position as f64 / rate;
        Some(Duration::try_from_secs_f64(secs).map_or(MAX_ETA, |d| d.min(MAX_ETA)))
    }
}
