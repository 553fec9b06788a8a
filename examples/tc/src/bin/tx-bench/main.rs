//! `tx-bench`: whole global transactions per second through the in-memory TC, against
//! the echo-call rate of the same run (the ceiling).
//!
//! ```text
//! cargo run --release -p meshline-example-tc --bin tx-bench
//! cargo run --release -p meshline-example-tc --bin tx-bench -- --secs 5 --in-flight 256,128
//! ```
//!
//! One transaction is: GlobalBegin (TM), two BranchRegisters (two RMs, at once),
//! GlobalCommit (TM), during which the TC sends both RMs their BranchCommit and waits
//! for the answers. Six request/response exchanges on the wire; the target counts
//! seven round trips (the TC's bookkeeping is the seventh), so the bar is 70 % of the
//! echo rate / 7.
//!
//! Layout, as `rpc-client`'s echo bench: the servers (the echo server, then the TC) run
//! on one tokio runtime with 1 worker thread, every client (the echo client, then the
//! TM and both RMs with their phase-two handlers) on another with 1 worker thread: one
//! core per side on a 2-core machine. Each row is closed-loop: `C` tasks each run a
//! transaction (or an echo call) and start the next when it ends, for `--secs` after a
//! 300 ms warm-up; latencies go into an HDR histogram. Rows run with the RMs' batching
//! on (Seata's default: concurrent branch registrations go as MergedWarpMessages) and
//! off. `--tm-batch` batches the TM's requests too; `--tc-answers` picks how the TC
//! answers merged requests (BatchResultMessages as each result is ready, its default, or
//! one MergeResultMessage per merged frame as a stock Seata TC does). Then an open-loop
//! row at half the best closed-loop rate, where latency counts from each transaction's
//! scheduled start.

mod rows;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Parser;
use meshline::rpc::codec::{CODEC_PROTOBUF, CODEC_SEATA};
use meshline::rpc::message::{
    BranchCommitRequest, BranchRollbackRequest, BranchStatus, BranchType, GlobalStatus,
};
use meshline::rpc::rm::{BranchHandler, ResourceManager, async_trait};
use meshline::rpc::tm::TransactionManager;
use meshline::rpc::{
    CallOptions, InboundRequest, Payload, Protocol, RpcClient, Server, ServerConfig,
};
use meshline::{EmptyProtection, Instance, WatchHub};
use meshline_bench_support::bench::runtime;
use meshline_example_tc::{Coordinator, TcOptions};
use rows::{closed_loop, open_loop, print_header, print_row};
use tokio::runtime::Runtime;

/// Global transactions per second through the in-memory TC, against the echo rate of
/// the same run.
#[derive(Parser, Debug)]
#[command(name = "tx-bench", version)]
struct Args {
    /// Seconds measured per row (after a 300 ms warm-up).
    #[arg(long, default_value_t = 3.0)]
    secs: f64,
    /// Transactions (and echo calls) in flight, one row each.
    #[arg(long, value_delimiter = ',', default_values_t = vec![256usize, 128])]
    in_flight: Vec<usize>,
    /// Rows with the RMs' batching: `on`, `off` or `both`.
    #[arg(long, default_value = "both")]
    batch: String,
    /// `transport.maxMergeSendMills` for the batching rows (`0s`, meshline's default,
    /// merges what is queued when the writer runs; `1ms` is Seata's Java client's wait).
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    merge_wait: Duration,
    /// Batch the TM's requests too (`transport.enableTmClientBatchSendRequest`) in the
    /// batching rows: `--tm-batch` (or `on`), `off` (the default without the flag), or
    /// `both` (rows for each, side by side).
    #[arg(long, num_args = 0..=1, default_missing_value = "on", default_value = "off")]
    tm_batch: String,
    /// How the TC answers merged requests: `batch` (BatchResultMessages as each result
    /// is ready, the in-memory TC's default), `merge` (one MergeResultMessage once all
    /// are done, a stock Seata TC's default: `transport.enableTcServerBatchSendResponse`
    /// off) or `both` (rows for each). Matters only in the batching rows.
    #[arg(long, default_value = "batch")]
    tc_answers: String,
    /// Skip the echo rows and the open-loop row (to profile the transaction path alone).
    #[arg(long)]
    only_transactions: bool,
    /// Rounds per concurrency: each round measures the echo row and every transaction
    /// row side by side; the summary takes the medians.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The clients' wire: `seata` (RPC v1, seata codec), `protobuf` (RPC v1 with
    /// protobuf bodies: `transport.serialization = protobuf`), `grpc` (Seata's gRPC on
    /// HTTP/2, protobuf bodies: `transport.protocol = grpc`), `both` (seata and grpc)
    /// or `all` (the three), every setup on each, side by side.
    #[arg(long, default_value = "seata")]
    protocol: String,
}

