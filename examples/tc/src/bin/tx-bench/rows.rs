//! The bench's rows: an operation run in closed or open loops, its latencies in an HDR
//! histogram, and the table the rows are printed in.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// One measured row: what ran, how many completed and failed, and their latencies.
pub(super) struct Row {
    name: String,
    in_flight: String,
    done: u64,
    errors: u64,
    secs: f64,
    hist: Histogram<u64>,
}

impl Row {
    /// Completed per second.
    pub(super) fn rate(&self) -> f64 {
        self.done as f64 / self.secs
    }
    /// The latency at quantile `q`, in milliseconds.
    pub(super) fn p(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1e6
    }
}

/// An empty latency histogram, nanoseconds up to a minute.
fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 2).expect("histogram")
}

/// `n` closed loops of `op` for `secs` after a warm-up.
pub(super) async fn closed_loop<F, Fut>(name: &str, n: usize, secs: f64, op: F) -> Row
where
    F: Fn(u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let warm = Duration::from_millis(300);
    let measure = Duration::from_secs_f64(secs);
    let start = Instant::now();
    let shared = Arc::new(std::sync::Mutex::new((hist(), 0u64, 0u64, None::<String>)));
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
                    let mut g = shared.lock().unwrap_or_else(|p| p.into_inner());
                    match r {
                        Ok(()) => {
                            g.1 += 1;
                            let _ = g.0.record((t1 - t0).as_nanos().max(1) as u64);
                        }
                        Err(e) => {
                            g.2 += 1;
                            g.3.get_or_insert(e);
                        }
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("bench task");
    }
    let (h, done, errors, first) = std::mem::replace(
        &mut *shared.lock().unwrap_or_else(|p| p.into_inner()),
        (hist(), 0, 0, None),
    );
    if let Some(e) = first {
        eprintln!("{name}: first error: {e}");
    }
    Row {
        name: name.to_string(),
        in_flight: n.to_string(),
        done,
        errors,
        secs,
        hist: h,
    }
}

/// Open loop: transaction `i` starts at `start + i / rate`, from 256 workers; latency
/// counts from that scheduled start.
pub(super) async fn open_loop<F, Fut>(name: &str, rate: f64, secs: f64, op: F) -> Row
where
    F: Fn(u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let workers = 256u64;
    let interval = Duration::from_secs_f64(1.0 / rate);
    let total = (rate * secs) as u64;
    let start = Instant::now() + Duration::from_millis(50);
    let shared = Arc::new(std::sync::Mutex::new((hist(), 0u64, 0u64)));
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
                let r = op(i).await;
                let done = Instant::now();
                let mut g = shared.lock().unwrap_or_else(|p| p.into_inner());
                match r {
                    Ok(()) => {
                        g.1 += 1;
                        let _ = g
                            .0
                            .record(done.saturating_duration_since(due).as_nanos().max(1) as u64);
                    }
                    Err(_) => g.2 += 1,
                }
                i += workers;
            }
        }));
    }
    for t in tasks {
        t.await.expect("open-loop task");
    }
    let (h, done, errors) = std::mem::replace(
        &mut *shared.lock().unwrap_or_else(|p| p.into_inner()),
        (hist(), 0, 0),
    );
    Row {
        name: name.to_string(),
        in_flight: "open".into(),
        done,
        errors,
        secs: start.elapsed().as_secs_f64(),
        hist: h,
    }
}

/// The table's header.
pub(super) fn print_header() {
    println!(
        "| {:<40} | {:>9} | {:>10} | {:>8} | {:>8} | {:>6} |",
        "row", "in flight", "per s", "p50 ms", "p99 ms", "errors"
    );
    println!(
        "|{:-<42}|{:->11}|{:->12}|{:->10}|{:->10}|{:->8}|",
        "", "", "", "", "", ""
    );
}

/// One row of the table.
pub(super) fn print_row(r: &Row) {
    println!(
        "| {:<40} | {:>9} | {:>10.0} | {:>8.3} | {:>8.3} | {:>6} |",
        r.name,
        r.in_flight,
        r.rate(),
        r.p(0.50),
        r.p(0.99),
        r.errors
    );
}
