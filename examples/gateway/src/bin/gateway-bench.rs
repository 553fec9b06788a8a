//! `gateway-bench`: what the gateway costs. Measures, in one run on this machine,
//! lobby requests (module 1, opcode 1: answered at once by a game backend):
//!
//! 1. **through the gateway**: `--clients` TCP clients, each with `--inflight`
//!    requests outstanding, via the gateway to the backends;
//! 2. **direct**: the same number of callers using an `RpcClient` to the same backends
//!    (what the gateway itself does per message), with the same head map and body.
//!
//! and prints messages/s and p50 / p99 latency of both, and the gateway's added latency.
//! Everything runs in this process on loopback (gateway, backends, clients share the
//! machine's cores), so the figures are for comparing the two paths, not absolute
//! capacity.
//!
//! ```text
//! cargo run --release -p meshline-example-gateway --bin gateway-bench -- --secs 5
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use hdrhistogram::Histogram;
use meshline::RegistryService;
use meshline::rpc::{CallOptions, Connection, Payload, RpcClient};
use meshline_example_gateway::client::GatewayClient;
use meshline_example_gateway::game_backend::{GameBackend, modules};
use meshline_example_gateway::gateway::admission::TokenMinter;
use meshline_example_gateway::gateway::limits::LimitSettings;
use meshline_example_gateway::gateway::queue::QueueSettings;
use meshline_example_gateway::gateway::settings::{
    GatewaySettings, ModuleKind, ModuleRoute, RouteKey,
};
use meshline_example_gateway::gateway::{Gateway, command, wire};
use meshline_example_gateway::memory_registry::MemoryRegistry;

#[derive(Parser, Debug)]
#[command(about = "Gateway throughput and added latency against direct rpc-client calls")]
struct Args {
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5)]
    secs: u64,
    /// Client connections (and direct callers).
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Requests outstanding per client.
    #[arg(long, default_value_t = 4)]
    inflight: usize,
    /// Game backends.
    #[arg(long, default_value_t = 2)]
    backends: usize,
    /// Instead of one comparison: a load sweep, one gateway and one direct measurement
    /// per concurrency level (connections with 1 request in flight each; direct: as
    /// many callers on one `RpcClient`), e.g. `1,2,4,8,16,32,64,128,256`.
    #[arg(long, value_delimiter = ',')]
    sweep: Vec<usize>,
    /// Where the sweep's rows go as CSV (`path,concurrency,msgs_per_s,p50_us,p99_us`),
    /// the input of `gateway-plot`.
    #[arg(long)]
    csv: Option<std::path::PathBuf>,
    /// Instead of latency: the broadcast fan-out saving with this many players in one
    /// room (backend bytes out per room update, `bcast` vs one `send` per player).
    #[arg(long)]
    fanout: Option<usize>,
    /// Measure the gateway path only, no direct comparison (for profiling it).
    #[arg(long)]
    only_gateway: bool,
}

struct Result_ {
    calls: u64,
    secs: f64,
    hist: Histogram<u64>,
    /// CPU seconds this process used meanwhile (user + system, every thread).
    cpu: f64,
}

/// CPU seconds used by this process so far (`/proc/self/stat` utime + stime).
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line, 11 and 12 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

impl Result_ {
    fn row(&self, name: &str) -> String {
        let (rate, p50, p99, cpu) = self.figures();
        format!("| {name:<28} | {rate:>10.0} | {p50:>8} | {p99:>8} | {cpu:>10.1} |")
    }

    /// What a row reports: calls a second, p50 and p99 latency (us), CPU us a message.
    fn figures(&self) -> (f64, u64, u64, f64) {
        (
            self.calls as f64 / self.secs,
            self.hist.value_at_quantile(0.5),
            self.hist.value_at_quantile(0.99),
            self.cpu_per_msg(),
        )
    }

    /// CPU microseconds per message, everything in this process included (clients,
    /// gateway, backends): less sensitive to other load on the machine than latency.
    fn cpu_per_msg(&self) -> f64 {
        self.cpu * 1e6 / self.calls.max(1) as f64
    }
}

