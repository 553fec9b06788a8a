//! The login queue: above the admission rate or the online cap, a client whose token
//! is good waits its turn instead of being refused.
//!
//! ```yaml
//! gateway:
//!   queue:
//!     admit-per-sec: 500      # new sessions a second (0 = no rate gate)
//!     admit-burst: 500        # at once (0 = admit-per-sec)
//!     max-online: 50000       # connected players at most (0 = no cap)
//!     max-length: 20000       # waiting at most; past it: refused, Busy (0 = never wait)
//! ```
//!
//! Why a queue and not an error: after a release or at a season's opening, every player
//! arrives in the same minute. Refusing them makes every client retry, which is the
//! storm again; telling each one "position 8420, about 62 s" keeps them waiting calmly
//! and lets the backends warm up at the rate they can take.
//!
//! How it goes, for an `AUTH` whose token was verified (before the session exists):
//! - nobody waiting, under the cap and within the rate: admitted at once, as before;
//! - else the client gets a ticket at the back of the queue and a `QUEUE` frame
//!   (opcode 7, payload `position eta_ms`; `eta_ms` 0 means no estimate yet), then
//!   another whenever its position changed (at most one a second) and at least every
//!   10 s while it waits (so it knows the gateway is alive); PINGs are answered, other
//!   frames are ignored until it is admitted;
//! - one task admits the queue strictly in arrival order whenever the rate and the cap
//!   allow; the client then gets `AUTH_OK` as usual;
//! - a client that disconnects leaves the queue at once (the ones behind it move up);
//! - with `max-length` clients already waiting, a new one is refused with `Busy` and
//!   a text saying the queue is full.
//!
//! A `RESUME` bypasses the queue and the rate: the player was online a moment ago (its
//! connection dropped, or it moved gateways), and sending it to the back of a queue
//! after a network blip is the wrong answer. It still counts as online, so resumes can
//! take the online count above `max-online` (by at most the number of detached
//! sessions); new logins then wait until it is back under.
//!
//! The ETA is the position divided by the admission rate measured over the last
//! admissions (at most the configured rate); before anything was measured, the
//! configured rate; with neither (a cap and no rate, nothing admitted yet) there is no
//! estimate.
//!
//! Metrics: `gateway_login_queue_length` (gauge), `gateway_login_queue_admitted_total`
//! (clients admitted after waiting).

mod eta;
mod settings;
mod wait;

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use governor::clock::Clock;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

use eta::Admissions;
pub use settings::QueueSettings;
pub(crate) use wait::{Turn, wait_turn};

struct Waiter {
    ticket: u64,
    grant: oneshot::Sender<Online>,
}

#[derive(Default)]
struct State {
    /// By ticket, ascending: arrival order.
    waiting: VecDeque<Waiter>,
    next_ticket: u64,
    /// The last admissions through the gate (for the ETA).
    admissions: Admissions,
}

/// The login queue of one gateway.
pub struct LoginQueue {
    settings: QueueSettings,
    rate: Option<DefaultDirectRateLimiter>,
    state: Mutex<State>,
    /// The admitting task waits on this: someone queued, or someone went offline.
    wake: Notify,
    online: AtomicUsize,
    admitted: AtomicU64,
}

impl std::fmt::Debug for LoginQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginQueue")
            .field("waiting", &self.len())
            .field("online", &self.online())
            .finish_non_exhaustive()
    }
}

/// One connected player, counted online until dropped.
#[derive(Debug)]
pub struct Online(Arc<LoginQueue>);

impl Drop for Online {
    fn drop(&mut self) {
        self.0.online.fetch_sub(1, Ordering::AcqRel);
        if self.0.settings.max_online > 0 {
            self.0.wake.notify_one();
        }
    }
}

/// A place in the queue; dropping it leaves the queue.
pub(crate) struct Ticket {
    queue: Arc<LoginQueue>,
    id: u64,
    granted: oneshot::Receiver<Online>,
    /// The position when it was issued (1 = next).
    pub(crate) position: usize,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut st = self.queue.lock();
        if let Ok(i) = st.waiting.binary_search_by_key(&self.id, |w| w.ticket) {
            st.waiting.remove(i);
            gauge(st.waiting.len());
        }
    }
}

