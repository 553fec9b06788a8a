//! Echo round trips on loopback: meshline `RpcClient` (Seata v1 frames) against a tonic
//! unary echo, same payload, same concurrency, same process layout, same run.
//!
//! ```text
//! cargo run --release -p meshline-rpc-client --example echo_bench
//! ECHO_BENCH_SECS=3 cargo run --release -p meshline-rpc-client --example echo_bench
//! ```
//!
//! Layout: servers run on their own tokio runtime (1 worker thread), clients on
//! another (1 worker thread), so on a 2-core machine each side has a core, for both
//! systems alike. Each measurement is closed-loop: `C` tasks each send a 64-byte body
//! and wait for the echo, in a loop, for `ECHO_BENCH_SECS` (default 2 s) after a
//! 300 ms warm-up; latencies go into an HDR histogram.
//!
//! Rows: meshline over 1 connection (1 server) and over 3 endpoints (3 servers, round
//! robin, one connection each); tonic over 1 HTTP/2 connection and over 3 endpoints
//! (`Channel::balance_list`). Then an open-loop run of meshline over 1 connection at
//! half its measured peak rate, where latency counts from each request's *scheduled*
//! send time (so a stall cannot hide queued requests).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use meshline_registry_core::{EmptyProtection, Instance, WatchHub};
use meshline_rpc_client::{CallOptions, InboundRequest, Payload, RpcClient, Server};
use tokio::runtime::Runtime;
use tonic::codegen::http;

const BODY: usize = 64;
const CONCURRENCY: [usize; 3] = [1, 16, 256];

// ---------------------------------------------------------------- tonic peer --

/// The echo message (hand-written prost message: no protoc needed).
#[derive(Clone, PartialEq, prost::Message)]
struct EchoMsg {
    #[prost(bytes = "bytes", tag = "1")]
    body: Bytes,
}

/// A unary echo service written the way tonic-build generates one.
#[derive(Clone)]
struct EchoService;

impl tonic::server::NamedService for EchoService {
    const NAME: &'static str = "bench.Echo";
}

struct EchoUnary;

impl tonic::server::UnaryService<EchoMsg> for EchoUnary {
    type Response = EchoMsg;
    type Future = std::future::Ready<Result<tonic::Response<EchoMsg>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<EchoMsg>) -> Self::Future {
        std::future::ready(Ok(tonic::Response::new(request.into_inner())))
    }
}

impl<B> tonic::codegen::Service<http::Request<B>> for EchoService
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = tonic::codegen::BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        Box::pin(async move {
            if req.uri().path() == "/bench.Echo/Echo" {
                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
                Ok(grpc.unary(EchoUnary, req).await)
            } else {
                Ok(tonic::Status::unimplemented("no such method").into_http())
            }
        })
    }
}

async fn start_tonic() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tokio::spawn(async move {
        if let Err(e) = tonic::transport::Server::builder()
            .add_service(EchoService)
            .serve_with_incoming(incoming)
            .await
        {
            eprintln!("tonic server: {e}");
        }
    });
    addr
}

#[derive(Clone)]
struct TonicClient {
    grpc: tonic::client::Grpc<tonic::transport::Channel>,
}

impl TonicClient {
    async fn connect(addrs: &[SocketAddr]) -> TonicClient {
        let endpoints: Vec<_> = addrs
            .iter()
            .map(|a| {
                tonic::transport::Endpoint::from_shared(format!("http://{a}"))
                    .expect("endpoint")
                    .tcp_nodelay(true)
            })
            .collect();
        let channel = if endpoints.len() == 1 {
            endpoints[0].connect().await.expect("connect tonic")
        } else {
            tonic::transport::Channel::balance_list(endpoints.into_iter())
        };
        TonicClient {
            grpc: tonic::client::Grpc::new(channel),
        }
    }