struct Committer;

#[async_trait]
impl BranchHandler for Committer {
    async fn branch_commit(&self, _: BranchCommitRequest) -> Result<BranchStatus, String> {
        Ok(BranchStatus::PhaseTwoCommitted)
    }
    async fn branch_rollback(&self, _: BranchRollbackRequest) -> Result<BranchStatus, String> {
        Ok(BranchStatus::PhaseTwoRollbacked)
    }
}

fn hub_of(addr: std::net::SocketAddr) -> Arc<WatchHub> {
    let hub = Arc::new(WatchHub::new("bench", EmptyProtection::Protect));
    hub.publish(
        "c",
        vec![Instance::new("127.0.0.1", addr.port()).expect("instance")],
    );
    hub
}

/// One transaction: begin, two branch registrations at once, commit (phase two at both).
async fn transaction(
    i: u64,
    tm: &TransactionManager,
    a: &ResourceManager,
    b: &ResourceManager,
) -> Result<(), String> {
    let tx = tm
        .begin("bench", Duration::from_secs(60))
        .await
        .map_err(|e| e.to_string())?;
    let key = format!("t:{i}");
    let (ra, rb) = tokio::join!(
        a.branch_register(tx.xid(), BranchType::AT, "db-a", Some(&key), None),
        b.branch_register(tx.xid(), BranchType::AT, "db-b", Some(&key), None),
    );
    ra.map_err(|e| e.to_string())?;
    rb.map_err(|e| e.to_string())?;
    match tx.commit().await.map_err(|e| e.to_string())? {
        GlobalStatus::Committed => Ok(()),
        s => Err(format!("commit answered {s}")),
    }
}

/// The clients of one batching mode, and its TC.
struct Setup {
    label: String,
    batch: bool,
    tm: TransactionManager,
    a: ResourceManager,
    b: ResourceManager,
    tc: Coordinator,
    _server: Server,
}

fn setup(
    servers: &Runtime,
    clients: &Runtime,
    args: &Args,
    (batch, tm_batch, tc_batch_results, (protocol, codec)): (bool, bool, bool, Wire),
) -> Setup {
    let (server, tc) = servers.block_on(async {
        Coordinator::serve(
            "127.0.0.1:0".parse().expect("addr"),
            "127.0.0.1".parse().expect("ip"),
            TcOptions {
                batch_send_response: tc_batch_results,
                ..TcOptions::default()
            },
            ServerConfig::default(),
        )
        .await
        .expect("bind tc")
    });
    let hub = hub_of(server.local_addr());
    let merge = meshline::rpc::BatchOptions {
        max_wait: args.merge_wait,
    };
    let tm_batch = tm_batch && batch;
    let (tm, a, b) = clients.block_on(async {
        let tm = TransactionManager::builder()
            .watch(hub.subscribe("c"), "c")
            .load_balance_name("XID")
            .configure(|o| {
                o.transport.request_queue_bytes = 64 << 20;
                o.transport.batch = tm_batch.then_some(merge);
                o.transport.protocol = protocol;
                o.transport.codec = codec;
            })
            .build()
            .await
            .expect("tm");
        let rm = |res: &'static str| {
            ResourceManager::builder()
                .watch(hub.subscribe("c"), "c")
                .resource(res)
                .application_id(res)
                .handler(Committer)
                .load_balance_name("XID")
                .configure(move |o| {
                    o.transport.request_queue_bytes = 64 << 20;
                    o.transport.batch = batch.then_some(merge);
                    o.transport.protocol = protocol;
                    o.transport.codec = codec;
                })
                .build()
        };
        let a = rm("db-a").await.expect("rm a");
        let b = rm("db-b").await.expect("rm b");
        for c in [tm.client(), a.client(), b.client()] {
            c.wait_alive(1, Duration::from_secs(5))
                .await
                .expect("alive");
        }
        (tm, a, b)
    });
    // The hub must outlive the clients' watches.
    std::mem::forget(hub);
    Setup {
        label: match (batch, tm_batch, tc_batch_results) {
            (false, _, _) => "transaction, RM batching off".to_string(),
            (true, tm, tc) => format!(
                "transaction, {} batching on, TC answers {}",
                if tm { "TM+RM" } else { "RM" },
                if tc { "BatchResult" } else { "MergeResult" }
            ),
        } + match (protocol, codec) {
            (Protocol::Grpc, _) => ", over gRPC",
            (_, CODEC_PROTOBUF) => ", v1 protobuf",
            _ => "",
        },
        batch,
        tm,
        a,
        b,
        tc,
        _server: server,
    }
}

