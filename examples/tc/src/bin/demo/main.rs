//! `demo`: real Seata global transactions through meshline, and a TC crash, in one
//! command.
//!
//! ```text
//! cargo run --release -p meshline-example-tc --bin demo
//! ```
//!
//! 1. Starts three in-memory TCs in this process on free loopback ports
//!    (`meshline_example_tc`: a real coordinator, not durable).
//! 2. Writes a Seata `.properties` file naming them in `service.default.grouplist`,
//!    and builds, the way an application would: `Config` -> file registry ->
//!    `Discovery` -> a TM (`meshline::rpc::tm`) and two RMs (`meshline::rpc::rm`), each
//!    registered with every TC, routing by XID.
//! 3. 16 workers run transactions: the TM begins one, both RMs register a branch
//!    (with a row lock on the stock side), then the TM commits (9 in 10) or rolls back
//!    (1 in 10). Phase two arrives at the RMs from the TC that owns the transaction.
//! 4. Kills TC 2 mid-run (listener and connections gone, as in a crash).
//! 5. Prints what happened, per TC and per outcome, checked against what the RMs saw:
//!    every transaction the TM was told is committed was committed at both RMs (the AT
//!    side's BranchCommit comes from the TC's background loop, as in Seata; on the
//!    killed TC it may never come, which is only an undo log left to clean), none
//!    rolled back was committed anywhere, and the dead TC's unfinished transactions are
//!    shown for what they are: lost with it (the in-memory TC is not durable), their
//!    branches never told. The exit code says whether everything checked out and no
//!    transaction on a live TC failed.

mod report;

use std::collections::HashSet;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use meshline::Config;
use meshline::rpc::message::{
    BranchCommitRequest, BranchRollbackRequest, BranchStatus, BranchType, GlobalStatus,
};
use meshline::rpc::rm::{BranchHandler, ResourceManager, async_trait};
use meshline::rpc::tm::TransactionManager;
use meshline::rpc::{Server, ServerConfig, TransactionError};
use meshline_example_support::init_logging;
use meshline_example_tc::{Coordinator, TcOptions};

const TCS: usize = 3;
const VICTIM: usize = 1;
const WORKERS: usize = 16;
const PHASE: Duration = Duration::from_millis(1500);
const STOCK: &str = "jdbc:mysql://demo/stock";
const ACCOUNT: &str = "tcc:account";

/// Real Seata global transactions through meshline: three in-process TCs, a TM and two
/// RMs over a file registry, one TC killed under load. Takes no options; logs go to
/// stderr (`MESHLINE_LOG`, default `error`).
#[derive(Parser, Debug)]
#[command(name = "demo", version)]
struct Args {}

/// What an RM was asked in phase two, by XID.
#[derive(Default)]
struct Seen {
    commits: Mutex<HashSet<String>>,
    rollbacks: Mutex<HashSet<String>>,
}

#[derive(Clone)]
struct Rm(Arc<Seen>);

/// Notes `xid` in `set`; a lock poisoned by another call's panic still takes it.
fn note(set: &Mutex<HashSet<String>>, xid: String) {
    set.lock().unwrap_or_else(|p| p.into_inner()).insert(xid);
}

#[async_trait]
impl BranchHandler for Rm {
    async fn branch_commit(&self, r: BranchCommitRequest) -> Result<BranchStatus, String> {
        note(&self.0.commits, r.xid);
        Ok(BranchStatus::PhaseTwoCommitted)
    }

    async fn branch_rollback(&self, r: BranchRollbackRequest) -> Result<BranchStatus, String> {
        note(&self.0.rollbacks, r.xid);
        Ok(BranchStatus::PhaseTwoRollbacked)
    }
}

