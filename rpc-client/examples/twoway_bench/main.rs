//! Two-way traffic over ONE connection: both ends send requests and both answer, at
//! the same time. meshline (`RpcClient` <-> `Server`, Seata v1 frames on one TCP
//! connection) against tonic (two bidirectional streaming RPCs on one HTTP/2
//! connection), same body, same number in flight per direction, same process layout,
//! same run.
//!
//! ```text
//! cargo run --release -p meshline-rpc-client --example twoway_bench -- --secs 10
//! cargo run --release -p meshline-rpc-client --example twoway_bench -- --only meshline --inflight 64
//! ```
//!
//! Flags: `--secs N` (measured seconds per run, default 10), `--inflight N` (calls
//! outstanding per direction, default 256), `--body N` (body bytes, default 128),
//! `--only meshline|tonic`.
//!
//! # Why
//!
//! A TC pushes branch commits to the RMs that call it, and a game gateway's backends
//! push to players over the connection the gateway calls them on: real connections
//! carry requests both ways at once. An echo bench only loads one direction, so it
//! cannot show whether both ends pushing at once stalls (two writers each waiting for
//! the other's reader) or how latency behaves when answers and requests share a socket.
//!
//! # What runs
//!
//! - **meshline**: a `Server` (echo handler) and an `RpcClient` that finds it through a
//!   `WatchHub` and answers the server's requests with an echo `.inbound(..)` handler.
//!   client->server: `--inflight` tasks each loop on `client.call(..)`;
//!   server->client: `--inflight` tasks each loop on `conn.call(..)` with the server's
//!   one `Connection` (`server.connections()`).
//! - **tonic**: one `Channel` (one HTTP/2 connection) carrying two bidi streams.
//!   `Forward`: the client sends `{id, body}` messages on its request stream and the
//!   server echoes each on its response stream. `Reverse`: the server sends "requests"
//!   on its response stream and the client answers each on its request stream. The
//!   sending side of each keeps `--inflight` messages outstanding (a window: one new
//!   message per answer) and matches answers by id. Hand-written prost message and
//!   service (no protoc), as in `echo_bench`.
//!
//! Servers run on one tokio runtime with 1 worker thread and clients on another with 1
//! worker thread (a core per side on a 2-core machine); each side's *callers* run on
//! that side's runtime, so the server->client callers share the server's thread.
//! Each run is closed-loop for `--secs` after a 500 ms warm-up; a call is counted when
//! it started after the warm-up and ended before the deadline. Latencies go into HDR
//! histograms (2 significant digits).
//!
//! Then, for meshline, an open-loop run at **half of the peak** measured above: each
//! direction is paced at half of its own closed-loop rate (so the total is half of the
//! peak total), wrk2-style (request `i` due at `start + i / rate`, `--inflight` worker
//! tasks per direction). Latency counts from the actual send; the latency counted from
//! the due time (load-generator lag included) is printed too. Target: p99 < 1 ms.
//!
//! # Stall detection
//!
//! A watchdog thread (outside both runtimes) watches every direction that still has
//! callers running: if one completes no call for 5 s, it prints
//! `STALLED: <direction> made no progress for 5 s` with the counts so far and exits
//! with code 3. Otherwise the program ends by itself (exit 0).

use std::collections::HashMap;
use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use meshline_bench_support::bench::{self, Histogram, hist, lock, micros, nanos, runtime};
use meshline_bench_support::grpc::{GrpcMethods, HttpRequest, Reply, serve_on_loopback, streaming};
use meshline_registry_core::{EmptyProtection, Instance, WatchHub};
use meshline_rpc_client::{CallOptions, Connection, InboundRequest, Payload, RpcClient, Server};
use tokio::runtime::{Handle, Runtime};
use tokio::sync::{Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::http;

mod harness;
mod meshline_side;
mod tonic_peer;

use harness::*;
use meshline_side::*;
use tonic_peer::*;

/// Warm-up before the measured window.
const WARM: Duration = Duration::from_millis(500);
/// A direction that completes no call for this long is reported as stalled.
const STALL: Duration = Duration::from_secs(5);
/// Per-call timeout of the server's pushes (the client's calls use its default, 30 s).
const PUSH_TIMEOUT: Duration = Duration::from_secs(30);

// -------------------------------------------------------------------- flags --

/// Which system to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Only {
    Meshline,
    Tonic,
}