fn tx_op(
    s: &Setup,
) -> impl Fn(u64) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>
+ Send
+ Sync
+ Clone
+ 'static {
    let (tm, a, b) = (s.tm.clone(), s.a.clone(), s.b.clone());
    move |i| {
        let (tm, a, b) = (tm.clone(), a.clone(), b.clone());
        Box::pin(async move { transaction(i, &tm, &a, &b).await })
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The ceiling's echo server and its client, same layout as the transactions.
struct Echo {
    server: Server,
    client: RpcClient,
    /// Outlives the client's watch.
    _hub: Arc<WatchHub>,
}

/// Starts the echo server on `servers` and its client on `clients`.
fn echo(servers: &Runtime, clients: &Runtime) -> Echo {
    let server = servers.block_on(async {
        Server::bind(
            "127.0.0.1:0".parse().expect("addr"),
            |req: InboundRequest| std::future::ready(Some(req.payload)),
        )
        .await
        .expect("bind echo")
    });
    let hub = hub_of(server.local_addr());
    let client = clients.block_on(async {
        let c = RpcClient::builder()
            .watch(hub.subscribe("c"), "c")
            .load_balance_name("XID")
            .configure(|o| o.transport.request_queue_bytes = 64 << 20)
            .build()
            .await
            .expect("echo client");
        c.wait_alive(1, Duration::from_secs(5))
            .await
            .expect("echo alive");
        c
    });
    Echo {
        server,
        client,
        _hub: hub,
    }
}

/// A setup's wire: the protocol and the codec of the request bodies.
type Wire = (Protocol, u8);

/// The setups asked for, as (RM batching, TM batching, TC answers with
/// BatchResultMessages, wire).
fn combos(args: &Args) -> Vec<(bool, bool, bool, Wire)> {
    const V1: Wire = (Protocol::Seata, CODEC_SEATA);
    const V1_PROTOBUF: Wire = (Protocol::Seata, CODEC_PROTOBUF);
    const GRPC: Wire = (Protocol::Grpc, CODEC_PROTOBUF);
    let protocols: Vec<Wire> = match args.protocol.as_str() {
        "grpc" => vec![GRPC],
        "protobuf" => vec![V1_PROTOBUF],
        "both" => vec![V1, GRPC],
        "all" => vec![V1, V1_PROTOBUF, GRPC],
        _ => vec![V1],
    };
    batch_combos(args)
        .into_iter()
        .flat_map(|(b, tm, tc)| protocols.iter().map(move |&p| (b, tm, tc, p)))
        .collect()
}

/// The batching setups asked for, as (RM batching, TM batching, TC answers with
/// BatchResultMessages).
fn batch_combos(args: &Args) -> Vec<(bool, bool, bool)> {
    let modes: Vec<bool> = match args.batch.as_str() {
        "on" => vec![true],
        "off" => vec![false],
        _ => vec![true, false],
    };
    let tc_modes: Vec<bool> = match args.tc_answers.as_str() {
        "merge" => vec![false],
        "both" => vec![true, false],
        _ => vec![true],
    };
    let tm_modes: Vec<bool> = match args.tm_batch.as_str() {
        "on" => vec![true],
        "both" => vec![false, true],
        _ => vec![false],
    };
    let mut combos = Vec::new();
    for &b in &modes {
        if !b {
            // Without batching neither the TM's batching nor the TC's answers matter.
            combos.push((false, false, true));
            continue;
        }
        for &tm in &tm_modes {
            for &tc in &tc_modes {
                combos.push((true, tm, tc));
            }
        }
    }
    combos
}

/// One setup's medians over the rounds at one concurrency.
struct Summary {
    label: String,
    in_flight: usize,
    rate: f64,
    /// The echo rate (`None` with `--only-transactions`).
    echo: Option<f64>,
    /// `rate / (echo / 7)`, and every round's.
    ratio: Option<(f64, Vec<f64>)>,
    p99: f64,
}

/// Every concurrency's rounds: in each, the echo row and every setup's row, printed as
/// they come; the medians per setup and concurrency are returned.
fn measure<E, Fut>(clients: &Runtime, args: &Args, setups: &[Setup], echo_op: E) -> Vec<Summary>
where
    E: Fn(u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    // Rows interleaved, round after round: the machine's load drifts, and a ratio is
    // only fair between rows measured side by side.
    let mut summary = Vec::new();
    for &n in &args.in_flight {
        let mut echo_rates = Vec::new();
        let mut tx_rates: Vec<Vec<f64>> = vec![Vec::new(); setups.len()];
        let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); setups.len()];
        let mut p99s: Vec<Vec<f64>> = vec![Vec::new(); setups.len()];
        for _round in 0..args.rounds {
            let e = if args.only_transactions {
                None
            } else {
                let row = clients.block_on(closed_loop(
                    "echo call (the ceiling)",
                    n,
                    args.secs,
                    echo_op.clone(),
                ));
                print_row(&row);
                echo_rates.push(row.rate());
                Some(row.rate())
            };
            for (i, s) in setups.iter().enumerate() {
                let row = clients.block_on(closed_loop(&s.label, n, args.secs, tx_op(s)));
                print_row(&row);
                tx_rates[i].push(row.rate());
                p99s[i].push(row.p(0.99));
                if let Some(e) = e {
                    ratios[i].push(row.rate() / (e / 7.0));
                }
            }
        }
        for (i, s) in setups.iter().enumerate() {
            summary.push(Summary {
                label: s.label.clone(),
                in_flight: n,
                rate: median(tx_rates[i].clone()),
                echo: (!echo_rates.is_empty()).then(|| median(echo_rates.clone())),
                ratio: (!ratios[i].is_empty())
                    .then(|| (median(ratios[i].clone()), ratios[i].clone())),
                p99: median(p99s[i].clone()),
            });
        }
    }
    summary
}

