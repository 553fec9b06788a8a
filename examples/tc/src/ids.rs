//! Transaction and branch ids as Seata's `IdWorker` makes them: a 10-bit worker id in
//! the top bits, then milliseconds since Seata's epoch shifted by 12, incremented once
//! per id (so ids keep growing however fast they are taken), all positive `i64`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Seata's `IdWorker.twepoch`: 2020-05-03 in Unix milliseconds.
const EPOCH_MS: u64 = 1_588_435_200_000;

/// Hands out unique, growing ids.
#[derive(Debug)]
pub struct IdWorker {
    worker: u64,
    next: AtomicU64,
}

impl IdWorker {
    /// Ids for worker `worker` (its low 10 bits are used).
    pub fn new(worker: u16) -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(EPOCH_MS);
        IdWorker {
            worker: u64::from(worker & 0x3ff) << 53,
            next: AtomicU64::new((now.saturating_sub(EPOCH_MS) & ((1 << 41) - 1)) << 12),
        }
    }

    /// The next id.
    pub fn next_id(&self) -> i64 {
        let n = self.next.fetch_add(1, Ordering::Relaxed) & ((1 << 53) - 1);
        (self.worker | n) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_positive_unique_and_growing() {
        let w = IdWorker::new(0x3ff);
        let a = w.next_id();
        let b = w.next_id();
        assert!(a > 0 && b == a + 1);
        assert_eq!((a as u64) >> 53, 0x3ff);
    }
}