#[derive(Debug, Clone, clap::Parser)]
#[command(about = "Both ends pushing over one connection: meshline against tonic streaming")]
struct Args {
    /// Seconds per measurement.
    #[arg(long, default_value_t = 10.0, value_parser = positive_secs)]
    secs: f64,
    /// Calls in flight per direction.
    #[arg(long, default_value_t = 256, value_parser = at_least_one)]
    inflight: usize,
    /// Body bytes.
    #[arg(long, default_value_t = 128)]
    body: usize,
    /// Measure only one system.
    #[arg(long, value_enum)]
    only: Option<Only>,
}

fn positive_secs(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(s) if s > 0.0 => Ok(s),
        _ => Err(format!("`{v}` is not a positive number of seconds")),
    }
}

fn at_least_one(v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("`{v}` is not a positive whole number")),
    }
}

fn parse_args() -> Args {
    <Args as clap::Parser>::parse()
}

// ------------------------------------------------------------------ report --

struct Row {
    system: String,
    direction: String,
    inflight: String,
    /// Open loop: the paced rate.
    target: Option<f64>,
    calls: u64,
    errors: u64,
    secs: f64,
    lat: Histogram<u64>,
    from_due: Histogram<u64>,
    lag: Histogram<u64>,
}

impl Row {
    fn closed(system: &str, direction: &str, inflight: usize, dir: &Dir, secs: f64) -> Row {
        let t = dir.take();
        Row {
            system: system.into(),
            direction: direction.into(),
            inflight: inflight.to_string(),
            target: None,
            calls: t.calls,
            errors: t.errors,
            secs,
            lat: t.lat.unwrap_or_else(hist),
            from_due: hist(),
            lag: hist(),
        }
    }

    fn open(direction: &str, rate: f64, dir: &Dir, secs: f64) -> Row {
        let t = dir.take();
        Row {
            system: "meshline, open loop at half peak".into(),
            direction: direction.into(),
            inflight: "open".into(),
            target: Some(rate),
            calls: t.calls,
            errors: t.errors,
            secs,
            lat: t.lat.unwrap_or_else(hist),
            from_due: t.from_due.unwrap_or_else(hist),
            lag: t.lag.unwrap_or_else(hist),
        }
    }

    /// Both directions of one run in one row: calls/s added, histograms merged.
    fn total(a: &Row, b: &Row) -> Row {
        let merge = |x: &Histogram<u64>, y: &Histogram<u64>| {
            let mut h = x.clone();
            let _ = h.add(y);
            h
        };
        Row {
            system: a.system.clone(),
            direction: "total".into(),
            inflight: a.inflight.clone(),
            target: a.target.zip(b.target).map(|(x, y)| x + y),
            calls: a.calls + b.calls,
            errors: a.errors + b.errors,
            secs: a.secs,
            lat: merge(&a.lat, &b.lat),
            from_due: merge(&a.from_due, &b.from_due),
            lag: merge(&a.lag, &b.lag),
        }
    }

    fn rate(&self) -> f64 {
        self.calls as f64 / self.secs
    }

    /// Latency at quantile `q`, in microseconds.
    fn p(&self, q: f64) -> f64 {
        micros(&self.lat, q)
    }
}

fn print_header() {
    bench::print_header(
        2,
        &[
            ("system", 34),
            ("direction", 14),
            ("in flight", 9),
            ("calls/s", 10),
            ("p50 µs", 8),
            ("p99 µs", 8),
            ("p99.9 µs", 9),
            ("errors", 6),
        ],
    );
}

fn print_row(r: &Row) {
    println!(
        "| {:<34} | {:<14} | {:>9} | {:>10.0} | {:>8.1} | {:>8.1} | {:>9.1} | {:>6} |",
        r.system,
        r.direction,
        r.inflight,
        r.rate(),
        r.p(0.50),
        r.p(0.99),
        r.p(0.999),
        r.errors
    );
}