    async fn echo(&mut self, body: Bytes) -> Result<(), String> {
        self.grpc.ready().await.map_err(|e| e.to_string())?;
        let path = http::uri::PathAndQuery::from_static("/bench.Echo/Echo");
        let resp: tonic::Response<EchoMsg> = self
            .grpc
            .unary(
                tonic::Request::new(EchoMsg { body }),
                path,
                tonic_prost::ProstCodec::default(),
            )
            .await
            .map_err(|e| e.to_string())?;
        if resp.get_ref().body.len() != BODY {
            return Err("short echo".into());
        }
        Ok(())
    }
}

// ------------------------------------------------------------- meshline side --

async fn start_meshline() -> SocketAddr {
    let server = Server::bind(
        "127.0.0.1:0".parse().expect("addr"),
        |req: InboundRequest| std::future::ready(Some(req.payload)),
    )
    .await
    .expect("bind");
    let addr = server.local_addr();
    // The server runs until the process exits.
    std::mem::forget(server);
    addr
}

async fn meshline_client(addrs: &[SocketAddr]) -> RpcClient {
    let hub = Arc::new(WatchHub::new("bench", EmptyProtection::Protect));
    hub.publish(
        "echo",
        addrs
            .iter()
            .map(|a| Instance::new("127.0.0.1", a.port()).expect("instance"))
            .collect(),
    );
    let client = RpcClient::builder()
        .watch(hub.subscribe("echo"), "echo")
        .load_balance_name("RoundRobinLoadBalance")
        .configure(|o| o.transport.request_queue_bytes = 64 << 20)
        .build()
        .await
        .expect("client");
    client
        .wait_alive(addrs.len(), Duration::from_secs(5))
        .await
        .expect("connected");
    // The hub must outlive the client's watch.
    std::mem::forget(hub);
    client
}

// ---------------------------------------------------------------- measuring --

struct Row {
    name: String,
    concurrency: usize,
    calls: u64,
    errors: u64,
    secs: f64,
    hist: Histogram<u64>,
}

impl Row {
    fn rate(&self) -> f64 {
        self.calls as f64 / self.secs
    }
    /// Latency at quantile `q`, in microseconds.
    fn p(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 10_000_000_000, 2).expect("histogram")
}

/// Runs `concurrency` closed loops of `op` for `secs` (after a warm-up).
async fn closed_loop<F, Fut>(name: &str, concurrency: usize, secs: f64, op: F) -> Row
where
    F: Fn() -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let warm = Duration::from_millis(300);
    let measure = Duration::from_secs_f64(secs);
    let start = Instant::now();
    // One histogram for all tasks (they share one thread; the lock is uncontended),
    // so the harness stays small in cache.
    let shared = Arc::new(std::sync::Mutex::new((hist(), 0u64, 0u64)));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let op = op.clone();
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let t0 = Instant::now();
                if t0 >= start + warm + measure {
                    break;
                }
                let r = op().await;
                let t1 = Instant::now();
                if t0 >= start + warm && t1 <= start + warm + measure {
                    let mut g = shared.lock().unwrap_or_else(|p| p.into_inner());
                    match r {
                        Ok(()) => {
                            g.1 += 1;
                            let _ = g.0.record((t1 - t0).as_nanos().max(1) as u64);
                        }
                        Err(_) => g.2 += 1,
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("bench task");
    }
    let (all, calls, errors) = std::mem::replace(
        &mut *shared.lock().unwrap_or_else(|p| p.into_inner()),
        (hist(), 0, 0),
    );
    Row {
        name: name.to_string(),
        concurrency,
        calls,
        errors,
        secs,
        hist: all,
    }
}