async fn measure<F, Fut>(workers: usize, secs: u64, make: F) -> Result_
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Histogram<u64>> + Send + 'static,
{
    let start = Instant::now();
    let cpu = cpu_secs();
    let tasks: Vec<_> = (0..workers).map(|i| tokio::spawn(make(i))).collect();
    let mut hist = Histogram::<u64>::new(3).expect("histogram");
    for t in tasks {
        if let Ok(h) = t.await {
            hist.add(h).expect("same bounds");
        }
    }
    let _ = secs;
    Result_ {
        calls: hist.len(),
        secs: start.elapsed().as_secs_f64(),
        hist,
        cpu: cpu_secs() - cpu,
    }
}

/// Gateway settings for a bench: on loopback, one module, no rate limits or login
/// queue (the clients share one address and send flat out; every login at once).
fn bench_settings(
    route: ModuleRoute,
) -> Result<GatewaySettings, Box<dyn std::error::Error + Send + Sync>> {
    let mut settings = GatewaySettings {
        listen: "127.0.0.1:0".parse()?,
        secret: "bench".into(),
        register_cluster: None,
        limits: LimitSettings::off(),
        queue: QueueSettings::off(),
        ..GatewaySettings::default()
    };
    settings.modules.insert(route.id, route);
    Ok(settings)
}

/// The lobby measured both ways: its backends, the gateway in front of them, the
/// gateway's clients and the direct `RpcClient`.
struct Lobby {
    /// Kept running until the bench ends.
    _backends: Vec<GameBackend>,
    gw: Gateway,
    clients: Vec<Arc<GatewayClient>>,
    direct: RpcClient,
}

/// Starts `--backends` lobby backends and the gateway, connects as many clients as the
/// largest sweep level (or `--clients`), and the direct client.
async fn start_lobby(args: &Args) -> Result<Lobby, Box<dyn std::error::Error + Send + Sync>> {
    let registry = Arc::new(MemoryRegistry::default());
    let mut backends = Vec::new();
    for i in 0..args.backends {
        backends.push(
            GameBackend::start(
                &format!("be-{i}"),
                "127.0.0.1:0".parse()?,
                registry.clone(),
                &["lobby"],
                Duration::from_secs(3600),
            )
            .await?,
        );
    }
    let settings = bench_settings(ModuleRoute {
        id: modules::LOBBY,
        name: "lobby".into(),
        cluster: "lobby".into(),
        kind: ModuleKind::Stateless,
        choice: "RoundRobinLoadBalance".into(),
        key: RouteKey::None,
    })?;
    let gw = Gateway::start(settings, registry.clone()).await?;
    gw.backend("lobby")
        .expect("lobby cluster")
        .wait_alive(args.backends, Duration::from_secs(5))
        .await?;
    let minter = TokenMinter::new("bench");
    let mut clients = Vec::new();
    let connections = args
        .sweep
        .iter()
        .copied()
        .max()
        .unwrap_or(args.clients)
        .max(1);
    for i in 0..connections {
        clients.push(Arc::new(
            GatewayClient::auth(
                gw.local_addr(),
                &minter.mint(&format!("bench{i}"), Duration::from_secs(3600)),
            )
            .await?,
        ));
    }
    let direct = RpcClient::builder()
        .watch(registry.watch("lobby").await?, "lobby-direct")
        .load_balance_name("RoundRobinLoadBalance")
        .build()
        .await?;
    direct
        .wait_alive(args.backends, Duration::from_secs(5))
        .await?;
    Ok(Lobby {
        _backends: backends,
        gw,
        clients,
        direct,
    })
}

/// The instant `secs` seconds from now.
fn deadline(secs: u64) -> Instant {
    Instant::now() + Duration::from_secs(secs)
}

