//! governor's keyed limiter with a hard bound on the keys it keeps.
//!
//! A keyed limiter keeps one 8-byte state per key until [`KeyedLimit::sweep`] drops the
//! keys whose state is indistinguishable from a fresh one (governor's `retain_recent`:
//! the key has been quiet for as long as its burst takes to refill). Between sweeps, a
//! flood from many addresses could still add a key per connection; so the store here
//! keeps at most `max_keys`: past that, a key it does not hold is judged as a fresh key
//! would be (its first request passes as governor would pass it) but is not stored.
//! Keys already held — the clients that were busy before the flood — keep being
//! limited, and the gateway-wide limit still counts everything. The next sweep makes
//! room again.

use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::{DashMapStateStore, ShrinkableKeyedStateStore};
use governor::state::{InMemoryState, NotKeyed, StateStore};
use governor::{Quota, RateLimiter};

use super::Rate;

impl Rate {
    /// governor's quota: `per_sec` cells a second, up to `burst` at once.
    pub(crate) fn quota(&self) -> Option<Quota> {
        let per_sec = NonZeroU32::new(self.per_sec)?;
        let burst = NonZeroU32::new(self.burst).unwrap_or(per_sec);
        Some(Quota::per_second(per_sec).allow_burst(burst))
    }
}

/// A DashMap of states that stores at most `max` keys.
pub(crate) struct BoundedStore<K: Hash + Eq + Clone> {
    map: DashMapStateStore<K>,
    max: usize,
    /// Checks made for keys that did not fit (shared with the [`KeyedLimit`]).
    untracked: Arc<AtomicU64>,
}

impl<K: Hash + Eq + Clone> StateStore for BoundedStore<K> {
    type Key = K;

    fn measure_and_replace<T, F, E>(&self, key: &K, f: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        if let Some(state) = self.map.get(key) {
            return state.measure_and_replace(&NotKeyed::NonKey, f);
        }
        if self.map.len() >= self.max {
            // Judged as a fresh key, and forgotten.
            self.untracked.fetch_add(1, Ordering::Relaxed);
            return f(None).map(|(decision, _)| decision);
        }
        self.map
            .entry(key.clone())
            .or_default()
            .measure_and_replace(&NotKeyed::NonKey, f)
    }
}

impl<K: Hash + Eq + Clone> ShrinkableKeyedStateStore<K> for BoundedStore<K> {
    fn retain_recent(&self, drop_below: Nanos) {
        ShrinkableKeyedStateStore::retain_recent(&self.map, drop_below);
    }