/// Open loop at `rate` calls/s for `secs` (wrk2-style): request `i` is due at
/// `start + i / rate`; `WORKERS` tasks each take every `WORKERS`-th request, wait until
/// it is due and send it. Latency is counted from the actual send; `lag` (send time
/// minus due time) shows whether the generator kept the schedule. Tokio timers tick
/// every millisecond, so lag up to 1 ms is the generator's own granularity, and the
/// requests of one tick are released together (burstier, so harsher, than smooth
/// arrivals); lag beyond that means a worker was still waiting for its previous answer
/// or the process was descheduled.
async fn open_loop(
    client: RpcClient,
    body: Bytes,
    rate: f64,
    secs: f64,
) -> (Row, Histogram<u64>, Histogram<u64>) {
    let workers: u64 = std::env::var("ECHO_BENCH_OPEN_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let interval = Duration::from_secs_f64(1.0 / rate);
    let total = (rate * secs) as u64;
    let start = Instant::now() + Duration::from_millis(50);
    let shared = Arc::new(std::sync::Mutex::new((hist(), hist(), 0u64, 0u64, hist())));
    let mut tasks = Vec::new();
    for w in 0..workers {
        let client = client.clone();
        let body = body.clone();
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = w;
            while i < total {
                let due = start + interval.mul_f64(i as f64);
                if due > Instant::now() {
                    tokio::time::sleep_until(due.into()).await;
                }
                let sent = Instant::now();
                let r = client
                    .call(Payload::new(body.clone()), CallOptions::new())
                    .await;
                let done = Instant::now();
                let mut g = shared.lock().unwrap_or_else(|p| p.into_inner());
                match r {
                    Ok(_) => {
                        g.2 += 1;
                        let _ = g.0.record((done - sent).as_nanos().max(1) as u64);
                        let _ = g
                            .1
                            .record(sent.saturating_duration_since(due).as_nanos().max(1) as u64);
                        let _ = g
                            .4
                            .record(done.saturating_duration_since(due).as_nanos().max(1) as u64);
                    }
                    Err(_) => g.3 += 1,
                }
                i += workers;
            }
        }));
    }
    for t in tasks {
        t.await.expect("open-loop task");
    }
    let (lat, lag, calls, errors, from_due) = std::mem::replace(
        &mut *shared.lock().unwrap_or_else(|p| p.into_inner()),
        (hist(), hist(), 0, 0, hist()),
    );
    let elapsed = start.elapsed().as_secs_f64();
    (
        Row {
            name: format!("meshline 1 conn, open loop {:.0}/s", rate),
            concurrency: 0,
            calls,
            errors,
            secs: elapsed,
            hist: lat,
        },
        lag,
        from_due,
    )
}

fn print_header() {
    println!(
        "| {:<34} | {:>8} | {:>12} | {:>9} | {:>9} | {:>6} |",
        "system", "in flight", "calls/s", "p50 µs", "p99 µs", "errors"
    );
    println!(
        "|{:-<36}|{:->10}|{:->14}|{:->11}|{:->11}|{:->8}|",
        "", "", "", "", "", ""
    );
}

fn print_row(r: &Row) {
    let c = if r.concurrency == 0 {
        "open".to_string()
    } else {
        r.concurrency.to_string()
    };
    println!(
        "| {:<34} | {:>8} | {:>12.0} | {:>9.1} | {:>9.1} | {:>6} |",
        r.name,
        c,
        r.rate(),
        r.p(0.50),
        r.p(0.99),
        r.errors
    );
}

fn runtime(name: &str) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("runtime")
}

