//! Measuring a run: histograms, the window, per-direction tallies, the watchdog that
//! reports a stalled direction, and the closed and open caller loops.

use super::*;

/// The measured window of a closed-loop run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    pub(crate) warm_end: Instant,
    pub(crate) end: Instant,
}

impl Window {
    pub(crate) fn starting_now(secs: f64) -> Window {
        let warm_end = Instant::now() + WARM;
        Window {
            warm_end,
            end: warm_end + Duration::from_secs_f64(secs),
        }
    }
}

#[derive(Default)]
pub(crate) struct Tally {
    /// Latency of calls in the measured window (open loop: from the send).
    pub(crate) lat: Option<Histogram<u64>>,
    /// Open loop only: latency counted from the due time.
    pub(crate) from_due: Option<Histogram<u64>>,
    /// Open loop only: send time minus due time.
    pub(crate) lag: Option<Histogram<u64>>,
    pub(crate) calls: u64,
    pub(crate) errors: u64,
}

/// One direction of one run: progress counters for the watchdog and the tally.
pub(crate) struct Dir {
    pub(crate) name: String,
    /// Successful calls, warm-up included (what the watchdog watches).
    pub(crate) ok: AtomicU64,
    /// Failed calls, warm-up included.
    pub(crate) failed: AtomicU64,
    /// Caller tasks (or stream drivers) still running.
    pub(crate) running: AtomicUsize,
    pub(crate) last_error: Mutex<Option<String>>,
    /// Watchdog bookkeeping: the `ok` count it last saw and when it changed.
    pub(crate) seen: Mutex<(u64, Instant)>,
    pub(crate) tally: Mutex<Tally>,
}

impl Dir {
    pub(crate) fn new(name: impl Into<String>) -> Arc<Dir> {
        Arc::new(Dir {
            name: name.into(),
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            running: AtomicUsize::new(0),
            last_error: Mutex::new(None),
            seen: Mutex::new((0, Instant::now())),
            tally: Mutex::new(Tally {
                lat: Some(hist()),
                from_due: Some(hist()),
                lag: Some(hist()),
                ..Tally::default()
            }),
        })
    }

    pub(crate) fn fail(&self, error: impl Into<String>) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        *lock(&self.last_error) = Some(error.into());
    }

    /// Closed loop: a call that started at `t0` and ended at `t1`.
    pub(crate) fn record(&self, w: &Window, t0: Instant, t1: Instant, r: Result<(), String>) {
        let ok = r.is_ok();
        match r {
            Ok(()) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => self.fail(e),
        }
        if t0 >= w.warm_end && t1 <= w.end {
            let mut t = lock(&self.tally);
            if ok {
                t.calls += 1;
                if let Some(h) = t.lat.as_mut() {
                    let _ = h.record(nanos(t1 - t0));
                }
            } else {
                t.errors += 1;
            }
        }
    }

    /// Open loop: a call due at `due`, sent at `sent`, answered at `done`.
    pub(crate) fn record_open(
        &self,
        due: Instant,
        sent: Instant,
        done: Instant,
        r: Result<(), String>,
    ) {
        let ok = r.is_ok();
        match r {
            Ok(()) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => self.fail(e),
        }
        let mut t = lock(&self.tally);
        if ok {
            t.calls += 1;
            if let Some(h) = t.lat.as_mut() {
                let _ = h.record(nanos(done - sent));
            }
            if let Some(h) = t.from_due.as_mut() {
                let _ = h.record(nanos(done.saturating_duration_since(due)));
            }
            if let Some(h) = t.lag.as_mut() {
                let _ = h.record(nanos(sent.saturating_duration_since(due)));
            }
        } else {
            t.errors += 1;
        }
    }

    pub(crate) fn take(&self) -> Tally {
        std::mem::take(&mut *lock(&self.tally))
    }
}

/// Counts a running caller of a direction; dropping it (also on panic) uncounts it.
pub(crate) struct Running(Arc<Dir>);

