//! What the bench programs share (the rpc-client's `echo_bench` and `twoway_bench`, the
//! TC's `tx-bench`): the runtimes their two sides run on, latencies in HDR histograms,
//! and the closed and open loops that fill them. Each program prints its own table.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use hdrhistogram::Histogram;

/// A tokio runtime with one worker thread, its threads named `name`: a bench runs its
/// servers on one and its clients on another, so on a 2-core machine each side has a
/// core.
pub fn runtime(name: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("runtime")
}

/// An empty latency histogram: 1 ns to 60 s (the calls time out at 30 s), 2 significant
/// digits.
pub fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 2).expect("histogram")
}

/// `d` as the histograms record it: nanoseconds, at least 1.
pub fn nanos(d: Duration) -> u64 {
    (d.as_nanos() as u64).max(1)
}

/// The value at quantile `q` of a histogram of nanoseconds, in microseconds.
pub fn micros(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1e3
}

/// The value at quantile `q` of a histogram of nanoseconds, in milliseconds.
pub fn millis(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1e6
}

/// Prints the header of a bench's Markdown table: each column's title padded to its
/// width (the first `left` columns aligned left, the others right), and the line of
/// dashes under it.
pub fn print_header(left: usize, columns: &[(&str, usize)]) {
    let mut titles = String::from("|");
    let mut line = String::from("|");
    for (i, &(title, width)) in columns.iter().enumerate() {
        if i < left {
            titles += &format!(" {title:<width$} |");
        } else {
            titles += &format!(" {title:>width$} |");
        }
        line += &format!("{}|", "-".repeat(width + 2));
    }
    println!("{titles}");
    println!("{line}");
}

/// `m`'s value, even if a holder panicked: a tally stays readable after a failed task.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a loop measured: the calls that succeeded, with their latencies, and those that
/// failed.
pub struct Tally {
    /// Calls that succeeded.
    pub calls: u64,
    /// Calls that failed.
    pub errors: u64,
    /// The first failure's error.
    pub first_error: Option<String>,
    /// Latency of the calls that succeeded (open loop: from the actual send).
    pub lat: Histogram<u64>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            calls: 0,
            errors: 0,
            first_error: None,
            lat: hist(),
        }
    }

    fn failed(&mut self, error: String) {
        self.errors += 1;
        self.first_error.get_or_insert(error);
    }
}

/// What an open loop measured: its [`Tally`], and how the calls kept their schedule.
pub struct OpenTally {
    /// The calls, their latency counted from the actual send.
    pub tally: Tally,
    /// Latency counted from the due time, the generator's lag included.
    pub from_due: Histogram<u64>,
    /// Send time minus due time (whether the generator kept the schedule).
    pub lag: Histogram<u64>,
    /// Seconds from the first due time to the last answer.
    pub secs: f64,
}

/// Runs `n` closed loops of `op` for `secs` after a 300 ms warm-up: each task calls `op`
/// again as soon as its call ends. A call counts when it started after the warm-up and
/// ended before the deadline. Task `t` passes `op` the call numbers `t`, `t + n`,
/// `t + 2n`, ...
pub async fn closed_loop<F, Fut>(n: usize, secs: f64, op: F) -> Tally
where
    F: Fn(u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = Result<(), String>> + Send,
{
    let warm = Duration::from_millis(300);
    let measure = Duration::from_secs_f64(secs);
    let start = Instant::now();
    // One tally for all tasks (they share one thread; the lock is uncontended), so the
    // harness stays small in cache.
    let shared = Arc::new(Mutex::new(Tally::new()));
    let mut tasks = Vec::new();
    for t in 0..n as u64 {
        let op = op.clone();
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = t;
            loop {
                let t0 = Instant::now();
                if t0 >= start + warm + measure {
                    break;
                }
                let r = op(i).await;
                i += n as u64;
                let t1 = Instant::now();
                if t0 >= start + warm && t1 <= start + warm + measure {
                    let mut g = lock(&shared);
                    match r {
                        Ok(()) => {
                            g.calls += 1;
                            let _ = g.lat.record(nanos(t1 - t0));
                        }
                        Err(e) => g.failed(e),
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("bench task");
    }
    std::mem::replace(&mut *lock(&shared), Tally::new())
}

/// Runs an open loop of `op` at `rate` calls/s for `secs` (wrk2-style): call `i` is due
/// at `start + i / rate`, `start` being 50 ms from now; `workers` tasks each take every
/// `workers`-th call, wait until it is due and make it.
pub async fn open_loop<F, Fut>(workers: u64, rate: f64, secs: f64, op: F) -> OpenTally
where
    F: Fn(u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = Result<(), String>> + Send,
{
    let interval = Duration::from_secs_f64(1.0 / rate);
    let total = (rate * secs) as u64;
    let start = Instant::now() + Duration::from_millis(50);
    let empty = || OpenTally {
        tally: Tally::new(),
        from_due: hist(),
        lag: hist(),
        secs: 0.0,
    };
    let shared = Arc::new(Mutex::new(empty()));
    let mut tasks = Vec::new();
    for w in 0..workers {
        let op = op.clone();
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = w;
            while i < total {
                let due = start + interval.mul_f64(i as f64);
                if due > Instant::now() {
                    tokio::time::sleep_until(due.into()).await;
                }
                let sent = Instant::now();
                let r = op(i).await;
                let done = Instant::now();
                let mut g = lock(&shared);
                match r {
                    Ok(()) => {
                        g.tally.calls += 1;
                        let _ = g.tally.lat.record(nanos(done - sent));
                        let _ = g.lag.record(nanos(sent.saturating_duration_since(due)));
                        let _ = g
                            .from_due
                            .record(nanos(done.saturating_duration_since(due)));
                    }
                    Err(e) => g.tally.failed(e),
                }
                i += workers;
            }
        }));
    }
    for t in tasks {
        t.await.expect("open-loop task");
    }
    let open = std::mem::replace(&mut *lock(&shared), empty());
    OpenTally {
        secs: start.elapsed().as_secs_f64(),
        ..open
    }
}
