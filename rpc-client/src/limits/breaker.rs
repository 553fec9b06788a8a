//! A circuit breaker: closed, open, half-open.
//!
//! - **Closed**: every request passes; outcomes are counted over a sliding window
//!   (ten buckets). When the window holds at least `min_requests` outcomes and the
//!   failed share reaches `failure_ratio`, the breaker **opens**.
//! - **Open**: requests are refused at once (a client answers
//!   [`RpcError::CircuitOpen`](crate::RpcError::CircuitOpen), the example gateway
//!   `busy: <cluster> circuit open`, without calling a server) for `cool_down`.
//! - **Half-open**: the first `probes` requests after the cool-down pass as probes,
//!   others are still refused. When every probe succeeds the breaker **closes** (with
//!   an empty window); the first probe that fails opens it again for another cool-down.
//!
//! Each admitted request carries an [`Admission`]: outcomes of requests admitted while
//! closed count in the window (and only while it is still closed); a probe's outcome
//! counts only for the half-open round that let it through, so a slow request from an
//! earlier state never decides a later one.
//!
//! What is a failure is the caller's call; the breaker only counts. An
//! [`RpcClient`](crate::RpcClient) with a breaker ([`CallLimits::breaker`]) counts a
//! call failed when it timed out, its connection failed after it was written, no
//! endpoint could take it, or the server answered with its own failure (the client's
//! [`Classifier`](crate::Classifier)); an answer that is the caller's own failure is a
//! success here, as the server is working. Time is tokio's [`Instant`], so tests run it
//! on paused time.
//!
//! [`CallLimits::breaker`]: super::CallLimits::breaker

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::window::Window;

/// A circuit breaker's settings. The defaults are Resilience4j's and Polly's order of
/// magnitude: a 10 s window, at least 20 outcomes in it, half of them failed to open,
/// 5 s open, 3 probes.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerSettings {
    /// The sliding window outcomes are counted over (`breakerWindow`, 10 s).
    pub window: Duration,
    /// Outcomes the window must hold before the breaker may open
    /// (`breakerMinRequests`, 20).
    pub min_requests: u32,
    /// The failed share of the window (0 < r <= 1) that opens the breaker
    /// (`breakerFailureRatio`, 0.5).
    pub failure_ratio: f64,
    /// How long the breaker stays open before letting probes through
    /// (`breakerCoolDown`, 5 s).
    pub cool_down: Duration,
    /// Probes let through when half-open; when all succeed the breaker closes
    /// (`breakerProbes`, 3).
    pub probes: u32,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        BreakerSettings {
            window: Duration::from_secs(10),
            min_requests: 20,
            failure_ratio: 0.5,
            cool_down: Duration::from_secs(5),
            probes: 3,
        }
    }
}

/// Where a breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Requests pass.
    Closed,
    /// Requests are refused.
    Open,
    /// A few probes pass.
    HalfOpen,
}

impl BreakerState {
    /// The state as a gauge value: 0 closed, 1 open, 2 half-open.
    pub fn gauge(self) -> f64 {
        match self {
            BreakerState::Closed => 0.0,
            BreakerState::Open => 1.0,
            BreakerState::HalfOpen => 2.0,
        }
    }
}

/// How a request got past the breaker (hand it back with its outcome).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Admitted while closed.
    Normal,
    /// A probe of half-open round `round`.
    Probe {
        /// The round.
        round: u64,
    },
}

#[derive(Debug)]
enum Phase {
    Closed,
    Open { until: Instant },
    HalfOpen { admitted: u32, succeeded: u32 },
}

#[derive(Debug)]
struct Inner {
    phase: Phase,
    /// Incremented at every half-open round.
    round: u64,
    window: Window,
}

/// A circuit breaker (see the module docs).
#[derive(Debug)]
pub struct Breaker {
    settings: BreakerSettings,
    inner: Mutex<Inner>,
}

/// A state change a call caused (for logs and the gauge).
pub type Transition = Option<BreakerState>;