impl Running {
    pub(crate) fn enter(dir: &Arc<Dir>) -> Running {
        dir.running.fetch_add(1, Ordering::SeqCst);
        Running(dir.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

// ----------------------------------------------------------------- watchdog --

/// The directions of the run in progress.
pub(crate) static WATCHED: Mutex<Vec<Arc<Dir>>> = Mutex::new(Vec::new());

pub(crate) fn watch(dirs: &[Arc<Dir>]) {
    let now = Instant::now();
    for d in dirs {
        *lock(&d.seen) = (d.ok.load(Ordering::Relaxed), now);
    }
    *lock(&WATCHED) = dirs.to_vec();
}

pub(crate) fn unwatch() {
    lock(&WATCHED).clear();
}

/// Runs on its own OS thread, so a wedged runtime cannot hide a stall from it.
pub(crate) fn start_watchdog() {
    std::thread::Builder::new()
        .name("watchdog".into())
        .spawn(|| {
            loop {
                std::thread::sleep(Duration::from_millis(100));
                let dirs = lock(&WATCHED).clone();
                let now = Instant::now();
                for d in &dirs {
                    if d.running.load(Ordering::SeqCst) == 0 {
                        continue;
                    }
                    let ok = d.ok.load(Ordering::Relaxed);
                    let mut seen = lock(&d.seen);
                    if ok != seen.0 {
                        *seen = (ok, now);
                    } else if now - seen.1 >= STALL {
                        drop(seen);
                        report_stall(d, &dirs);
                    }
                }
            }
        })
        .expect("watchdog thread");
}

pub(crate) fn report_stall(stalled: &Dir, dirs: &[Arc<Dir>]) -> ! {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "\nSTALLED: {} made no progress for {} s",
        stalled.name,
        STALL.as_secs()
    );
    for d in dirs {
        let _ = writeln!(
            out,
            "  {}: {} calls completed, {} failed, {} callers still waiting{}",
            d.name,
            d.ok.load(Ordering::Relaxed),
            d.failed.load(Ordering::Relaxed),
            d.running.load(Ordering::SeqCst),
            lock(&d.last_error)
                .as_deref()
                .map(|e| format!("; last error: {e}"))
                .unwrap_or_default()
        );
    }
    let _ = out.flush();
    std::process::exit(3);
}

/// Waits (blocking the main thread) until every caller of `dirs` has finished; the
/// watchdog ends the process if they stall.
pub(crate) fn wait_finished(dirs: &[Arc<Dir>]) {
    while dirs.iter().any(|d| d.running.load(Ordering::SeqCst) > 0) {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A run's two directions, watched until both have finished.
pub(crate) fn watch_until_finished(up: &Arc<Dir>, down: &Arc<Dir>) {
    let dirs = [up.clone(), down.clone()];
    watch(&dirs);
    wait_finished(&dirs);
    unwatch();
}

// ------------------------------------------------------------------ loops --

/// One call in one direction (what a caller task loops on).
pub(crate) trait Op: Clone + Send + Sync + 'static {
    fn call(&self) -> impl Future<Output = Result<(), String>> + Send;
}

/// Starts `n` closed loops of `op` on `rt`, each until the window ends.
pub(crate) fn spawn_closed(rt: &Handle, dir: &Arc<Dir>, n: usize, w: Window, op: impl Op) {
    for _ in 0..n {
        let running = Running::enter(dir);
        let dir = dir.clone();
        let op = op.clone();
        rt.spawn(async move {
            let _running = running;
            loop {
                let t0 = Instant::now();
                if t0 >= w.end {
                    break;
                }
                let r = op.call().await;
                dir.record(&w, t0, Instant::now(), r);
            }
        });
    }
}

/// Open loop at `rate` calls/s for `secs` from `start`: request `i` is due at
/// `start + i / rate`; `workers` tasks each take every `workers`-th request, wait until
/// it is due and send it.
pub(crate) fn spawn_open(
    rt: &Handle,
    dir: &Arc<Dir>,
    workers: usize,
    rate: f64,
    secs: f64,
    start: Instant,
    op: impl Op,
) {
    let total = (rate * secs) as u64;
    let interval = 1.0 / rate;
    for w in 0..workers as u64 {
        let running = Running::enter(dir);
        let dir = dir.clone();
        let op = op.clone();
        rt.spawn(async move {
            let _running = running;
            let mut i = w;
            while i < total {
                let due = start + Duration::from_secs_f64(interval * i as f64);
                if due > Instant::now() {
                    tokio::time::sleep_until(due.into()).await;
                }
                let sent = Instant::now();
                let r = op.call().await;
                dir.record_open(due, sent, Instant::now(), r);
                i += workers as u64;
            }
        });
    }
}
