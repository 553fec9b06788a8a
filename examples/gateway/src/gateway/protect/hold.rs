//! Holding a cluster's requests while it has no alive endpoint (a backend restarting,
//! a release), and letting them go **in order** once one is alive again.
//!
//! A held request waits in its cluster's queue, ordered by the ticket it drew when it
//! reached the gateway (a request that was already sent and lost its connection goes
//! back in at its own place, ahead of later ones). One task per cluster, [`release`],
//! waits until the rpc-client's alive set has an endpoint (its `subscribe_alive`
//! watch: no polling), then hands out [`Turn`]s one at a time, lowest ticket first.
//! The holder of a turn dispatches its call and the turn goes back on the call's
//! first poll ([`after_first_poll`]), when the rpc-client has put the frame on the
//! connection's queue, so held requests reach the connection in the order they were
//! held, and the next one is let go at once (replay does not wait for answers).
//!
//! Both bounds are hard: at most `hold-max` requests wait per cluster (the next one is
//! refused with [`Refused::Full`]) and each waits until its deadline (`hold-for` after
//! it was first held; then [`Refused::Expired`]). While anything waits, newly arrived
//! requests of the cluster queue behind it even if an endpoint is alive, so they never
//! overtake.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The right to dispatch now. The next held request is let go when this is dropped.
#[derive(Debug)]
pub struct Turn {
    /// Dropped with the turn: wakes the release task.
    _done: oneshot::Sender<()>,
}

/// Why a request left the hold without its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `hold-max` requests were waiting already.
    Full,
    /// Its deadline passed (or the gateway is stopping).
    Expired,
}

/// One cluster's held requests.
#[derive(Debug)]
pub struct Hold {
    cluster: String,
    max: usize,
    queue: Mutex<BTreeMap<u64, oneshot::Sender<Turn>>>,
    /// `queue.len()`, readable without the lock (the fast path's "is anything held?").
    len: AtomicUsize,
    wake: Notify,
    held_total: AtomicU64,
    released_total: AtomicU64,
}

impl Hold {
    /// An empty hold for `cluster`, bounded to `max` waiting requests.
    pub fn new(cluster: &str, max: usize) -> Hold {
        Hold {
            cluster: cluster.to_string(),
            max,
            queue: Mutex::new(BTreeMap::new()),
            len: AtomicUsize::new(0),
            wake: Notify::new(),
            held_total: AtomicU64::new(0),
            released_total: AtomicU64::new(0),
        }
    }

    /// Requests waiting now.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Requests that were held so far (each time they were held).
    pub fn held_total(&self) -> u64 {
        self.held_total.load(Ordering::Relaxed)
    }

    /// Turns handed out so far (held requests let go to their backend).
    pub fn released_total(&self) -> u64 {
        self.released_total.load(Ordering::Relaxed)
    }

    fn with_queue<R>(&self, f: impl FnOnce(&mut BTreeMap<u64, oneshot::Sender<Turn>>) -> R) -> R {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let r = f(&mut q);
        self.len.store(q.len(), Ordering::Release);
        metrics::gauge!("gateway_held_requests", "cluster" => self.cluster.clone())
            .set(q.len() as f64);
        r
    }

    /// Waits in line as `ticket` (unique in this cluster) until its turn or `deadline`.
    pub async fn wait_turn(&self, ticket: u64, deadline: Instant) -> Result<Turn, Refused> {
        let (tx, rx) = oneshot::channel();
        let queued = self.with_queue(|q| {
            if q.len() >= self.max {
                return false;
            }
            q.insert(ticket, tx);
            true
        });
        if !queued {
            return Err(Refused::Full);
        }
        self.held_total.fetch_add(1, Ordering::Relaxed);
        self.wake.notify_one();
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(turn)) => Ok(turn),
            _ => {
                self.with_queue(|q| q.remove(&ticket));
                Err(Refused::Expired)
            }
        }
    }

    fn next_waiting(&self) -> Option<oneshot::Sender<Turn>> {
        self.with_queue(|q| q.pop_first().map(|(_, tx)| tx))
    }
}

