//! The balancer's current snapshot, read per request without a locked instruction.
//!
//! A [`Balancer`](crate::Balancer) swaps in a new [`Snapshot`] on every membership
//! change and reads it on every request. An `ArcSwap` load is lock-free, but it takes
//! and releases a hazard slot: two locked instructions per request, about 9 ns on a
//! CPU where one costs 4.6 ns (half of what the whole per-request path spends outside
//! the pick). Membership changes are rare next to requests, so each thread keeps its
//! own reference to the snapshot it last read, tagged with a generation number; a
//! request compares that number with the shared one (a plain load) and goes to the
//! `ArcSwap` only when a change was installed since.
//!
//! What that costs: a thread keeps the snapshot it last picked from (its endpoints and
//! their payloads) until it picks from the same balancer again, or the balancer is
//! dropped. With a fixed pool of worker threads (a tokio runtime) that is at most one
//! stale snapshot per worker. Payloads should therefore not rely on being dropped to
//! release what a departed endpoint holds (the rpc-client's connection task ends when
//! its endpoint leaves, whoever still holds a handle to it); a thread's entry is
//! reused by the next thread given its id, and freed with the balancer.

use std::cell::{Cell, UnsafeCell};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use thread_local::ThreadLocal;

use crate::Snapshot;

/// The shared current snapshot, its generation, and every thread's copy.
pub(crate) struct Current {
    shared: ArcSwap<Snapshot>,
    /// Moves forward after each store: a copy tagged with this number is current.
    generation: AtomicU64,
    local: ThreadLocal<Local>,
}

/// One thread's copy. Only its own thread touches it (`ThreadLocal` hands each thread
/// its own entry), so plain cells do.
struct Local {
    /// Set while a read borrows `snapshot`: a nested read on the same thread (a
    /// picker or a payload's drop calling back into the balancer) goes to the shared
    /// snapshot instead of replacing the one borrowed.
    busy: Cell<bool>,
    /// The generation `snapshot` was current at; `u64::MAX` (never reached): none.
    generation: Cell<u64>,
    snapshot: UnsafeCell<Option<Arc<Snapshot>>>,
}

impl Default for Local {
    fn default() -> Self {
        Local {
            busy: Cell::new(false),
            generation: Cell::new(u64::MAX),
            snapshot: UnsafeCell::new(None),
        }
    }
}

/// Clears `busy` when the read ends, a panic included.
struct Borrowed<'a>(&'a Cell<bool>);

impl Drop for Borrowed<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl Current {
    pub(crate) fn new(snapshot: Snapshot) -> Self {
        Current {
            shared: ArcSwap::from_pointee(snapshot),
            generation: AtomicU64::new(0),
            local: ThreadLocal::new(),
        }
    }

    /// Installs `snapshot`: every read that starts after this returns sees it.
    pub(crate) fn store(&self, snapshot: Arc<Snapshot>) {
        self.shared.store(snapshot);
        // After the store: a reader that sees the new number loads (at least) the
        // new snapshot.
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The current snapshot, shared (for membership changes and inspection).
    pub(crate) fn load_full(&self) -> Arc<Snapshot> {
        self.shared.load_full()
    }

    /// The current snapshot, briefly (for inspection).
    pub(crate) fn load(&self) -> arc_swap::Guard<Arc<Snapshot>> {
        self.shared.load()
    }

    /// Runs `f` on the current snapshot, through this thread's copy: no locked
    /// instruction unless a change was installed since this thread's last read.
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&Snapshot) -> R) -> R {
        let generation = self.generation.load(Ordering::Acquire);
        let local = self.local.get_or(Local::default);
        if local.busy.get() {
            return f(&self.shared.load());
        }
        // A copy tagged with the current generation exists (an empty cell is tagged
        // `u64::MAX`, never reached).
        let stale = (local.generation.get() != generation).then(|| self.refresh(local, generation));
        local.busy.set(true);
        let borrowed = Borrowed(&local.busy);
        // SAFETY: `local` is this thread's alone, and nothing else borrows its
        // snapshot: `busy` was clear, and now keeps nested reads from replacing it
        // while `f` borrows it.
        let snapshot = unsafe { &*local.snapshot.get() };
        let out = match snapshot {
            Some(s) => f(s),
            None => f(&self.shared.load()),
        };
        drop(borrowed);
        // The replaced copy is dropped last, when nothing borrows the cell (its
        // endpoints' payloads may run code that reads this balancer again).
        drop(stale);
        out
    }

    /// Replaces this thread's copy with the shared snapshot; returns the old copy.
    #[cold]
    #[inline(never)]
    fn refresh(&self, local: &Local, generation: u64) -> Option<Arc<Snapshot>> {
        let fresh = self.shared.load_full();
        local.generation.set(generation);
        // SAFETY: this thread's cell, not borrowed (`busy` is clear).
        unsafe { (*local.snapshot.get()).replace(fresh) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn len(c: &Current) -> usize {
        c.with(|s| s.len())
    }

    /// A snapshot of `n` endpoints.
    fn snapshot(n: usize) -> Arc<Snapshot> {
        let instances: Vec<_> = (1..=n)
            .map(|i| meshline_instance::Instance::parse(&format!("10.0.0.{i}:8091")).unwrap())
            .collect();
        let b = crate::Balancer::new(crate::by_name("RandomLoadBalance").unwrap());
        b.update(&instances);
        b.snapshot()
    }

    #[test]
    fn a_read_after_a_store_sees_it_on_every_thread() {
        let c = Arc::new(Current::new(Snapshot::empty()));
        assert_eq!(len(&c), 0);
        c.store(snapshot(3));
        assert_eq!(len(&c), 3);
        let other = c.clone();
        std::thread::spawn(move || assert_eq!(len(&other), 3))
            .join()
            .unwrap();
        c.store(snapshot(2));
        assert_eq!(len(&c), 2);
        let other = c.clone();
        std::thread::spawn(move || assert_eq!(len(&other), 2))
            .join()
            .unwrap();
    }

    #[test]
    fn the_replaced_copy_is_released_by_the_next_read() {
        let c = Current::new(Snapshot::empty());
        let first = snapshot(1);
        c.store(first.clone());
        assert_eq!(len(&c), 1);
        assert_eq!(
            Arc::strong_count(&first),
            3,
            "shared, this thread's copy, ours"
        );
        c.store(snapshot(2));
        assert_eq!(Arc::strong_count(&first), 2, "this thread's copy, ours");
        assert_eq!(len(&c), 2);
        assert_eq!(Arc::strong_count(&first), 1, "ours alone");
    }

    #[test]
    fn a_nested_read_leaves_the_borrowed_copy_alone() {
        let c = Current::new(Snapshot::empty());
        let first = snapshot(1);
        c.store(first.clone());
        let seen = c.with(|s| {
            // A change installed while this read runs: the nested read sees it, and
            // the copy borrowed here stays (this thread's copy and ours hold it).
            c.store(snapshot(3));
            let nested = len(&c);
            (s.len(), nested, Arc::strong_count(&first))
        });
        assert_eq!(seen, (1, 3, 2));
        // The next read replaces the copy.
        assert_eq!(len(&c), 3);
        assert_eq!(Arc::strong_count(&first), 1);
    }
}
