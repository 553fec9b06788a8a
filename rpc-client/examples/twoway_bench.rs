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
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use meshline_registry_core::{EmptyProtection, Instance, WatchHub};
use meshline_rpc_client::{CallOptions, Connection, InboundRequest, Payload, RpcClient, Server};
use tokio::runtime::{Handle, Runtime};
use tokio::sync::{Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::http;

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

// ---------------------------------------------------------------- measuring --

fn hist() -> Histogram<u64> {
    // 1 ns .. 60 s (the calls time out at 30 s), 2 significant digits.
    Histogram::new_with_bounds(1, 60_000_000_000, 2).expect("histogram")
}

fn nanos(d: Duration) -> u64 {
    (d.as_nanos() as u64).max(1)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The measured window of a closed-loop run.
#[derive(Debug, Clone, Copy)]
struct Window {
    warm_end: Instant,
    end: Instant,
}

impl Window {
    fn starting_now(secs: f64) -> Window {
        let warm_end = Instant::now() + WARM;
        Window {
            warm_end,
            end: warm_end + Duration::from_secs_f64(secs),
        }
    }
}

#[derive(Default)]
struct Tally {
    /// Latency of calls in the measured window (open loop: from the send).
    lat: Option<Histogram<u64>>,
    /// Open loop only: latency counted from the due time.
    from_due: Option<Histogram<u64>>,
    /// Open loop only: send time minus due time.
    lag: Option<Histogram<u64>>,
    calls: u64,
    errors: u64,
}

/// One direction of one run: progress counters for the watchdog and the tally.
struct Dir {
    name: String,
    /// Successful calls, warm-up included (what the watchdog watches).
    ok: AtomicU64,
    /// Failed calls, warm-up included.
    failed: AtomicU64,
    /// Caller tasks (or stream drivers) still running.
    running: AtomicUsize,
    last_error: Mutex<Option<String>>,
    /// Watchdog bookkeeping: the `ok` count it last saw and when it changed.
    seen: Mutex<(u64, Instant)>,
    tally: Mutex<Tally>,
}

impl Dir {
    fn new(name: impl Into<String>) -> Arc<Dir> {
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

    fn fail(&self, error: impl Into<String>) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        *lock(&self.last_error) = Some(error.into());
    }

    /// Closed loop: a call that started at `t0` and ended at `t1`.
    fn record(&self, w: &Window, t0: Instant, t1: Instant, r: Result<(), String>) {
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
    fn record_open(&self, due: Instant, sent: Instant, done: Instant, r: Result<(), String>) {
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

    fn take(&self) -> Tally {
        std::mem::take(&mut *lock(&self.tally))
    }
}

/// Counts a running caller of a direction; dropping it (also on panic) uncounts it.
struct Running(Arc<Dir>);

impl Running {
    fn enter(dir: &Arc<Dir>) -> Running {
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
static WATCHED: Mutex<Vec<Arc<Dir>>> = Mutex::new(Vec::new());

fn watch(dirs: &[Arc<Dir>]) {
    let now = Instant::now();
    for d in dirs {
        *lock(&d.seen) = (d.ok.load(Ordering::Relaxed), now);
    }
    *lock(&WATCHED) = dirs.to_vec();
}

fn unwatch() {
    lock(&WATCHED).clear();
}

/// Runs on its own OS thread, so a wedged runtime cannot hide a stall from it.
fn start_watchdog() {
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

fn report_stall(stalled: &Dir, dirs: &[Arc<Dir>]) -> ! {
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
fn wait_finished(dirs: &[Arc<Dir>]) {
    while dirs.iter().any(|d| d.running.load(Ordering::SeqCst) > 0) {
        std::thread::sleep(Duration::from_millis(10));
    }
}

// ------------------------------------------------------------------ loops --

/// One call in one direction (what a caller task loops on).
trait Op: Clone + Send + Sync + 'static {
    fn call(&self) -> impl Future<Output = Result<(), String>> + Send;
}

/// Starts `n` closed loops of `op` on `rt`, each until the window ends.
fn spawn_closed(rt: &Handle, dir: &Arc<Dir>, n: usize, w: Window, op: impl Op) {
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
fn spawn_open(
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

// ------------------------------------------------------------- meshline side --

struct Mesh {
    client: RpcClient,
    /// The server's end of the one connection.
    conn: Connection,
    _server: Server,
    _hub: Arc<WatchHub>,
}

fn start_meshline(servers: &Runtime, clients: &Runtime) -> Mesh {
    let server = servers.block_on(async {
        Server::bind(
            "127.0.0.1:0".parse().expect("addr"),
            |req: InboundRequest| std::future::ready(Some(req.payload)),
        )
        .await
        .expect("bind meshline server")
    });
    let addr = server.local_addr();
    let hub = Arc::new(WatchHub::new("twoway", EmptyProtection::Protect));
    hub.publish(
        "echo",
        vec![Instance::new("127.0.0.1", addr.port()).expect("instance")],
    );
    let client = clients.block_on(async {
        let client = RpcClient::builder()
            .watch(hub.subscribe("echo"), "echo")
            .load_balance_name("RoundRobinLoadBalance")
            // The client answers the server's requests with an echo.
            .inbound(|req: InboundRequest| std::future::ready(Some(req.payload)))
            .build()
            .await
            .expect("meshline client");
        client
            .wait_alive(1, Duration::from_secs(5))
            .await
            .expect("meshline client connected");
        client
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    let conn = loop {
        if let Some(c) = server.connections().into_iter().next() {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "the meshline server saw no connection within 5 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    Mesh {
        client,
        conn,
        _server: server,
        _hub: hub,
    }
}

/// client -> server: one call through the `RpcClient`.
#[derive(Clone)]
struct ClientCall {
    client: RpcClient,
    body: Bytes,
}

impl Op for ClientCall {
    async fn call(&self) -> Result<(), String> {
        let r = self
            .client
            .call(Payload::new(self.body.clone()), CallOptions::new())
            .await
            .map_err(|e| e.to_string())?;
        if r.payload.body.len() != self.body.len() {
            return Err("short echo".into());
        }
        Ok(())
    }
}

/// server -> client: one push on the server's `Connection`.
#[derive(Clone)]
struct ServerPush {
    conn: Connection,
    body: Bytes,
}

impl Op for ServerPush {
    async fn call(&self) -> Result<(), String> {
        let p = self
            .conn
            .call(Payload::new(self.body.clone()), PUSH_TIMEOUT)
            .await
            .map_err(|e| e.to_string())?;
        if p.body.len() != self.body.len() {
            return Err("short echo".into());
        }
        Ok(())
    }
}

fn run_meshline_closed(
    mesh: &Mesh,
    servers: &Runtime,
    clients: &Runtime,
    args: &Args,
    body: &Bytes,
) -> (Row, Row) {
    let up = Dir::new("meshline client->server");
    let down = Dir::new("meshline server->client");
    let w = Window::starting_now(args.secs);
    spawn_closed(
        clients.handle(),
        &up,
        args.inflight,
        w,
        ClientCall {
            client: mesh.client.clone(),
            body: body.clone(),
        },
    );
    spawn_closed(
        servers.handle(),
        &down,
        args.inflight,
        w,
        ServerPush {
            conn: mesh.conn.clone(),
            body: body.clone(),
        },
    );
    let dirs = [up.clone(), down.clone()];
    watch(&dirs);
    wait_finished(&dirs);
    unwatch();
    (
        Row::closed("meshline", "client->server", args.inflight, &up, args.secs),
        Row::closed(
            "meshline",
            "server->client",
            args.inflight,
            &down,
            args.secs,
        ),
    )
}

fn run_meshline_open(
    mesh: &Mesh,
    servers: &Runtime,
    clients: &Runtime,
    args: &Args,
    body: &Bytes,
    rates: (f64, f64),
) -> (Row, Row) {
    let up = Dir::new("meshline client->server (half of peak)");
    let down = Dir::new("meshline server->client (half of peak)");
    let secs = args.secs.max(2.0);
    let start = Instant::now() + Duration::from_millis(50);
    spawn_open(
        clients.handle(),
        &up,
        args.inflight,
        rates.0,
        secs,
        start,
        ClientCall {
            client: mesh.client.clone(),
            body: body.clone(),
        },
    );
    spawn_open(
        servers.handle(),
        &down,
        args.inflight,
        rates.1,
        secs,
        start,
        ServerPush {
            conn: mesh.conn.clone(),
            body: body.clone(),
        },
    );
    let dirs = [up.clone(), down.clone()];
    watch(&dirs);
    wait_finished(&dirs);
    unwatch();
    let elapsed = start.elapsed().as_secs_f64();
    (
        Row::open("client->server", rates.0, &up, elapsed),
        Row::open("server->client", rates.1, &down, elapsed),
    )
}

// ---------------------------------------------------------------- tonic peer --

/// One message of either stream: an id to match the answer, and the body (hand-written
/// prost message: no protoc needed).
#[derive(Clone, PartialEq, prost::Message)]
struct Msg {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(bytes = "bytes", tag = "2")]
    body: Bytes,
}

/// What the server's side of the `Reverse` stream should do when the client opens it.
struct ReversePlan {
    dir: Arc<Dir>,
    window: Window,
    inflight: usize,
    body: Bytes,
    running: Running,
}

/// The service, written the way tonic-build generates one (as in echo_bench), with two
/// bidi streaming methods.
#[derive(Clone)]
struct TwoWayService {
    plan: Arc<Mutex<Option<ReversePlan>>>,
}

impl tonic::server::NamedService for TwoWayService {
    const NAME: &'static str = "bench.TwoWay";
}

/// `Forward`: echoes every message of the request stream on the response stream (the
/// request stream itself is the response stream: decode, encode, nothing else).
struct ForwardSvc;

impl tonic::server::StreamingService<Msg> for ForwardSvc {
    type Response = Msg;
    type ResponseStream = tonic::Streaming<Msg>;
    type Future = std::future::Ready<Result<tonic::Response<Self::ResponseStream>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<tonic::Streaming<Msg>>) -> Self::Future {
        std::future::ready(Ok(tonic::Response::new(request.into_inner())))
    }
}

/// `Reverse`: the server sends requests on its response stream and reads the client's
/// answers from the request stream.
struct ReverseSvc(Option<ReversePlan>);

impl tonic::server::StreamingService<Msg> for ReverseSvc {
    type Response = Msg;
    type ResponseStream = ReceiverStream<Result<Msg, tonic::Status>>;
    type Future = std::future::Ready<Result<tonic::Response<Self::ResponseStream>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<tonic::Streaming<Msg>>) -> Self::Future {
        let Some(plan) = self.0.take() else {
            return std::future::ready(Err(tonic::Status::failed_precondition(
                "no reverse run planned",
            )));
        };
        let (tx, rx) = mpsc::channel(plan.inflight * 2);
        tokio::spawn(drive_stream(
            plan.dir,
            plan.window,
            plan.inflight,
            plan.body,
            tx,
            Ok,
            request.into_inner(),
            plan.running,
        ));
        std::future::ready(Ok(tonic::Response::new(ReceiverStream::new(rx))))
    }
}

impl<B> tonic::codegen::Service<http::Request<B>> for TwoWayService
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
        let plan = if req.uri().path() == "/bench.TwoWay/Reverse" {
            lock(&self.plan).take()
        } else {
            None
        };
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
            match req.uri().path() {
                "/bench.TwoWay/Forward" => Ok(grpc.streaming(ForwardSvc, req).await),
                "/bench.TwoWay/Reverse" => Ok(grpc.streaming(ReverseSvc(plan), req).await),
                _ => Ok(tonic::Status::unimplemented("no such method").into_http()),
            }
        })
    }
}

/// The sending side of one stream direction: keeps `inflight` messages outstanding on
/// `out` (one new message per answer) until the window ends, matches answers read from
/// `answers` by id and records their latency. Dropping `out` at the end half-closes the
/// stream; the driver then reads the remaining answers until the peer ends its side.
#[allow(clippy::too_many_arguments)]
async fn drive_stream<T: Send + 'static>(
    dir: Arc<Dir>,
    w: Window,
    inflight: usize,
    body: Bytes,
    out: mpsc::Sender<T>,
    wrap: fn(Msg) -> T,
    mut answers: tonic::Streaming<Msg>,
    running: Running,
) {
    let _running = running;
    let window = Semaphore::new(inflight);
    let pending: Mutex<HashMap<u64, Instant>> = Mutex::new(HashMap::with_capacity(inflight * 2));
    let sender = async {
        let out = out;
        let mut id = 0u64;
        loop {
            let Ok(permit) = window.acquire().await else {
                break;
            };
            permit.forget();
            let now = Instant::now();
            if now >= w.end {
                break;
            }
            id += 1;
            lock(&pending).insert(id, now);
            let msg = Msg {
                id,
                body: body.clone(),
            };
            if out.send(wrap(msg)).await.is_err() {
                dir.fail("the stream closed");
                break;
            }
        }
    };
    let receiver = async {
        loop {
            match answers.message().await {
                Ok(Some(m)) => {
                    let t1 = Instant::now();
                    let sent = lock(&pending).remove(&m.id);
                    match sent {
                        Some(t0) => {
                            let r = if m.body.len() == body.len() {
                                Ok(())
                            } else {
                                Err("short echo".to_string())
                            };
                            dir.record(&w, t0, t1, r);
                        }
                        None => dir.fail(format!("answer to unknown id {}", m.id)),
                    }
                    window.add_permits(1);
                }
                Ok(None) => break,
                Err(status) => {
                    dir.fail(format!("stream failed: {status}"));
                    break;
                }
            }
        }
        // Stop the sender if the stream ended early.
        window.close();
    };
    tokio::join!(sender, receiver);
}

struct Tonic {
    addr: SocketAddr,
    plan: Arc<Mutex<Option<ReversePlan>>>,
}

fn start_tonic(servers: &Runtime) -> Tonic {
    let plan: Arc<Mutex<Option<ReversePlan>>> = Arc::default();
    let service = TwoWayService { plan: plan.clone() };
    let addr = servers.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind tonic server");
        let addr = listener.local_addr().expect("addr");
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        tokio::spawn(async move {
            if let Err(e) = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await
            {
                eprintln!("tonic server: {e}");
            }
        });
        addr
    });
    Tonic { addr, plan }
}

fn run_tonic(tonic: &Tonic, clients: &Runtime, args: &Args, body: &Bytes) -> (Row, Row) {
    let up = Dir::new("tonic client->server");
    let down = Dir::new("tonic server->client");
    let w = Window::starting_now(args.secs);
    *lock(&tonic.plan) = Some(ReversePlan {
        dir: down.clone(),
        window: w,
        inflight: args.inflight,
        body: body.clone(),
        running: Running::enter(&down),
    });
    let up_running = Running::enter(&up);
    let addr = tonic.addr;
    let inflight = args.inflight;
    let (up2, body2) = (up.clone(), body.clone());
    clients.block_on(async move {
        // One Channel from one Endpoint::connect: one HTTP/2 connection for both streams.
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .tcp_nodelay(true)
            .connect()
            .await
            .expect("connect tonic");
        let codec = tonic_prost::ProstCodec::<Msg, Msg>::default;
        // client -> server: our requests on the request stream, echoes come back.
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        grpc.ready().await.expect("tonic ready");
        let (req_tx, req_rx) = mpsc::channel::<Msg>(inflight * 2);
        let echoes = grpc
            .streaming(
                tonic::Request::new(ReceiverStream::new(req_rx)),
                http::uri::PathAndQuery::from_static("/bench.TwoWay/Forward"),
                codec(),
            )
            .await
            .expect("open Forward stream")
            .into_inner();
        tokio::spawn(drive_stream(
            up2,
            w,
            inflight,
            body2,
            req_tx,
            std::convert::identity,
            echoes,
            up_running,
        ));
        // server -> client: the server's requests arrive on the response stream, our
        // answers go back on the request stream.
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.expect("tonic ready");
        let (ans_tx, ans_rx) = mpsc::channel::<Msg>(inflight * 2);
        let mut requests = grpc
            .streaming(
                tonic::Request::new(ReceiverStream::new(ans_rx)),
                http::uri::PathAndQuery::from_static("/bench.TwoWay/Reverse"),
                codec(),
            )
            .await
            .expect("open Reverse stream")
            .into_inner();
        tokio::spawn(async move {
            loop {
                match requests.message().await {
                    Ok(Some(m)) => {
                        if ans_tx.send(m).await.is_err() {
                            eprintln!("tonic client: answer stream closed");
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(status) => {
                        eprintln!("tonic client: Reverse stream failed: {status}");
                        break;
                    }
                }
            }
        });
    });
    let dirs = [up.clone(), down.clone()];
    watch(&dirs);
    wait_finished(&dirs);
    unwatch();
    (
        Row::closed("tonic", "client->server", args.inflight, &up, args.secs),
        Row::closed("tonic", "server->client", args.inflight, &down, args.secs),
    )
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
        self.lat.value_at_quantile(q) as f64 / 1000.0
    }
}

fn print_header() {
    println!(
        "| {:<34} | {:<14} | {:>9} | {:>10} | {:>8} | {:>8} | {:>9} | {:>6} |",
        "system", "direction", "in flight", "calls/s", "p50 µs", "p99 µs", "p99.9 µs", "errors"
    );
    println!(
        "|{:-<36}|{:-<16}|{:->11}|{:->12}|{:->10}|{:->10}|{:->11}|{:->8}|",
        "", "", "", "", "", "", "", ""
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

fn runtime(name: &str) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("runtime")
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
                r.from_due.value_at_quantile(0.5) as f64 / 1000.0,
                r.from_due.value_at_quantile(0.99) as f64 / 1000.0,
                r.lag.value_at_quantile(0.5) as f64 / 1000.0,
                r.lag.value_at_quantile(0.99) as f64 / 1000.0,
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
