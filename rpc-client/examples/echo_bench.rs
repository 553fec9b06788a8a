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
use std::time::Duration;

use bytes::Bytes;
use meshline_bench_support::bench::{
    self, Histogram, Tally, closed_loop, micros, open_loop, runtime,
};
use meshline_bench_support::grpc::{GrpcMethods, HttpRequest, Reply, serve_on_loopback, unary};
use meshline_registry_core::{EmptyProtection, Instance, WatchHub};
use meshline_rpc_client::{CallOptions, InboundRequest, Payload, RpcClient, Server};
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

/// The unary echo service `bench.Echo`, written by hand.
#[derive(Clone)]
struct EchoService;

impl GrpcMethods for EchoService {
    const NAME: &'static str = "bench.Echo";

    fn serve(&mut self, req: HttpRequest) -> Option<Reply> {
        (req.uri().path() == "/bench.Echo/Echo").then(|| unary(EchoUnary, req))
    }
}

struct EchoUnary;

impl tonic::server::UnaryService<EchoMsg> for EchoUnary {
    type Response = EchoMsg;
    type Future = std::future::Ready<Result<tonic::Response<EchoMsg>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<EchoMsg>) -> Self::Future {
        std::future::ready(Ok(tonic::Response::new(request.into_inner())))
    }
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

    /// One echo call (on a clone: the future owns its client, as each bench call does).
    async fn echo(mut self, body: Bytes) -> Result<(), String> {
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

/// One echo call through `client`.
async fn meshline_echo(client: RpcClient, body: Bytes) -> Result<(), String> {
    let r = client
        .call(Payload::new(body), CallOptions::new())
        .await
        .map_err(|e| e.to_string())?;
    if r.payload.body.len() != BODY {
        return Err("short echo".into());
    }
    Ok(())
}

// ---------------------------------------------------------------- measuring --

struct Row {
    name: String,
    concurrency: usize,
    secs: f64,
    tally: Tally,
}

impl Row {
    fn rate(&self) -> f64 {
        self.tally.calls as f64 / self.secs
    }
    /// Latency at quantile `q`, in microseconds.
    fn p(&self, q: f64) -> f64 {
        micros(&self.tally.lat, q)
    }
}

/// Runs `concurrency` closed loops of `op` for `secs` (after a warm-up) as row `name`,
/// and prints the row; `None` when `ECHO_BENCH_ONLY` (a part of `<name>@<concurrency>`)
/// leaves it out.
async fn measure<F, Fut>(name: &str, concurrency: usize, secs: f64, op: F) -> Option<Row>
where
    F: Fn(u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let only = std::env::var("ECHO_BENCH_ONLY").unwrap_or_default();
    if !only.is_empty() && !format!("{name}@{concurrency}").contains(&only) {
        return None;
    }
    let row = Row {
        name: name.to_string(),
        concurrency,
        secs,
        tally: closed_loop(concurrency, secs, op).await,
    };
    print_row(&row);
    Some(row)
}

/// Open loop of meshline echo calls at `rate` calls/s for `secs` (wrk2-style, see
/// [`open_loop`]), from `ECHO_BENCH_OPEN_WORKERS` (default 256) tasks: the row (latency
/// counted from the actual send), with the loop's `lag` (send time minus due time:
/// whether the generator kept the schedule) and latency counted from the due time.
/// Tokio timers tick every millisecond, so lag up to 1 ms is the generator's own
/// granularity, and the requests of one tick are released together (burstier, so
/// harsher, than smooth arrivals); lag beyond that means a worker was still waiting for
/// its previous answer or the process was descheduled.
async fn open_loop_row(
    client: RpcClient,
    body: Bytes,
    rate: f64,
    secs: f64,
) -> (Row, Histogram<u64>, Histogram<u64>) {
    let workers: u64 = std::env::var("ECHO_BENCH_OPEN_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let open = open_loop(workers, rate, secs, move |_| {
        let (client, body) = (client.clone(), body.clone());
        async move {
            client
                .call(Payload::new(body), CallOptions::new())
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
    })
    .await;
    let row = Row {
        name: format!("meshline 1 conn, open loop {:.0}/s", rate),
        concurrency: 0,
        secs: open.secs,
        tally: open.tally,
    };
    (row, open.lag, open.from_due)
}

fn print_header() {
    bench::print_header(
        1,
        &[
            ("system", 34),
            ("in flight", 8),
            ("calls/s", 12),
            ("p50 µs", 9),
            ("p99 µs", 9),
            ("errors", 6),
        ],
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
        r.tally.errors
    );
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
        let tonic1 = vec![serve_on_loopback(EchoService).await];
        let mut tonic3 = Vec::new();
        for _ in 0..3 {
            tonic3.push(serve_on_loopback(EchoService).await);
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
        for &c in &CONCURRENCY {
            for (name, client) in [("meshline, 1 connection", &m1), ("meshline, 3 endpoints", &m3)] {
                let (client, body) = (client.clone(), body.clone());
                let op = move |_| meshline_echo(client.clone(), body.clone());
                rows.extend(measure(name, c, secs, op).await);
            }
            for (name, client) in [("tonic unary, 1 connection", &t1), ("tonic unary, 3 endpoints", &t3)] {
                let (client, body) = (client.clone(), body.clone());
                let op = move |_| client.clone().echo(body.clone());
                rows.extend(measure(name, c, secs, op).await);
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
            let (open, lag, from_due) =
                open_loop_row(m1.clone(), body.clone(), target, secs.max(2.0)).await;
            print_row(&open);
            println!(
                "  (open loop latency p90 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {:.1} µs)",
                open.p(0.90),
                open.p(0.99),
                open.p(0.999),
                open.tally.lat.max() as f64 / 1000.0
            );
            println!(
                "  (open loop at {fraction} x peak: target {:.0}/s, achieved {:.0}/s; send lag behind schedule p50 {:.1} µs, p99 {:.1} µs)",
                target,
                open.rate(),
                micros(&lag, 0.5),
                micros(&lag, 0.99)
            );
            println!(
                "  (open loop latency counted from the due time instead, generator lag included: p50 {:.1} µs, p99 {:.1} µs)",
                micros(&from_due, 0.5),
                micros(&from_due, 0.99)
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
