//! `demo`: real Seata global transactions through meshline, and a TC crash, in one
//! command.
//!
//! ```text
//! cargo run --release -p meshline-examples --bin demo
//! ```
//!
//! 1. Starts three in-memory TCs in this process on free loopback ports
//!    (`meshline_examples::tc`: a real coordinator, not durable).
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

use std::collections::{BTreeMap, HashSet};
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
use meshline_examples::init_logging;
use meshline_examples::tc::{Coordinator, TcOptions};

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

#[async_trait]
impl BranchHandler for Rm {
    async fn branch_commit(&self, r: BranchCommitRequest) -> Result<BranchStatus, String> {
        self.0
            .commits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(r.xid);
        Ok(BranchStatus::PhaseTwoCommitted)
    }

    async fn branch_rollback(&self, r: BranchRollbackRequest) -> Result<BranchStatus, String> {
        self.0
            .rollbacks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(r.xid);
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

async fn run() -> Result<bool, String> {
    println!(
        "meshline demo: 3 in-memory TCs, a TM and two RMs (stock: AT, account: TCC), file registry, XID routing\n"
    );
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

    let config = Config::load(Some(&file)).map_err(|e| e.to_string())?;
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
    let stock = ResourceManager::builder()
        .config(&config)
        .discovery(discovery().await?, &group)
        .application_id("stock-service")
        .resource(STOCK)
        .handler(Rm(seen_stock.clone()))
        .build()
        .await
        .map_err(|e| e.to_string())?;
    let account = ResourceManager::builder()
        .config(&config)
        .discovery(discovery().await?, &group)
        .application_id("account-service")
        .resource(ACCOUNT)
        .handler(Rm(seen_account.clone()))
        .build()
        .await
        .map_err(|e| e.to_string())?;
    for c in [tm.client(), stock.client(), account.client()] {
        c.wait_alive(TCS, Duration::from_secs(5))
            .await
            .map_err(|e| e.to_string())?;
    }
    println!(
        "  TM and both RMs registered with all {TCS} TCs (RegisterTM / RegisterRM identified=1), balancer {}\n",
        tm.client().balancer().load_balance().name()
    );

    let next = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let killed = Arc::new(AtomicBool::new(false));
    let records: Arc<Mutex<Vec<Record>>> = Arc::default();
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let (tm, stock, account) = (tm.clone(), stock.clone(), account.clone());
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
    println!("  phase 1: {WORKERS} workers running transactions for {PHASE:?}");
    tokio::time::sleep(PHASE).await;
    let victim = &tcs[VICTIM];
    println!(
        "  phase 2: killing {} ({}) under load",
        victim.name, victim.addr
    );
    let victim_open = victim.tc.open_sessions();
    killed.store(true, Ordering::Relaxed);
    let kill_time = Instant::now();
    victim.tc.crash();
    victim.server.kill();
    let mut left = None;
    while kill_time.elapsed() < Duration::from_secs(2) {
        if !tm
            .client()
            .alive()
            .endpoints()
            .iter()
            .any(|e| e.instance.to_string() == victim.addr)
        {
            left = Some(kill_time.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(PHASE.saturating_sub(kill_time.elapsed())).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.await;
    }

    let records = std::mem::take(&mut *records.lock().unwrap_or_else(|p| p.into_inner()));
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
    let commits_stock = seen_stock
        .commits
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let commits_account = seen_account
        .commits
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let rollbacks_stock = seen_stock
        .rollbacks
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let rollbacks_account = seen_account
        .rollbacks
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();

    // Per TC: committed, rolled back, failed, as the TM saw them.
    let mut per_tc: BTreeMap<String, [u64; 3]> = BTreeMap::new();
    // The dead TC's failed transactions: what the TM was told, and what the RMs saw.
    let mut victim_told: BTreeMap<String, u64> = BTreeMap::new();
    let mut victim_truth: BTreeMap<&str, u64> = BTreeMap::new();
    let mut live_failures = Vec::new();
    let mut inconsistent = Vec::new();
    let mut at_cleanup_lost = 0u64;
    for r in &records {
        let tc = r.tc.clone().unwrap_or_else(|| "?".into());
        let row = per_tc.entry(tc.clone()).or_default();
        let xid = r.xid.as_deref().unwrap_or("");
        match &r.outcome {
            Outcome::Committed => {
                row[0] += 1;
                if !commits_account.contains(xid) {
                    inconsistent.push(format!("{xid}: committed, but not at the account RM"));
                } else if !commits_stock.contains(xid) {
                    if tc == victim.addr {
                        // AT: its data was committed in phase one; phase two only
                        // deletes the undo log, and the dead TC's loop never sent it.
                        at_cleanup_lost += 1;
                    } else {
                        inconsistent.push(format!("{xid}: committed, but not at the stock RM"));
                    }
                }
            }
            Outcome::RolledBack => {
                row[1] += 1;
                if commits_stock.contains(xid) || commits_account.contains(xid) {
                    inconsistent.push(format!("{xid}: rolled back, but committed at an RM"));
                }
            }
            Outcome::Failed(step, e) => {
                row[2] += 1;
                if tc == victim.addr {
                    let told = if e.contains("may have been delivered") {
                        "written, then the TC died (\"may have been delivered\")"
                    } else if e.contains("no longer knows")
                        || e.contains("GlobalTransactionNotExist")
                        || e.contains("Finished")
                    {
                        "another TC does not know it (its TC is gone)"
                    } else {
                        "other error"
                    };
                    *victim_told.entry(format!("{step}: {told}")).or_default() += 1;
                    let (cs, ca) = (commits_stock.contains(xid), commits_account.contains(xid));
                    let (rs, ra) = (
                        rollbacks_stock.contains(xid),
                        rollbacks_account.contains(xid),
                    );
                    let truth = match (r.xid.is_some(), cs, ca, rs, ra) {
                        (false, ..) => "never began (no XID came back)",
                        (true, true, true, _, _) => {
                            "committed at both RMs (phase two ran before the TC died)"
                        }
                        (true, _, _, true, true) => "rolled back at both RMs",
                        (true, false, false, false, false) => {
                            "no phase two at either RM: lost with the TC (not durable), branches left waiting"
                        }
                        // The TC died between its two phase-two requests: the half a
                        // durable TC would finish on restart.
                        _ => "phase two at one RM only (the TC died in between)",
                    };
                    *victim_truth.entry(truth).or_default() += 1;
                } else {
                    live_failures.push(format!(
                        "{} ({tc}) {step}: {e}",
                        r.xid.as_deref().unwrap_or("no xid")
                    ));
                }
            }
        }
    }
    let after = records.iter().filter(|r| r.after_kill).count();
    let after_ok = records
        .iter()
        .filter(|r| r.after_kill && !matches!(r.outcome, Outcome::Failed(..)))
        .count();

    println!();
    println!(
        "  {:<6} {:<22} {:>10} {:>12} {:>8}",
        "TC", "address", "committed", "rolled back", "failed"
    );
    println!("  {}", "-".repeat(62));
    for t in &tcs {
        let row = per_tc.get(&t.addr).copied().unwrap_or_default();
        let name = if t.addr == victim.addr {
            format!("{} \u{2020}", t.name)
        } else {
            t.name.clone()
        };
        println!(
            "  {:<6} {:<22} {:>10} {:>12} {:>8}",
            name, t.addr, row[0], row[1], row[2]
        );
    }
    if let Some(row) = per_tc.get("?") {
        println!(
            "  {:<6} {:<22} {:>10} {:>12} {:>8}",
            "?", "(begin got no XID)", row[0], row[1], row[2]
        );
    }
    println!(
        "  \u{2020} killed {:.1} s into the run",
        PHASE.as_secs_f64()
    );
    println!();
    println!(
        "  phase two seen at the RMs: stock {} commits, {} rollbacks; account {} commits, {} rollbacks",
        commits_stock.len(),
        rollbacks_stock.len(),
        commits_account.len(),
        rollbacks_account.len()
    );
    println!(
        "  every transaction the TM saw committed was committed at both RMs, and none it saw rolled back was committed: {}",
        if inconsistent.is_empty() {
            "yes".to_string()
        } else {
            format!("NO ({})", inconsistent.len())
        }
    );
    for i in inconsistent.iter().take(5) {
        println!("    {i}");
    }
    if at_cleanup_lost > 0 {
        println!(
            "  {at_cleanup_lost} committed on {} whose AT branch (stock) never got its BranchCommit: \
             the TC answered Committed at once and died before its background loop sent it; \
             the data was committed in phase one, only the undo log is left to clean",
            victim.name
        );
    }
    println!(
        "  {} had {victim_open} transactions open when it died. Its transactions that did not end as asked:",
        victim.name
    );
    if victim_told.is_empty() {
        println!("    none");
    }
    println!("    what the TM was told:");
    for (what, n) in &victim_told {
        println!("      {n:>5}  {what}");
    }
    println!("    what they became (what the RMs saw):");
    for (what, n) in &victim_truth {
        println!("      {n:>5}  {what}");
    }
    println!(
        "  transactions begun after the kill: {after}, of which {after_ok} committed or rolled back as asked"
    );
    match left {
        Some(d) => println!(
            "  {} left the clients' alive set {:.1} ms after the kill",
            victim.name,
            d.as_secs_f64() * 1e3
        ),
        None => println!(
            "  {} was still in the alive set 2 s after the kill",
            victim.name
        ),
    }
    let live_ok = live_failures.is_empty();
    let ok = live_ok
        && inconsistent.is_empty()
        && left.is_some()
        && per_tc.values().map(|r| r[0]).sum::<u64>() > 0;
    println!(
        "  transactions on live TCs that failed: {}  => {}",
        live_failures.len(),
        if ok { "OK" } else { "FAILED" }
    );
    for f in live_failures.iter().take(5) {
        println!("    {f}");
    }
    for c in [tm.client(), stock.client(), account.client()] {
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
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("demo: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("demo: {e}");
            ExitCode::FAILURE
        }
    }
}