/// The load sweep: at each level, one gateway and one direct measurement, printed as a
/// table and written as CSV to `--csv`.
async fn sweep(args: &Args, lobby: &Lobby) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (clients, direct) = (&lobby.clients, &lobby.direct);
    let mut csv = String::from("path,concurrency,msgs_per_s,p50_us,p99_us,cpu_us_per_msg\n");
    println!(
        "gateway-bench sweep: {} backends, {} s per point, 2 runtime workers\n",
        args.backends, args.secs
    );
    println!("| in flight | path    |   msgs/s   |  p50 us  |  p99 us  | CPU us/msg |");
    println!("|----------:|---------|------------|----------|----------|------------|");
    // Warm-up.
    let until = deadline(1);
    let _ = measure(clients.len(), 1, |i| {
        let c = clients[i].clone();
        async move { gateway_loop(c, until).await }
    })
    .await;
    for &level in &args.sweep {
        let until = deadline(args.secs);
        let via = measure(level, args.secs, |i| {
            let c = clients[i].clone();
            async move { gateway_loop(c, until).await }
        })
        .await;
        let until = deadline(args.secs);
        let dir = measure(level, args.secs, |i| {
            let d = direct.clone();
            async move { direct_loop(d, i, until).await }
        })
        .await;
        for (name, r) in [("gateway", &via), ("direct", &dir)] {
            let (rate, p50, p99, cpu) = r.figures();
            println!(
                "| {level:>9} | {name:<7} | {rate:>10.0} | {p50:>8} | {p99:>8} | {cpu:>10.1} |"
            );
            csv.push_str(&format!("{name},{level},{rate:.0},{p50},{p99},{cpu:.1}\n"));
        }
    }
    if let Some(path) = &args.csv {
        std::fs::write(path, csv)?;
    }
    Ok(())
}

/// One comparison: `--clients` x `--inflight` callers through the gateway, then as many
/// direct (unless `--only-gateway`), and what the gateway added.
async fn compare(args: &Args, lobby: &Lobby) {
    let (clients, direct) = (&lobby.clients, &lobby.direct);
    // Warm-up, then through the gateway.
    let until = deadline(1);
    let _ = measure(args.clients * args.inflight, 1, |i| {
        let c = clients[i % clients.len()].clone();
        async move { gateway_loop(c, until).await }
    })
    .await;
    let until = deadline(args.secs);
    let via = measure(args.clients * args.inflight, args.secs, |i| {
        let c = clients[i % clients.len()].clone();
        async move { gateway_loop(c, until).await }
    })
    .await;
    if args.only_gateway {
        println!("{}", via.row("client -> gateway -> backend"));
        return;
    }
    let until = deadline(args.secs);
    let dir = measure(args.clients * args.inflight, args.secs, |i| {
        let d = direct.clone();
        async move { direct_loop(d, i, until).await }
    })
    .await;
    println!(
        "gateway-bench: {} clients x {} in flight, {} backends, {} s each, 2 runtime workers\n",
        args.clients, args.inflight, args.backends, args.secs
    );
    println!("| path                         |   msgs/s   |  p50 us  |  p99 us  | CPU us/msg |");
    println!("|------------------------------|------------|----------|----------|------------|");
    println!("{}", via.row("client -> gateway -> backend"));
    println!("{}", dir.row("rpc-client -> backend"));
    println!(
        "\nadded by the gateway: p50 +{} us, p99 +{} us; throughput {:.2}x of direct; CPU per message {:.1} us vs {:.1} us",
        via.hist.value_at_quantile(0.5) as i64 - dir.hist.value_at_quantile(0.5) as i64,
        via.hist.value_at_quantile(0.99) as i64 - dir.hist.value_at_quantile(0.99) as i64,
        (via.calls as f64 / via.secs) / (dir.calls as f64 / dir.secs),
        via.cpu_per_msg(),
        dir.cpu_per_msg()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args = Args::parse();
    if let Some(players) = args.fanout {
        return fanout(players).await;
    }
    let lobby = start_lobby(&args).await?;
    if !args.sweep.is_empty() {
        sweep(&args, &lobby).await?;
        lobby.direct.shutdown(Duration::from_secs(1)).await;
    } else {
        compare(&args, &lobby).await;
        if !args.only_gateway {
            lobby.direct.shutdown(Duration::from_secs(1)).await;
        }
    }
    lobby.gw.shutdown().await;
    Ok(())
}

async fn gateway_loop(c: Arc<GatewayClient>, until: Instant) -> Histogram<u64> {
    let mut h = Histogram::<u64>::new(3).expect("histogram");
    while Instant::now() < until {
        let t0 = Instant::now();
        if c.request(modules::LOBBY, 1, Bytes::new()).await.is_ok() {
            let _ = h.record(t0.elapsed().as_micros() as u64);
        }
    }
    h
}

async fn direct_loop(d: RpcClient, i: usize, until: Instant) -> Histogram<u64> {
    let mut h = Histogram::<u64>::new(3).expect("histogram");
    let account = format!("bench{i}");
    while Instant::now() < until {
        let t0 = Instant::now();
        // The head map the gateway stamps, so the backend does the same work.
        let p = Payload::new(Bytes::new())
            .with_head(wire::MODULE, "1")
            .with_head(wire::OPCODE, "1")
            .with_head(wire::SEQ, "1")
            .with_head(wire::ACCOUNT, account.clone())
            .with_head(wire::SESSION, "0123456789abcdef0123456789abcdef")
            .with_head(wire::GATEWAY, "direct")
            .with_head(wire::ADDR, "127.0.0.1:1")
            .with_head(wire::ROLE, "")
            .with_head(wire::STATE, "");
        if d.call(p, CallOptions::new()).await.is_ok() {
            let _ = h.record(t0.elapsed().as_micros() as u64);
        }
    }
    h
}

/// Room updates sent per measurement.
const UPDATES: u64 = 50;

/// A byte-counting proxy to `target`: returns its address and the count of bytes it
/// carried from `target` back (the backend's bytes out to the gateway).
async fn counting_proxy(
    target: SocketAddr,
) -> Result<(SocketAddr, Arc<AtomicU64>), Box<dyn std::error::Error + Send + Sync>> {
    let to_gateway = Arc::new(AtomicU64::new(0));
    let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let proxy_addr = proxy.local_addr()?;
    let counter = to_gateway.clone();
    tokio::spawn(async move {
        while let Ok((gw_side, _)) = proxy.accept().await {
            let Ok(be_side) = tokio::net::TcpStream::connect(target).await else {
                continue;
            };
            let (mut gr, mut gwr) = gw_side.into_split();
            let (mut br, mut bw) = be_side.into_split();
            tokio::spawn(async move { tokio::io::copy(&mut gr, &mut bw).await });
            let counter = counter.clone();
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = br.read(&mut buf).await {
                    if n == 0 || gwr.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    counter.fetch_add(n as u64, Ordering::Relaxed);
                }
            });
        }
    });
    Ok((proxy_addr, to_gateway))
}