/// How one transaction ended, as the TM saw it.
#[derive(Debug, Clone)]
enum Outcome {
    Committed,
    RolledBack,
    /// Anything else, with the step and the error.
    Failed(&'static str, String),
}

struct Record {
    xid: Option<String>,
    /// The TC the begin went to (the XID names it), when known.
    tc: Option<String>,
    after_kill: bool,
    outcome: Outcome,
}

fn write_registry_file(path: &Path, addrs: &[&str]) -> std::io::Result<()> {
    let tmp = path.with_extension("properties.tmp");
    std::fs::write(
        &tmp,
        format!(
            "registry.type=file\n\
             applicationId=meshline-demo\n\
             txServiceGroup=default_tx_group\n\
             service.vgroupMapping.default_tx_group=default\n\
             service.default.grouplist={}\n\
             client.loadBalance.type=XID\n\
             transport.rpcTmRequestTimeout=2000\n\
             transport.rpcRmRequestTimeout=2000\n\
             client.tm.commitRetryCount=2\n\
             client.tm.rollbackRetryCount=2\n",
            addrs.join(";")
        ),
    )?;
    std::fs::rename(&tmp, path)
}

/// One transaction: begin, two branches, commit or roll back.
async fn transaction(
    n: u64,
    tm: &TransactionManager,
    stock: &ResourceManager,
    account: &ResourceManager,
) -> (Option<String>, Option<String>, Outcome) {
    let fail = |step, e: TransactionError| Outcome::Failed(step, e.to_string());
    let tx = match tm
        .begin(&format!("order-{n}"), Duration::from_secs(10))
        .await
    {
        Ok(tx) => tx,
        Err(e) => {
            let tc = match &e {
                TransactionError::Rpc { source, .. } => endpoint_of(source),
                _ => None,
            };
            return (None, tc, fail("begin", e));
        }
    };
    let xid = tx.xid().to_string();
    let tc = xid.rsplit_once(':').map(|(addr, _)| addr.to_string());
    let lock = format!("stock:{}", n % 500);
    let (a, b) = tokio::join!(
        stock.branch_register(&xid, BranchType::AT, STOCK, Some(&lock), None),
        account.branch_register(&xid, BranchType::TCC, ACCOUNT, None, Some("{\"amount\":7}")),
    );
    if let Err(e) = a.and(b) {
        // A refused branch (a held row, a TC that died): roll back what was done.
        let _ = tx.rollback().await;
        return (Some(xid), tc, fail("branch register", e));
    }
    let outcome = if n % 10 == 9 {
        match tx.rollback().await {
            Ok(GlobalStatus::Rollbacked) => Outcome::RolledBack,
            Ok(s) => Outcome::Failed("rollback", format!("answered {s}")),
            Err(e) => fail("rollback", e),
        }
    } else {
        match tx.commit().await {
            Ok(GlobalStatus::Committed) => Outcome::Committed,
            Ok(s) => Outcome::Failed("commit", format!("answered {s}")),
            Err(e) => fail("commit", e),
        }
    };
    (Some(xid), tc, outcome)
}

fn endpoint_of(e: &meshline::rpc::RpcError) -> Option<String> {
    match e {
        meshline::rpc::RpcError::MaybeDelivered { endpoint, .. }
        | meshline::rpc::RpcError::NotWritten { endpoint, .. } => Some(endpoint.clone()),
        meshline::rpc::RpcError::Timeout { endpoint, .. } => endpoint.clone(),
        _ => None,
    }
}

struct Tc {
    name: String,
    addr: String,
    server: Server,
    tc: Coordinator,
}

/// The TM and the two RMs, with what each RM was asked in phase two.
struct Clients {
    tm: TransactionManager,
    stock: ResourceManager,
    account: ResourceManager,
    seen_stock: Arc<Seen>,
    seen_account: Arc<Seen>,
}

/// What the run under load left behind, for the report.
struct Load {
    records: Vec<Record>,
    /// Transactions open on the victim when it was killed.
    victim_open: usize,
    /// How long after the kill the victim left the TM's alive set (`None`: not within 2 s).
    left: Option<Duration>,
}

/// Starts the `TCS` in-memory coordinators on free loopback ports, announcing each.
async fn start_tcs() -> Result<Vec<Tc>, String> {
    let mut tcs = Vec::new();
    for i in 1..=TCS {
        let (server, tc) = Coordinator::serve(
            "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?,
            "127.0.0.1".parse().map_err(|e| format!("{e}"))?,
            TcOptions {
                tag: Some(format!("tc-{i}")),
                period: Duration::from_millis(200),
                phase_two_timeout: Duration::from_secs(2),
                ..TcOptions::default()
            },
            ServerConfig::default(),
        )
        .await
        .map_err(|e| format!("cannot start tc-{i}: {e}"))?;
        let addr = server.local_addr().to_string();
        println!("  started tc-{i} on {addr}");
        tcs.push(Tc {
            name: format!("tc-{i}"),
            addr,
            server,
            tc,
        });
    }
    Ok(tcs)
}

/// An RM of `app` serving `resource`, found through `config`'s registry in its
/// transaction group, recording its phase-two calls in `seen`.
async fn rm(
    config: &Config,
    app: &str,
    resource: &str,
    seen: &Arc<Seen>,
) -> Result<ResourceManager, String> {
    let discovery = meshline::registry::discovery_from_config(config)
        .await
        .map_err(|e| e.to_string())?;
    ResourceManager::builder()
        .config(config)
        .discovery(discovery, &config.tx_service_group)
        .application_id(app)
        .resource(resource)
        .handler(Rm(seen.clone()))
        .build()
        .await
        .map_err(|e| e.to_string())
}

/// Builds the TM and both RMs from the registry `file`, the way an application would,
/// and waits until each has registered with every TC.
async fn connect(file: &Path) -> Result<Clients, String> {
    let config = Config::load(Some(file)).map_err(|e| e.to_string())?;
    let group = config.tx_service_group.clone();
    let discovery = || async {
        meshline::registry::discovery_from_config(&config)
            .await
            .map_err(|e| e.to_string())
    };
    let tm = TransactionManager::builder()
        .config(&config)
        .discovery(discovery().await?, &group)
        .build()
        .await
        .map_err(|e| e.to_string())?;
    let seen_stock = Arc::new(Seen::default());
    let seen_account = Arc::new(Seen::default());
    let stock = rm(&config, "stock-service", STOCK, &seen_stock).await?;
    let account = rm(&config, "account-service", ACCOUNT, &seen_account).await?;
    for c in [tm.client(), stock.client(), account.client()] {
        c.wait_alive(TCS, Duration::from_secs(5))
            .await
            .map_err(|e| e.to_string())?;
    }
    println!(
        "  TM and both RMs registered with all {TCS} TCs (RegisterTM / RegisterRM identified=1), balancer {}\n",
        tm.client().balancer().load_balance().name()
    );
    Ok(Clients {
        tm,
        stock,
        account,
        seen_stock,
        seen_account,
    })
}

/// Phases 1 and 2: `WORKERS` workers run transactions for `PHASE`, then the victim is
/// killed under load and they run until `PHASE` after the kill.
async fn run_load(clients: &Clients, victim: &Tc) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let killed = Arc::new(AtomicBool::new(false));
    let records: Arc<Mutex<Vec<Record>>> = Arc::default();
    let workers = spawn_workers(clients, &stop, &killed, &records);
    println!("  phase 1: {WORKERS} workers running transactions for {PHASE:?}");
    tokio::time::sleep(PHASE).await;
    println!(
        "  phase 2: killing {} ({}) under load",
        victim.name, victim.addr
    );
    let victim_open = victim.tc.open_sessions();
    killed.store(true, Ordering::Relaxed);
    let kill_time = Instant::now();
    victim.tc.crash();
    victim.server.kill();
    let left = left_alive_set(&clients.tm, &victim.addr, kill_time).await;
    tokio::time::sleep(PHASE.saturating_sub(kill_time.elapsed())).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.await;
    }
    let records = std::mem::take(&mut *records.lock().unwrap_or_else(|p| p.into_inner()));
    Load {
        records,
        victim_open,
        left,
    }
}