fn main() {
    let secs: f64 = std::env::var("ECHO_BENCH_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2.0);
    let servers = runtime("servers");
    let clients = runtime("clients");
    let (mesh1, mesh3, tonic1, tonic3) = servers.block_on(async {
        let mesh1 = vec![start_meshline().await];
        let mut mesh3 = Vec::new();
        for _ in 0..3 {
            mesh3.push(start_meshline().await);
        }
        let tonic1 = vec![start_tonic().await];
        let mut tonic3 = Vec::new();
        for _ in 0..3 {
            tonic3.push(start_tonic().await);
        }
        (mesh1, mesh3, tonic1, tonic3)
    });
    let body = Bytes::from(vec![0x5au8; BODY]);
    println!(
        "echo_bench: {BODY}-byte echo on loopback, servers and clients on one worker thread each, {secs} s per row\n"
    );
    let rows = clients.block_on(async {
        let m1 = meshline_client(&mesh1).await;
        let m3 = meshline_client(&mesh3).await;
        let t1 = TonicClient::connect(&tonic1).await;
        let t3 = TonicClient::connect(&tonic3).await;
        let mut rows = Vec::new();
        print_header();
        let only = std::env::var("ECHO_BENCH_ONLY").unwrap_or_default();
        let selected = |name: &str, c: usize| only.is_empty() || format!("{name}@{c}").contains(&only);
        for &c in &CONCURRENCY {
            for (name, client) in [("meshline, 1 connection", &m1), ("meshline, 3 endpoints", &m3)] {
                if !selected(name, c) {
                    continue;
                }
                let client = client.clone();
                let body = body.clone();
                let row = closed_loop(name, c, secs, move || {
                    let client = client.clone();
                    let body = body.clone();
                    async move {
                        let r = client
                            .call(Payload::new(body), CallOptions::new())
                            .await
                            .map_err(|e| e.to_string())?;
                        if r.payload.body.len() != BODY {
                            return Err("short echo".into());
                        }
                        Ok(())
                    }
                })
                .await;
                print_row(&row);
                rows.push(row);
            }
            for (name, client) in [("tonic unary, 1 connection", &t1), ("tonic unary, 3 endpoints", &t3)] {
                if !selected(name, c) {
                    continue;
                }
                let client = client.clone();
                let body = body.clone();
                let row = closed_loop(name, c, secs, move || {
                    let mut client = client.clone();
                    let body = body.clone();
                    async move { client.echo(body).await }
                })
                .await;
                print_row(&row);
                rows.push(row);
            }
        }
        let peak = rows
            .iter()
            .filter(|r| r.name == "meshline, 1 connection")
            .map(Row::rate)
            .fold(0.0, f64::max);
        if peak > 0.0 {
            let fraction: f64 = std::env::var("ECHO_BENCH_OPEN_FRACTION")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.5);
            let target = peak * fraction;
            let (open, lag, from_due) = open_loop(m1.clone(), body.clone(), target, secs.max(2.0)).await;
            print_row(&open);
            println!(
                "  (open loop latency p90 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {:.1} µs)",
                open.p(0.90),
                open.p(0.99),
                open.p(0.999),
                open.hist.max() as f64 / 1000.0
            );
            println!(
                "  (open loop at {fraction} x peak: target {:.0}/s, achieved {:.0}/s; send lag behind schedule p50 {:.1} µs, p99 {:.1} µs)",
                target,
                open.rate(),
                lag.value_at_quantile(0.5) as f64 / 1000.0,
                lag.value_at_quantile(0.99) as f64 / 1000.0
            );
            println!(
                "  (open loop latency counted from the due time instead, generator lag included: p50 {:.1} µs, p99 {:.1} µs)",
                from_due.value_at_quantile(0.5) as f64 / 1000.0,
                from_due.value_at_quantile(0.99) as f64 / 1000.0
            );
            rows.push(open);
        }
        rows
    });
    let find = |name: &str, c: usize| {
        rows.iter()
            .find(|r| r.name == name && r.concurrency == c)
            .map(Row::rate)
            .unwrap_or(0.0)
    };
    println!();
    for &c in &CONCURRENCY {
        println!(
            "ratio meshline/tonic at {c:>3} in flight: 1 connection {:.2}x, 3 endpoints {:.2}x",
            find("meshline, 1 connection", c) / find("tonic unary, 1 connection", c).max(1.0),
            find("meshline, 3 endpoints", c) / find("tonic unary, 3 endpoints", c).max(1.0),
        );
    }
    if let Some(open) = rows.last().filter(|r| r.concurrency == 0) {
        println!(
            "open loop at half of meshline's 1-connection peak: p99 {:.0} µs ({})",
            open.p(0.99),
            if open.p(0.99) < 1000.0 {
                "under 1 ms"
            } else {
                "over 1 ms"
            }
        );
    }
    // Servers run until the runtimes are dropped here.
    drop(clients);
    drop(servers);
}