/// A gateway whose room cluster is the proxy at `proxy_addr`, and `players` clients
/// on it, every one joined to the room `arena`.
async fn room_players(
    proxy_addr: SocketAddr,
    players: usize,
) -> Result<(Gateway, Vec<Arc<GatewayClient>>), Box<dyn std::error::Error + Send + Sync>> {
    let registry = Arc::new(MemoryRegistry::default());
    registry
        .register(
            "room",
            &meshline::Instance::new(&proxy_addr.ip().to_string(), proxy_addr.port())?,
        )
        .await?;
    let settings = bench_settings(ModuleRoute {
        id: modules::ROOM,
        name: "room".into(),
        cluster: "room".into(),
        kind: ModuleKind::Keyed,
        choice: "RoundRobinLoadBalance".into(),
        key: RouteKey::Word,
    })?;
    let gw = Gateway::start(settings, registry.clone()).await?;
    gw.backend("room")
        .expect("room cluster")
        .wait_alive(1, Duration::from_secs(5))
        .await?;
    let minter = TokenMinter::new("bench");
    let mut clients = Vec::new();
    for i in 0..players {
        let c = GatewayClient::auth(
            gw.local_addr(),
            &minter.mint(&format!("player{i}"), Duration::from_secs(3600)),
        )
        .await?;
        c.request(modules::ROOM, 1, Bytes::from_static(b"arena"))
            .await?;
        clients.push(Arc::new(c));
    }
    Ok((gw, clients))
}

/// The room update number `n`.
fn update(n: u64) -> Bytes {
    Bytes::from(format!("arena snapshot {n:08}"))
}

/// One fan-out measurement's result.
struct FanoutRow {
    /// One `send` per player (else one `bcast`).
    per_player: bool,
    /// Backend bytes out per update.
    per_update: f64,
    /// Updates the players received, all told.
    delivered: u64,
}