/// The workers: each runs one transaction after another until `stop`, recording each
/// (and whether it began after the kill).
fn spawn_workers(
    clients: &Clients,
    stop: &Arc<AtomicBool>,
    killed: &Arc<AtomicBool>,
    records: &Arc<Mutex<Vec<Record>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let next = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let (tm, stock, account) = (
            clients.tm.clone(),
            clients.stock.clone(),
            clients.account.clone(),
        );
        let (next, stop, killed, records) =
            (next.clone(), stop.clone(), killed.clone(), records.clone());
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let before = killed.load(Ordering::Relaxed);
                let (xid, tc, outcome) = transaction(n, &tm, &stock, &account).await;
                records
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(Record {
                        xid,
                        tc,
                        after_kill: before,
                        outcome,
                    });
            }
        }));
    }
    workers
}

/// How long after `kill_time` the TC at `addr` left the TM's alive set, watched for 2 s
/// (`None`: still there then).
async fn left_alive_set(
    tm: &TransactionManager,
    addr: &str,
    kill_time: Instant,
) -> Option<Duration> {
    while kill_time.elapsed() < Duration::from_secs(2) {
        if !tm
            .client()
            .alive()
            .endpoints()
            .iter()
            .any(|e| e.instance.to_string() == addr)
        {
            return Some(kill_time.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    None
}

/// Waits (3 s at most) until the stock RM has seen the commit of every transaction the
/// TM saw committed on a live TC.
async fn settle(records: &[Record], victim: &Tc, seen_stock: &Seen) {
    // Stock's branches are AT: a commit is answered at once and their BranchCommit comes
    // from the TC's background loop (every 200 ms here), as Seata's TC does it. Give the
    // live TCs' loops the time to finish before the RMs' view is read.
    let owed_stock: Vec<&str> = records
        .iter()
        .filter(|r| {
            matches!(r.outcome, Outcome::Committed) && r.tc.as_deref() != Some(&victim.addr)
        })
        .filter_map(|r| r.xid.as_deref())
        .collect();
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_secs(3) {
        let done = {
            let seen = seen_stock.commits.lock().unwrap_or_else(|p| p.into_inner());
            owed_stock.iter().all(|x| seen.contains(*x))
        };
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn run() -> Result<bool, String> {
    println!(
        "meshline demo: 3 in-memory TCs, a TM and two RMs (stock: AT, account: TCC), file registry, XID routing\n"
    );
    let tcs = start_tcs().await?;
    let dir = tempfile::tempdir().map_err(|e| format!("cannot create a temp dir: {e}"))?;
    let file = dir.path().join("registry.properties");
    let all: Vec<&str> = tcs.iter().map(|t| t.addr.as_str()).collect();
    write_registry_file(&file, &all)
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    println!(
        "  registry file {}:\n    service.default.grouplist={}",
        file.display(),
        all.join(";")
    );
    let clients = connect(&file).await?;

    let victim = &tcs[VICTIM];
    let load = run_load(&clients, victim).await;
    settle(&load.records, victim, &clients.seen_stock).await;
    let ok = report::report(&tcs, victim, &load, &clients);
    for c in [
        clients.tm.client(),
        clients.stock.client(),
        clients.account.client(),
    ] {
        c.shutdown(Duration::from_secs(2)).await;
    }
    for t in tcs {
        t.server.shutdown(Duration::from_millis(200)).await;
    }
    Ok(ok)
}

fn main() -> ExitCode {
    let Args {} = Args::parse();
    init_logging("error");
    // The demo ends 1 when a transaction did not end as it says it should.
    meshline_example_support::run_main("demo", async {
        Ok(if run().await? {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    })
}
