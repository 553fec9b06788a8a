//! A concurrency limit (a bulkhead): a cap on requests in flight, so one storm (a
//! flood of callers, a slow server) cannot take every slot, task and queue from the
//! rest. Over the cap a request is refused at once rather than queued behind the
//! storm: a caller can answer "busy" or go elsewhere while the answer still helps.
//!
//! An [`RpcClient`](crate::RpcClient) keeps one per client
//! ([`CallLimits::max_in_flight`](super::CallLimits::max_in_flight)) and one per
//! endpoint ([`CallLimits::max_in_flight_per_endpoint`](super::CallLimits::max_in_flight_per_endpoint));
//! an application keeps its own where its unit is something else (the example gateway:
//! one per game module).
//!
//! One atomic counter: entering and leaving are one atomic operation each.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A cap on requests in flight.
#[derive(Debug)]
pub struct ConcurrencyLimit {
    cap: usize,
    in_flight: AtomicUsize,
}

/// One request inside a limit; dropping it leaves.
#[derive(Debug)]
#[must_use = "the request leaves the limit when the permit is dropped"]
pub struct Permit<'a> {
    limit: &'a ConcurrencyLimit,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.limit.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One request inside a limit, holding the limit; dropping it leaves.
#[derive(Debug)]
#[must_use = "the request leaves the limit when the permit is dropped"]
pub struct OwnedPermit {
    limit: Arc<ConcurrencyLimit>,
}

impl Drop for OwnedPermit {
    fn drop(&mut self) {
        self.limit.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ConcurrencyLimit {
    /// A limit letting `cap` requests in at once (at least one).
    pub fn new(cap: usize) -> ConcurrencyLimit {
        ConcurrencyLimit {
            cap: cap.max(1),
            in_flight: AtomicUsize::new(0),
        }
    }

    /// Enters, unless `cap` requests are inside already.
    pub fn try_enter(&self) -> Option<Permit<'_>> {
        self.enter().then(|| Permit { limit: self })
    }

    /// Counts one more request in, unless `cap` are inside already.
    fn enter(&self) -> bool {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.cap).then(|| n + 1)
            })
            .is_ok()
    }

    /// Enters as [`try_enter`](Self::try_enter) does, with a permit that holds the
    /// limit itself (for a request that outlives the borrow it started under).
    pub fn try_enter_owned(self: &Arc<Self>) -> Option<OwnedPermit> {
        self.enter().then(|| OwnedPermit {
            limit: self.clone(),
        })
    }

    /// Requests inside now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// The cap.
    pub fn cap(&self) -> usize {
        self.cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_past_the_cap_and_frees_a_slot_on_drop() {
        let b = ConcurrencyLimit::new(2);
        let p1 = b.try_enter().unwrap();
        let p2 = b.try_enter().unwrap();
        assert!(b.try_enter().is_none());
        assert_eq!(b.in_flight(), 2);
        drop(p1);
        let p3 = b.try_enter().unwrap();
        assert!(b.try_enter().is_none());
        drop((p2, p3));
        assert_eq!(b.in_flight(), 0);
        // Owned permits count the same and leave on drop.
        let b = Arc::new(ConcurrencyLimit::new(1));
        let owned = b.try_enter_owned().unwrap();
        assert!(b.try_enter().is_none() && b.try_enter_owned().is_none());
        drop(owned);
        assert_eq!(b.in_flight(), 0);
        assert_eq!(ConcurrencyLimit::new(0).cap(), 1);
    }
}
