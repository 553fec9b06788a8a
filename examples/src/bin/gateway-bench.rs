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
//! cargo run --release -p meshline-examples --bin gateway-bench -- --secs 5
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use hdrhistogram::Histogram;
use meshline::RegistryService;
use meshline::rpc::{CallOptions, Payload, RpcClient};
use meshline_examples::client::GatewayClient;
use meshline_examples::game_backend::{GameBackend, modules};
use meshline_examples::gateway::admission::TokenMinter;
use meshline_examples::gateway::limits::LimitSettings;
use meshline_examples::gateway::queue::QueueSettings;
use meshline_examples::gateway::settings::{GatewaySettings, ModuleKind, ModuleRoute, RouteKey};
use meshline_examples::gateway::{Gateway, wire};
use meshline_examples::memory_registry::MemoryRegistry;

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
}

struct Result_ {
    calls: u64,
    secs: f64,
    hist: Histogram<u64>,
}

impl Result_ {
    fn row(&self, name: &str) -> String {
        format!(
            "| {name:<28} | {:>10.0} | {:>8} | {:>8} |",
            self.calls as f64 / self.secs,
            self.hist.value_at_quantile(0.5),
            self.hist.value_at_quantile(0.99)
        )
    }
}

async fn measure<F, Fut>(workers: usize, secs: u64, make: F) -> Result_
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Histogram<u64>> + Send + 'static,
{
    let start = Instant::now();
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
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args = Args::parse();
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
    let mut settings = GatewaySettings {
        listen: "127.0.0.1:0".parse()?,
        secret: "bench".into(),
        register_cluster: None,
        // The clients share one address and send flat out; every login at once.
        limits: LimitSettings::off(),
        queue: QueueSettings::off(),
        ..GatewaySettings::default()
    };
    settings.modules.insert(
        modules::LOBBY,
        ModuleRoute {
            id: modules::LOBBY,
            name: "lobby".into(),
            cluster: "lobby".into(),
            kind: ModuleKind::Stateless,
            choice: "RoundRobinLoadBalance".into(),
            key: RouteKey::None,
        },
    );
    let gw = Gateway::start(settings, registry.clone()).await?;
    gw.backend("lobby")
        .expect("lobby cluster")
        .wait_alive(args.backends, Duration::from_secs(5))
        .await?;
    let minter = TokenMinter::new("bench");
    let mut clients = Vec::new();
    for i in 0..args.clients {
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
    let deadline = |secs| Instant::now() + Duration::from_secs(secs);

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
    println!("| path                         |   msgs/s   |  p50 us  |  p99 us  |");
    println!("|------------------------------|------------|----------|----------|");
    println!("{}", via.row("client -> gateway -> backend"));
    println!("{}", dir.row("rpc-client -> backend"));
    println!(
        "\nadded by the gateway: p50 +{} us, p99 +{} us; throughput {:.2}x of direct",
        via.hist.value_at_quantile(0.5) as i64 - dir.hist.value_at_quantile(0.5) as i64,
        via.hist.value_at_quantile(0.99) as i64 - dir.hist.value_at_quantile(0.99) as i64,
        (via.calls as f64 / via.secs) / (dir.calls as f64 / dir.secs)
    );
    direct.shutdown(Duration::from_secs(1)).await;
    gw.shutdown().await;
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