/// What [`LoginQueue::enter`] decided.
pub(crate) enum Entry {
    /// In at once.
    Admitted(Online),
    /// Waiting.
    Waiting(Ticket),
    /// The queue is full (this many waiting).
    Full(usize),
}

fn gauge(len: usize) {
    metrics::gauge!("gateway_login_queue_length").set(len as f64);
}

impl LoginQueue {
    /// A queue with `settings` (its admitting task is [`LoginQueue::run`]).
    pub fn new(settings: QueueSettings) -> Arc<LoginQueue> {
        let rate = NonZeroU32::new(settings.admit_per_sec).map(|r| {
            let burst = NonZeroU32::new(settings.admit_burst).unwrap_or(r);
            RateLimiter::direct(Quota::per_second(r).allow_burst(burst))
        });
        Arc::new(LoginQueue {
            settings,
            rate,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            online: AtomicUsize::new(0),
            admitted: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The settings.
    pub fn settings(&self) -> &QueueSettings {
        &self.settings
    }

    /// Clients waiting now.
    pub fn len(&self) -> usize {
        self.lock().waiting.len()
    }

    /// True when nobody waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Players counted online now.
    pub fn online(&self) -> usize {
        self.online.load(Ordering::Acquire)
    }

    /// Clients admitted after waiting, so far.
    pub fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::Relaxed)
    }

    fn gated(&self) -> bool {
        self.rate.is_some() || self.settings.max_online > 0
    }

    fn under_cap(&self) -> bool {
        self.settings.max_online == 0 || self.online() < self.settings.max_online
    }

    /// Counts one online under the lock (admissions are serialised by it, so the cap
    /// is never overshot by them).
    fn admit_locked(self: &Arc<Self>, st: &mut State) -> Online {
        self.online.fetch_add(1, Ordering::AcqRel);
        st.admissions.record(Instant::now());
        Online(self.clone())
    }

    /// A verified login arrives.
    pub(crate) fn enter(self: &Arc<Self>) -> Entry {
        if !self.gated() {
            self.online.fetch_add(1, Ordering::AcqRel);
            return Entry::Admitted(Online(self.clone()));
        }
        let mut st = self.lock();
        if st.waiting.is_empty()
            && self.under_cap()
            && self.rate.as_ref().is_none_or(|r| r.check().is_ok())
        {
            return Entry::Admitted(self.admit_locked(&mut st));
        }
        if st.waiting.len() >= self.settings.max_length {
            return Entry::Full(st.waiting.len());
        }
        let id = st.next_ticket;
        st.next_ticket += 1;
        let (grant, granted) = oneshot::channel();
        st.waiting.push_back(Waiter { ticket: id, grant });
        let position = st.waiting.len();
        gauge(position);
        drop(st);
        self.wake.notify_one();
        Entry::Waiting(Ticket {
            queue: self.clone(),
            id,
            granted,
            position,
        })
    }

    /// A resumed session: online at once, whatever the queue (see the module docs).
    pub(crate) fn bypass(self: &Arc<Self>) -> Online {
        self.online.fetch_add(1, Ordering::AcqRel);
        Online(self.clone())
    }

    /// `ticket`'s position now (1 = next); `None` once it was admitted.
    fn position(&self, ticket: &Ticket) -> Option<usize> {
        self.lock()
            .waiting
            .binary_search_by_key(&ticket.id, |w| w.ticket)
            .ok()
            .map(|i| i + 1)
    }

    /// The admitting task: admits the front of the queue whenever the cap and the rate
    /// allow, until `stop`.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let wake = self.wake.notified();
            tokio::pin!(wake);
            wake.as_mut().enable();
            match self.step() {
                Step::Admitted => continue,
                Step::Idle => tokio::select! {
                    _ = wake => {}
                    _ = stop.cancelled() => return,
                },
                Step::RetryAfter(d) => tokio::select! {
                    _ = tokio::time::sleep(d) => {}
                    _ = stop.cancelled() => return,
                },
            }
        }
    }

    fn step(self: &Arc<Self>) -> Step {
        let mut st = self.lock();
        // A waiter whose connection is gone but whose ticket is not dropped yet.
        while st.waiting.front().is_some_and(|w| w.grant.is_closed()) {
            st.waiting.pop_front();
        }
        if st.waiting.is_empty() || !self.under_cap() {
            gauge(st.waiting.len());
            return Step::Idle;
        }
        if let Some(r) = &self.rate
            && let Err(not_until) = r.check()
        {
            return Step::RetryAfter(not_until.wait_time_from(r.clock().now()));
        }
        let Some(w) = st.waiting.pop_front() else {
            return Step::Idle;
        };
        let online = self.admit_locked(&mut st);
        gauge(st.waiting.len());
        drop(st);
        self.admitted.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("gateway_login_queue_admitted_total").increment(1);
        // If the client has just gone, the guard comes back and is dropped: offline.
        let _ = w.grant.send(online);
        Step::Admitted
    }
}