/// What the TC of each setup served: merged requests and their answers (batching
/// setups), and the transactions it still holds.
fn print_tc_stats(setups: &[Setup]) {
    for s in setups {
        let st = s.tc.stats();
        if s.batch {
            println!(
                "  ({}: the TC served {} MergedWarpMessages, answered with {} MergeResultMessages and {} BatchResultMessages)",
                s.label,
                st.merged_frames.load(Ordering::Relaxed),
                st.merge_results.load(Ordering::Relaxed),
                st.batch_results.load(Ordering::Relaxed)
            );
        }
        // AT commits are answered `AsyncCommitting` and driven by the TC's background
        // loop: the sessions still open say whether that loop kept up with the rate.
        println!(
            "  ({}: {} transactions begun, {} committed, {} still open)",
            s.label,
            st.begun.load(Ordering::Relaxed),
            st.committed.load(Ordering::Relaxed),
            s.tc.open_sessions()
        );
    }
}

/// The open-loop row: the first setup at half the `best` closed-loop rate.
fn open_loop_row(clients: &Runtime, args: &Args, s: &Setup, best: f64) {
    let rate = best / 2.0;
    let row = clients.block_on(open_loop(
        &format!("{}, open loop at {rate:.0}/s", s.label),
        rate,
        args.secs.max(2.0),
        tx_op(s),
    ));
    print_row(&row);
    println!(
        "  open loop at half the best rate: transaction p99 {:.2} ms, p90 {:.2} ms",
        row.p(0.99),
        row.p(0.90)
    );
}

/// The medians, and whether each setup met the target (0.70 of the echo rate / 7).
fn print_summary(rounds: usize, summary: &[Summary]) {
    println!();
    println!("medians of {rounds} rounds:");
    for s in summary {
        let Summary {
            label,
            in_flight: n,
            rate,
            echo,
            ratio,
            p99,
        } = s;
        match (echo, ratio) {
            (Some(e), Some((r, all))) => println!(
                "{label} at {n} in flight: {rate:.0}/s, p99 {p99:.2} ms; echo {e:.0}/s; rate / (echo / 7) = {r:.2} (rounds: {}); target 0.70: {}",
                all.iter()
                    .map(|x| format!("{x:.2}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if *r >= 0.70 { "met" } else { "NOT met" }
            ),
            _ => println!("{label} at {n} in flight: {rate:.0}/s, p99 {p99:.2} ms"),
        }
    }
}

fn main() {
    let args = Args::parse();
    meshline_example_support::init_logging("error");
    let servers = runtime("servers");
    let clients = runtime("clients");
    print_header();

    // The ceiling: echo calls through one connection, same layout.
    let echo = echo(&servers, &clients);
    let body = bytes::Bytes::from(vec![7u8; 64]);
    let echo_op = {
        let c = echo.client.clone();
        move |_| {
            let c = c.clone();
            let body = body.clone();
            async move {
                c.call(Payload::new(body), CallOptions::new())
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string())
            }
        }
    };
    let setups: Vec<Setup> = combos(&args)
        .into_iter()
        .map(|c| setup(&servers, &clients, &args, c))
        .collect();

    let summary = measure(&clients, &args, &setups, echo_op);
    print_tc_stats(&setups);
    let best = summary.iter().map(|r| r.rate).fold(0.0f64, f64::max);
    if !args.only_transactions {
        open_loop_row(&clients, &args, &setups[0], best);
    }
    print_summary(args.rounds, &summary);
    for c in setups
        .iter()
        .flat_map(|s| [s.tm.client(), s.a.client(), s.b.client()])
    {
        clients.block_on(c.shutdown(Duration::from_secs(1)));
    }
    drop(echo.client);
    drop(echo.server);
}
