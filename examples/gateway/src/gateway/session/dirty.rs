//! Bookkeeping for writing sessions to a shared store off the request path: which
//! sessions changed since their last write, and rate-limited warnings when writes fail.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    Save,
    Delete,
}

/// Sessions whose durable part changed since it was last written.
#[derive(Debug, Default)]
pub(super) struct Dirty {
    pub ids: Mutex<HashMap<String, Change>>,
    pub wake: Notify,
    /// Held by a flush while it writes: a flush that returns `true` has seen every
    /// change marked before it began written, including those another flush had taken
    /// and was still writing.
    pub flushing: tokio::sync::Mutex<()>,
}

impl Dirty {
    pub fn mark(&self, id: &str, change: Change) {
        {
            let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
            let c = ids.entry(id.to_string()).or_insert(change);
            if change == Change::Delete {
                *c = Change::Delete;
            }
        }
        self.wake.notify_one();
    }

    pub fn take(&self) -> Vec<(String, Change)> {
        let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        ids.drain().collect()
    }

    /// Puts back changes that could not be written (newer marks win).
    pub fn put_back(&self, changes: impl IntoIterator<Item = (String, Change)>) {
        let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        for (id, c) in changes {
            ids.entry(id).or_insert(c);
        }
    }

    pub fn len(&self) -> usize {
        self.ids.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// Logs a store failure at warn at most every ten seconds, counting the rest (and all
/// of them, for [`failures`](Self::failures)).
#[derive(Debug, Default)]
pub(super) struct WarnLimiter {
    state: Mutex<(Option<Instant>, u64)>,
    failures: AtomicU64,
}

impl WarnLimiter {
    const EVERY: Duration = Duration::from_secs(10);

    /// Store operations that failed so far.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    pub fn warn(&self, what: &str, error: &dyn std::fmt::Display) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let suppressed = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if st.0.is_some_and(|t| t.elapsed() < Self::EVERY) {
                st.1 += 1;
                return;
            }
            st.0 = Some(Instant::now());
            std::mem::take(&mut st.1)
        };
        tracing::warn!(%error, suppressed, "session store: {what}");
    }
}