enum Step {
    Admitted,
    Idle,
    RetryAfter(Duration),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(e: Entry) -> Ticket {
        match e {
            Entry::Waiting(t) => t,
            _ => panic!("expected to wait"),
        }
    }

    #[tokio::test]
    async fn off_admits_everyone_at_once() {
        let q = LoginQueue::new(QueueSettings::off());
        let all: Vec<_> = (0..1000)
            .map(|_| match q.enter() {
                Entry::Admitted(o) => o,
                _ => panic!("no gate, no wait"),
            })
            .collect();
        assert_eq!(q.online(), 1000);
        drop(all);
        assert_eq!(q.online(), 0);
    }

    #[tokio::test]
    async fn the_cap_queues_in_order_and_leavers_do_not_block() {
        let q = LoginQueue::new(QueueSettings {
            admit_per_sec: 0,
            admit_burst: 0,
            max_online: 2,
            max_length: 3,
        });
        let stop = CancellationToken::new();
        tokio::spawn(q.clone().run(stop.clone()));
        let Entry::Admitted(a) = q.enter() else {
            panic!()
        };
        let Entry::Admitted(_b) = q.enter() else {
            panic!()
        };
        let mut c = waiting(q.enter());
        let d = waiting(q.enter());
        let mut e = waiting(q.enter());
        assert_eq!((c.position, d.position, e.position), (1, 2, 3));
        assert!(matches!(q.enter(), Entry::Full(3)));
        // Measured: two admissions, counted over at least a second.
        let eta = q.eta(1).unwrap();
        assert!(eta <= Duration::from_millis(500), "{eta:?}");
        // d leaves: e moves up.
        drop(d);
        assert_eq!(q.position(&e), Some(2));
        // a goes offline: c (the front) is admitted, not e.
        drop(a);
        let c_online = tokio::time::timeout(Duration::from_secs(1), &mut c.granted)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(q.position(&e), Some(1));
        assert!(
            tokio::time::timeout(Duration::from_millis(100), &mut e.granted)
                .await
                .is_err()
        );
        drop(c_online);
        let _e_online = tokio::time::timeout(Duration::from_secs(1), &mut e.granted)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(q.online(), 2);
        assert_eq!(q.admitted(), 2);
        assert!(q.is_empty());
        stop.cancel();
    }

    #[tokio::test]
    async fn the_rate_admits_in_order_with_an_eta() {
        let q = LoginQueue::new(QueueSettings {
            admit_per_sec: 20,
            admit_burst: 1,
            max_online: 0,
            max_length: 100,
        });
        let Entry::Admitted(_first) = q.enter() else {
            panic!()
        };
        let mut tickets: Vec<Ticket> = (0..5).map(|_| waiting(q.enter())).collect();
        for (i, t) in tickets.iter().enumerate() {
            assert_eq!(t.position, i + 1);
            // One admission measured: the configured 20/s, 50 ms a place.
            assert_eq!(
                q.eta(t.position),
                Some(Duration::from_millis(50 * (i as u64 + 1)))
            );
        }
        let stop = CancellationToken::new();
        tokio::spawn(q.clone().run(stop.clone()));
        let t0 = Instant::now();
        let mut order = Vec::new();
        let mut futs: Vec<_> = tickets
            .iter_mut()
            .enumerate()
            .map(|(i, t)| Box::pin(async move { (&mut t.granted).await.map(|o| (i, o)) }))
            .collect();
        while !futs.is_empty() {
            let (r, _, rest) = futures_util::future::select_all(futs).await;
            order.push(r.unwrap().0);
            futs = rest;
        }
        assert_eq!(order, vec![0, 1, 2, 3, 4]);
        // Five places at 20/s: about 250 ms.
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(200), "{took:?}");
        assert!(took < Duration::from_secs(2), "{took:?}");
        stop.cancel();
    }
}