/// Lets `hold`'s requests go, one turn at a time in ticket order, whenever `ready` says
/// the cluster has an endpoint (`is_ready` on the watched value). Runs until `stop`.
pub async fn release<T>(
    hold: Arc<Hold>,
    mut ready: watch::Receiver<T>,
    is_ready: impl Fn(&T) -> bool,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = hold.wake.notified() => {}
            _ = stop.cancelled() => return,
        }
        loop {
            tokio::select! {
                r = ready.wait_for(&is_ready) => if r.is_err() { return },
                _ = stop.cancelled() => return,
            }
            let Some(waiting) = hold.next_waiting() else {
                break;
            };
            let (turn, done) = oneshot::channel();
            if waiting.send(Turn { _done: turn }).is_err() {
                continue; // it gave up meanwhile
            }
            hold.released_total.fetch_add(1, Ordering::Relaxed);
            tokio::select! {
                _ = done => {}
                _ = stop.cancelled() => return,
            }
        }
    }
}

/// Runs `fut`, giving `turn` back right after its first poll: the next held request is
/// let go as soon as this one's call is on its connection's queue.
pub async fn after_first_poll<F: Future>(fut: F, turn: Turn) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut turn = Some(turn);
    std::future::poll_fn(|cx| {
        let polled = fut.as_mut().poll(cx);
        turn.take();
        polled
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn start(max: usize) -> (Arc<Hold>, watch::Sender<bool>, CancellationToken) {
        let hold = Arc::new(Hold::new("c", max));
        let (ready, rx) = watch::channel(false);
        let stop = CancellationToken::new();
        tokio::spawn(release(hold.clone(), rx, |r: &bool| *r, stop.clone()));
        (hold, ready, stop)
    }

    #[tokio::test(start_paused = true)]
    async fn held_requests_go_in_ticket_order_when_an_endpoint_appears() {
        let (hold, ready, _stop) = start(100);
        let order = Arc::new(Mutex::new(Vec::new()));
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut tasks = Vec::new();
        // Tickets arrive out of order (a re-held request goes back to its place).
        for ticket in [5u64, 1, 4, 2, 3] {
            let (hold, order) = (hold.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let turn = hold.wait_turn(ticket, deadline).await.unwrap();
                after_first_poll(
                    async {
                        order.lock().unwrap().push(ticket);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    },
                    turn,
                )
                .await;
            }));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(hold.len(), 5, "nothing goes while no endpoint is alive");
        assert!(order.lock().unwrap().is_empty());
        ready.send_replace(true);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![1, 2, 3, 4, 5]);
        assert_eq!(hold.len(), 0);
        assert_eq!((hold.held_total(), hold.released_total()), (5, 5));
    }

    #[tokio::test(start_paused = true)]
    async fn the_count_and_the_time_are_bounded() {
        let (hold, _ready, _stop) = start(2);
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_secs(3);
        let a = tokio::spawn({
            let hold = hold.clone();
            async move { hold.wait_turn(1, deadline).await.map(drop) }
        });
        let b = tokio::spawn({
            let hold = hold.clone();
            async move { hold.wait_turn(2, deadline).await.map(drop) }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            hold.wait_turn(3, deadline).await.map(drop),
            Err(Refused::Full)
        );
        assert_eq!(a.await.unwrap(), Err(Refused::Expired));
        assert_eq!(b.await.unwrap(), Err(Refused::Expired));
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
        assert!(hold.is_empty(), "expired requests leave the queue");
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_request_does_not_stall_the_ones_behind_it() {
        let (hold, ready, _stop) = start(10);
        let now = Instant::now();
        let early = tokio::spawn({
            let hold = hold.clone();
            async move {
                hold.wait_turn(1, now + Duration::from_millis(100))
                    .await
                    .map(drop)
            }
        });
        let late = tokio::spawn({
            let hold = hold.clone();
            async move {
                hold.wait_turn(2, now + Duration::from_secs(3))
                    .await
                    .map(drop)
            }
        });
        assert_eq!(early.await.unwrap(), Err(Refused::Expired));
        ready.send_replace(true);
        assert_eq!(late.await.unwrap(), Ok(()));
    }
}