impl Breaker {
    /// A closed breaker.
    pub fn new(settings: BreakerSettings) -> Breaker {
        Breaker {
            inner: Mutex::new(Inner {
                phase: Phase::Closed,
                round: 0,
                window: Window::new(settings.window, Instant::now()),
            }),
            settings,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state now (an open breaker whose cool-down has passed is reported
    /// half-open: the next request is a probe).
    pub fn state(&self) -> BreakerState {
        let inner = self.lock();
        match inner.phase {
            Phase::Closed => BreakerState::Closed,
            Phase::Open { until } if Instant::now() < until => BreakerState::Open,
            Phase::Open { .. } | Phase::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// The settings it was made with.
    pub fn settings(&self) -> &BreakerSettings {
        &self.settings
    }

    /// Lets a request through (with how) or refuses it (`None`), and the state change
    /// this caused.
    pub fn admit(&self) -> (Option<Admission>, Transition) {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let probes = self.settings.probes;
        match &mut inner.phase {
            Phase::Closed => (Some(Admission::Normal), None),
            Phase::Open { until } if Instant::now() < *until => (None, None),
            Phase::Open { .. } => {
                inner.round += 1;
                inner.phase = Phase::HalfOpen {
                    admitted: 1,
                    succeeded: 0,
                };
                let round = inner.round;
                (
                    Some(Admission::Probe { round }),
                    Some(BreakerState::HalfOpen),
                )
            }
            Phase::HalfOpen { admitted, .. } if *admitted < probes => {
                *admitted += 1;
                let round = inner.round;
                (Some(Admission::Probe { round }), None)
            }
            Phase::HalfOpen { .. } => (None, None),
        }
    }

    /// Counts the outcome of a request admitted as `admission`.
    pub fn record(&self, admission: Admission, failed: bool) -> Transition {
        let now = Instant::now();
        let mut guard = self.lock();
        let inner = &mut *guard;
        match (admission, &mut inner.phase) {
            (Admission::Normal, Phase::Closed) => {
                inner.window.record(now, failed);
                if !failed {
                    return None;
                }
                let (ok, bad) = inner.window.totals(now);
                let total = ok.saturating_add(bad);
                let tripped = total >= self.settings.min_requests
                    && f64::from(bad) >= self.settings.failure_ratio * f64::from(total);
                tripped.then(|| self.open(inner, now))
            }
            (Admission::Probe { round }, Phase::HalfOpen { succeeded, .. })
                if round == inner.round =>
            {
                if failed {
                    return Some(self.open(inner, now));
                }
                *succeeded += 1;
                if *succeeded < self.settings.probes {
                    return None;
                }
                inner.phase = Phase::Closed;
                inner.window.clear();
                Some(BreakerState::Closed)
            }
            // From an earlier state: decides nothing now.
            _ => None,
        }
    }

    fn open(&self, inner: &mut Inner, now: Instant) -> BreakerState {
        inner.phase = Phase::Open {
            until: now + self.settings.cool_down,
        };
        inner.window.clear();
        BreakerState::Open
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn breaker() -> Breaker {
        Breaker::new(BreakerSettings {
            window: Duration::from_secs(10),
            min_requests: 4,
            failure_ratio: 0.5,
            cool_down: Duration::from_secs(5),
            probes: 2,
        })
    }

    fn normal(b: &Breaker, failed: bool) -> Transition {
        let (a, _) = b.admit();
        assert_eq!(a, Some(Admission::Normal));
        b.record(Admission::Normal, failed)
    }

    #[tokio::test(start_paused = true)]
    async fn opens_at_the_ratio_once_the_window_holds_enough() {
        let b = breaker();
        // Three failures: under the minimum count, still closed.
        for _ in 0..3 {
            assert_eq!(normal(&b, true), None);
        }
        assert_eq!(b.state(), BreakerState::Closed);
        // The fourth: 4 of 4 failed.
        assert_eq!(normal(&b, true), Some(BreakerState::Open));
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.admit(), (None, None));
    }

    #[tokio::test(start_paused = true)]
    async fn stays_closed_under_the_ratio_and_forgets_old_failures() {
        let b = breaker();
        for _ in 0..3 {
            normal(&b, false);
        }
        for _ in 0..2 {
            assert_eq!(normal(&b, true), None); // 2 of 5 failed
        }
        // Ten seconds on, the window is empty again: three failures are under the
        // minimum count.
        tokio::time::advance(Duration::from_secs(11)).await;
        for _ in 0..3 {
            assert_eq!(normal(&b, true), None);
        }
        assert_eq!(b.state(), BreakerState::Closed);
        // Application-level outcomes the caller counts as successes keep it closed.
        for _ in 0..10 {
            normal(&b, false);
        }
        assert_eq!(normal(&b, true), None);
    }

    fn trip(b: &Breaker) {
        for _ in 0..4 {
            normal(b, true);
        }
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[tokio::test(start_paused = true)]
    async fn half_open_lets_a_few_probes_through_and_their_success_closes_it() {
        let b = breaker();
        trip(&b);
        tokio::time::advance(Duration::from_millis(4_900)).await;
        assert_eq!(b.admit().0, None);
        tokio::time::advance(Duration::from_millis(200)).await;
        assert_eq!(b.state(), BreakerState::HalfOpen);
        let (p1, t) = b.admit();
        assert_eq!(t, Some(BreakerState::HalfOpen));
        let (p2, _) = b.admit();
        let (p1, p2) = (p1.unwrap(), p2.unwrap());
        assert!(matches!(p1, Admission::Probe { .. }));
        // Two probes out: the third request is refused.
        assert_eq!(b.admit().0, None);
        assert_eq!(b.record(p1, false), None);
        assert_eq!(b.record(p2, false), Some(BreakerState::Closed));
        assert_eq!(b.state(), BreakerState::Closed);
        // Closed with an empty window: the failures before it opened are forgotten.
        for _ in 0..3 {
            assert_eq!(normal(&b, true), None);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_opens_it_again_for_a_new_cool_down() {
        let b = breaker();
        trip(&b);
        tokio::time::advance(Duration::from_secs(5)).await;
        let (p1, _) = b.admit();
        let (p2, _) = b.admit();
        assert_eq!(b.record(p1.unwrap(), true), Some(BreakerState::Open));
        assert_eq!(b.admit().0, None);
        // The other probe of that round answers late: it decides nothing.
        assert_eq!(b.record(p2.unwrap(), false), None);
        assert_eq!(b.state(), BreakerState::Open);
        tokio::time::advance(Duration::from_millis(4_900)).await;
        assert_eq!(b.admit().0, None);
        tokio::time::advance(Duration::from_millis(100)).await;
        let (p3, t) = b.admit();
        assert_eq!(t, Some(BreakerState::HalfOpen));
        assert_eq!(b.record(p3.unwrap(), false), None);
        assert_eq!(
            b.record(b.admit().0.unwrap(), false),
            Some(BreakerState::Closed)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn outcomes_of_requests_admitted_while_closed_do_not_decide_half_open() {
        let b = breaker();
        let (slow, _) = b.admit(); // admitted while closed, answers much later
        trip(&b);
        tokio::time::advance(Duration::from_secs(5)).await;
        let (probe, _) = b.admit();
        assert_eq!(b.record(slow.unwrap(), true), None);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert_eq!(b.record(probe.unwrap(), false), None);
        assert_eq!(
            b.record(b.admit().0.unwrap(), false),
            Some(BreakerState::Closed)
        );
    }
}
