//! A module's bulkhead: a cap on its requests in flight (from admission to the reply,
//! time held for a restarting backend included), so one module's storm (a login flood,
//! a slow backend) cannot take every client's in-flight slots, every task and every
//! queue from the others. Over the cap a request is refused at once: the gateway
//! answers `busy: <module> at capacity` instead of queueing it behind the storm.
//!
//! One atomic counter per module: entering and leaving are one atomic operation each.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The in-flight cap of one module.
#[derive(Debug)]
pub struct Bulkhead {
    cap: usize,
    in_flight: AtomicUsize,
}

/// One request inside a bulkhead; dropping it leaves.
#[derive(Debug)]
pub struct Permit<'a> {
    bulkhead: &'a Bulkhead,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.bulkhead.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Bulkhead {
    /// A bulkhead letting `cap` requests in at once (at least one).
    pub fn new(cap: usize) -> Bulkhead {
        Bulkhead {
            cap: cap.max(1),
            in_flight: AtomicUsize::new(0),
        }
    }

    /// Enters, unless `cap` requests are inside already.
    pub fn try_enter(&self) -> Option<Permit<'_>> {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.cap).then_some(n + 1)
            })
            .ok()
            .map(|_| Permit { bulkhead: self })
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
        let b = Bulkhead::new(2);
        let p1 = b.try_enter().unwrap();
        let p2 = b.try_enter().unwrap();
        assert!(b.try_enter().is_none());
        assert_eq!(b.in_flight(), 2);
        drop(p1);
        let p3 = b.try_enter().unwrap();
        assert!(b.try_enter().is_none());
        drop((p2, p3));
        assert_eq!(b.in_flight(), 0);
        assert_eq!(Bulkhead::new(0).cap(), 1);
    }
}