    fn shrink_to_fit(&self) {
        ShrinkableKeyedStateStore::shrink_to_fit(&self.map);
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

type Keyed<K, C> = RateLimiter<K, BoundedStore<K>, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// One rate per key (client address, account), at most `max_keys` keys kept.
pub(crate) struct KeyedLimit<K: Hash + Eq + Clone, C: Clock> {
    limiter: Keyed<K, C>,
    rate: Rate,
    untracked: Arc<AtomicU64>,
    /// Keys held after the last shrink: the map is shrunk again when it halves.
    shrunk_at: AtomicUsize,
}

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimit<K, C> {
    /// `None` when `rate` is off.
    pub(crate) fn new(rate: Rate, max_keys: usize, clock: C) -> Option<Self> {
        let quota = rate.quota()?;
        let untracked = Arc::new(AtomicU64::new(0));
        let store = BoundedStore {
            map: DashMapStateStore::default(),
            max: max_keys.max(1),
            untracked: untracked.clone(),
        };
        Some(KeyedLimit {
            limiter: RateLimiter::new(quota, store, clock),
            rate,
            untracked,
            shrunk_at: AtomicUsize::new(0),
        })
    }

    /// Counts one cell for `key`; false when it is over its rate.
    pub(crate) fn allow(&self, key: &K) -> bool {
        self.limiter.check_key(key).is_ok()
    }

    /// The rate.
    pub(crate) fn rate(&self) -> Rate {
        self.rate
    }

    /// Drops the keys that are as good as fresh; gives memory back once the map halved.
    pub(crate) fn sweep(&self) {
        self.limiter.retain_recent();
        let now = self.limiter.len();
        if now <= self.shrunk_at.load(Ordering::Relaxed) / 2 {
            self.limiter.shrink_to_fit();
            self.shrunk_at.store(now, Ordering::Relaxed);
        } else if now > self.shrunk_at.load(Ordering::Relaxed) {
            self.shrunk_at.store(now, Ordering::Relaxed);
        }
    }

    /// Keys held now.
    pub(crate) fn tracked(&self) -> usize {
        self.limiter.len()
    }

    /// Checks made for keys that did not fit under the bound.
    pub(crate) fn untracked(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }
}

/// One rate for everything (the gateway-wide connection rate).
pub(crate) struct DirectLimit<C: Clock> {
    limiter: RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<C::Instant>>,
    rate: Rate,
}

impl<C: Clock> DirectLimit<C> {
    /// `None` when `rate` is off.
    pub(crate) fn new(rate: Rate, clock: C) -> Option<Self> {
        Some(DirectLimit {
            limiter: RateLimiter::direct_with_clock(rate.quota()?, clock),
            rate,
        })
    }

    /// Counts one cell; false when over the rate.
    pub(crate) fn allow(&self) -> bool {
        self.limiter.check().is_ok()
    }

    /// The rate.
    pub(crate) fn rate(&self) -> Rate {
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use governor::clock::FakeRelativeClock;

    use super::*;

    #[test]
    fn a_key_gets_its_burst_then_its_rate() {
        let clock = FakeRelativeClock::default();
        let l = KeyedLimit::new(Rate::per_sec(2).burst(4), 100, clock.clone()).unwrap();
        let passed = (0..10).filter(|_| l.allow(&"a")).count();
        assert_eq!(passed, 4);
        // Another key has its own bucket.
        assert!(l.allow(&"b"));
        clock.advance(Duration::from_millis(500));
        assert!(l.allow(&"a"));
        assert!(!l.allow(&"a"));
        assert!(KeyedLimit::<&str, _>::new(Rate::OFF, 100, clock).is_none());
    }

    #[test]
    fn the_store_never_holds_more_than_its_bound() {
        let clock = FakeRelativeClock::default();
        let l = KeyedLimit::new(Rate::per_sec(1).burst(2), 1000, clock.clone()).unwrap();
        // A flood from 50,000 addresses in one instant: at most 1000 are kept, and each
        // key that did not fit is judged as a fresh key (its first connection passes).
        for k in 0..50_000u32 {
            assert!(l.allow(&k));
        }
        assert_eq!(l.tracked(), 1000);
        assert_eq!(l.untracked(), 49_000);
        // Keys held before keep being limited: key 0 has one cell of its burst left.
        assert!(l.allow(&0));
        assert!(!l.allow(&0));
        // Once their burst has refilled, a sweep forgets them all.
        clock.advance(Duration::from_secs(3));
        l.sweep();
        assert_eq!(l.tracked(), 0);
        // And there is room again.
        assert!(l.allow(&7) && l.allow(&7) && !l.allow(&7));
        assert_eq!(l.tracked(), 1);
    }

    #[test]
    fn a_sweep_keeps_keys_still_limited() {
        let clock = FakeRelativeClock::default();
        let l = KeyedLimit::new(Rate::per_sec(1).burst(1), 100, clock.clone()).unwrap();
        assert!(l.allow(&"busy"));
        assert!(l.allow(&"quiet"));
        assert!(!l.allow(&"busy"));
        clock.advance(Duration::from_secs(3));
        assert!(l.allow(&"busy"));
        l.sweep();
        assert_eq!(l.tracked(), 1, "only the key used within its window stays");
        assert!(!l.allow(&"busy"), "and it is still limited");
        assert!(l.allow(&"quiet"), "the forgotten one starts fresh");
    }

    #[test]
    fn direct_limit() {
        let clock = FakeRelativeClock::default();
        let g = DirectLimit::new(Rate::per_sec(10).burst(3), clock.clone()).unwrap();
        assert_eq!((0..5).filter(|_| g.allow()).count(), 3);
        clock.advance(Duration::from_millis(100));
        assert!(g.allow());
        assert!(!g.allow());
        assert!(DirectLimit::new(Rate::OFF, clock).is_none());
    }
}