/// Sends `UPDATES` room updates from the backend's connection `conn`, as one `bcast`
/// each or one `send` per player, and counts the bytes `to_gateway` and the updates the
/// players received.
async fn fanout_round(
    conn: &Connection,
    clients: &[Arc<GatewayClient>],
    to_gateway: &AtomicU64,
    per_player: bool,
) -> Result<FanoutRow, Box<dyn std::error::Error + Send + Sync>> {
    let sids: Vec<String> = clients.iter().map(|c| c.welcome.session.clone()).collect();
    // Every player counts the updates it receives.
    let receivers: Vec<_> = clients
        .iter()
        .map(|c| {
            let c = c.clone();
            tokio::spawn(async move {
                let mut got = 0;
                while got < UPDATES && c.next_push(Duration::from_secs(10)).await.is_some() {
                    got += 1;
                }
                got
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = to_gateway.load(Ordering::Relaxed);
    for n in 0..UPDATES {
        if per_player {
            for sid in &sids {
                conn.send_oneway(
                    command("send", update(n))
                        .with_head(wire::TO, sid.clone())
                        .with_head(wire::MODULE, modules::ROOM.to_string())
                        .with_head(wire::OPCODE, "9"),
                )
                .await?;
            }
        } else {
            conn.send_oneway(
                command("bcast", update(n))
                    .with_head(wire::GROUP, "room:arena")
                    .with_head(wire::MODULE, modules::ROOM.to_string())
                    .with_head(wire::OPCODE, "9"),
            )
            .await?;
        }
        // Room updates come at a tick, not back to back: no client queue overflows.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut delivered = 0;
    for r in receivers {
        delivered += r.await.unwrap_or(0);
    }
    let bytes = to_gateway.load(Ordering::Relaxed) - before;
    Ok(FanoutRow {
        per_player,
        per_update: bytes as f64 / UPDATES as f64,
        delivered,
    })
}

/// The fan-out table, and the saving of `bcast`.
fn print_fanout(players: usize, rows: &[FanoutRow]) {
    println!(
        "gateway-bench fan-out: {players} players in one room on one gateway, {UPDATES} updates of {} body bytes\n",
        update(0).len()
    );
    println!(
        "| backend sends              | backend bytes out / update | frames / update | delivered     |"
    );
    println!(
        "|----------------------------|---------------------------:|----------------:|--------------:|"
    );
    for r in rows {
        println!(
            "| {:<26} | {:>26.0} | {:>15} | {:>6} / {:<6} |",
            if r.per_player {
                "one send per player"
            } else {
                "one bcast (gateway copies)"
            },
            r.per_update,
            if r.per_player { players } else { 1 },
            r.delivered,
            players as u64 * UPDATES
        );
    }
    println!(
        "\nsaving: {:.1}x fewer backend bytes per room update with bcast",
        rows[1].per_update / rows[0].per_update
    );
}

/// Backend bytes out per room update with `players` in one room on one gateway: the
/// backend's connection to the gateway goes through a byte-counting proxy, and the same
/// room update is sent as one `bcast` (what the game backend does) and as one `send` per
/// player; every player must receive every update either way.
async fn fanout(players: usize) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // The backend registers in its own registry; the gateway's names the proxy.
    let private = Arc::new(MemoryRegistry::default());
    let backend = GameBackend::start(
        "be-room",
        "127.0.0.1:0".parse()?,
        private,
        &["room"],
        Duration::from_secs(3600),
    )
    .await?;
    let (proxy_addr, to_gateway) = counting_proxy(backend.local_addr()).await?;
    let (gw, clients) = room_players(proxy_addr, players).await?;
    let conn = backend
        .gateway_connections()
        .into_iter()
        .next()
        .ok_or("no gateway connection at the backend")?;
    let mut rows = Vec::new();
    for per_player in [false, true] {
        rows.push(fanout_round(&conn, &clients, &to_gateway, per_player).await?);
    }
    print_fanout(players, &rows);
    gw.shutdown().await;
    backend.stop(Duration::from_millis(200)).await;
    Ok(())
}
