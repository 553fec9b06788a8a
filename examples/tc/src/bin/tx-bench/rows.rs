//! The bench's rows: an operation run in closed or open loops (measured as the
//! rpc-client's benches measure, `meshline_bench_support::bench`), and the table the
//! rows are printed in.

use meshline_bench_support::bench::{self, Histogram, millis};

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
        millis(&self.hist, q)
    }
}

/// `n` closed loops of `op` for `secs` after a warm-up; the first error, if any, goes
/// to stderr.
pub(super) async fn closed_loop<F, Fut>(name: &str, n: usize, secs: f64, op: F) -> Row
where
    F: Fn(u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let tally = bench::closed_loop(n, secs, op).await;
    if let Some(e) = &tally.first_error {
        eprintln!("{name}: first error: {e}");
    }
    Row {
        name: name.to_string(),
        in_flight: n.to_string(),
        done: tally.calls,
        errors: tally.errors,
        secs,
        hist: tally.lat,
    }
}

/// Open loop: transaction `i` starts at `start + i / rate`, from 256 workers; latency
/// counts from that scheduled start.
pub(super) async fn open_loop<F, Fut>(name: &str, rate: f64, secs: f64, op: F) -> Row
where
    F: Fn(u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let open = bench::open_loop(256, rate, secs, op).await;
    Row {
        name: name.to_string(),
        in_flight: "open".into(),
        done: open.tally.calls,
        errors: open.tally.errors,
        secs: open.secs,
        hist: open.from_due,
    }
}

/// The table's header.
pub(super) fn print_header() {
    bench::print_header(
        1,
        &[
            ("row", 40),
            ("in flight", 9),
            ("per s", 10),
            ("p50 ms", 8),
            ("p99 ms", 8),
            ("errors", 6),
        ],
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