fn main() {
    let args = parse_args();
    let run_mesh = args.only != Some(Only::Tonic);
    let run_tonic_peer = args.only != Some(Only::Meshline);
    let body = Bytes::from(vec![0x5au8; args.body]);
    let servers = runtime("servers");
    let clients = runtime("clients");
    start_watchdog();
    println!(
        "twoway_bench: both ends calling each other over one loopback connection; {} in flight per direction, {}-byte bodies, {} s measured after {} ms warm-up; servers and clients on one worker thread each\n",
        args.inflight,
        args.body,
        args.secs,
        WARM.as_millis()
    );

    let mut rows: Vec<Row> = Vec::new();
    // tonic first: if meshline stalls (exit 3), the peer's figures are already printed.
    if run_tonic_peer {
        let tonic = start_tonic(&servers);
        println!("running tonic (two bidi streams on one HTTP/2 connection) ...");
        let (up, down) = run_tonic(&tonic, &clients, &args, &body);
        let total = Row::total(&up, &down);
        print_header();
        for r in [&up, &down, &total] {
            print_row(r);
        }
        println!();
        rows.extend([up, down, total]);
    }
    let mut open_rows: Vec<Row> = Vec::new();
    if run_mesh {
        let mesh = start_meshline(&servers, &clients);
        println!("running meshline (RpcClient <-> Server, one TCP connection) ...");
        let (up, down) = run_meshline_closed(&mesh, &servers, &clients, &args, &body);
        let total = Row::total(&up, &down);
        print_header();
        for r in [&up, &down, &total] {
            print_row(r);
        }
        println!();
        let rates = (up.rate() / 2.0, down.rate() / 2.0);
        rows.extend([up, down, total]);
        if rates.0 > 0.0 && rates.1 > 0.0 {
            println!(
                "running meshline open loop at half of peak: {:.0}/s client->server + {:.0}/s server->client ...",
                rates.0, rates.1
            );
            let (up, down) = run_meshline_open(&mesh, &servers, &clients, &args, &body, rates);
            let total = Row::total(&up, &down);
            open_rows.extend([up, down, total]);
        }
    }

    println!("\n## Two-way, closed loop\n");
    print_header();
    for r in &rows {
        print_row(r);
    }
    let rate = |system: &str, direction: &str| {
        rows.iter()
            .find(|r| r.system == system && r.direction == direction)
            .map(Row::rate)
    };
    if run_mesh && run_tonic_peer {
        println!();
        for d in ["client->server", "server->client", "total"] {
            if let (Some(m), Some(t)) = (rate("meshline", d), rate("tonic", d)) {
                println!(
                    "ratio meshline/tonic, {d:<14}: {:.2}x ({m:.0} vs {t:.0} calls/s)",
                    m / t.max(1.0)
                );
            }
        }
    }
    if !open_rows.is_empty() {
        println!("\n## meshline at half of peak (open loop, latency from the actual send)\n");
        print_header();
        for r in &open_rows {
            print_row(r);
        }
        println!();
        for r in &open_rows[..2] {
            println!(
                "  {}: target {:.0}/s, achieved {:.0}/s; from the due time (generator lag included) p50 {:.1} µs, p99 {:.1} µs; send lag p50 {:.1} µs, p99 {:.1} µs",
                r.direction,
                r.target.unwrap_or(0.0),
                r.rate(),
                micros(&r.from_due, 0.5),
                micros(&r.from_due, 0.99),
                micros(&r.lag, 0.5),
                micros(&r.lag, 0.99),
            );
        }
        let worst = open_rows[..2].iter().map(|r| r.p(0.99)).fold(0.0, f64::max);
        println!(
            "p99 at half of peak (worse direction): {worst:.0} µs ({})",
            if worst < 1000.0 {
                "under 1 ms: target met"
            } else {
                "over 1 ms: target missed"
            }
        );
    }
    // Tasks still parked (idle connections, the tonic server) end with the runtimes.
    clients.shutdown_timeout(Duration::from_secs(1));
    servers.shutdown_timeout(Duration::from_secs(1));
}
