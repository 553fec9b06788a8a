//! `quickstart`: the smallest complete meshline program with real servers and a real
//! two-phase commit.
//!
//! ```text
//! cargo run -p meshline-example-tc --bin quickstart
//! MESHLINE_LOG=info cargo run -p meshline-example-tc --bin quickstart   # see the client's logs
//! ```
//!
//! What it does, step by step (each step prints a line):
//!
//! 1. Starts two TCs (`tc-a`, `tc-b`) on free loopback ports: meshline's in-memory
//!    coordinator (`meshline_example_tc`), which speaks Seata's protocol.
//! 2. Lists them in a Seata `.properties` file, the file registry:
//!    `service.vgroupMapping.default_tx_group=default` and
//!    `service.default.grouplist=<a>,<b>`.
//! 3. Builds a TM and an RM exactly as an application does: `Config::load` ->
//!    `meshline::registry::discovery_from_config` -> `TransactionManager::builder()` /
//!    `ResourceManager::builder()` with the config (the `XID` balancer is Seata's
//!    default). Each registers with both TCs (RegisterTM / RegisterRM).
//! 4. Runs a global transaction: the TM begins it (the XID names the TC that began
//!    it), the RM registers a branch, the TM commits, and the TC answers `Committed`
//!    at once and sends the RM its BranchCommit from its background loop (an AT
//!    commit, as Seata's TC does it). Then one more, rolled back: the RM gets its
//!    BranchRollback before the TC answers.
//! 5. Unregisters `tc-b` by rewriting the file without it. The TC keeps running: the
//!    clients drop it because the registry says so (the file registry re-reads the file
//!    every 250 ms). The next transaction begins on `tc-a`.
//! 6. Stops everything and exits 0 (1 if any step failed, with the reason on stderr).
//!
//! Logs go to stderr through `tracing-subscriber`, filtered by `MESHLINE_LOG`
//! (`EnvFilter` syntax, default `warn`).

use std::error::Error;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use meshline::rpc::message::{
    BranchCommitRequest, BranchRollbackRequest, BranchStatus, BranchType, GlobalStatus,
};
use meshline::rpc::rm::{BranchHandler, ResourceManager, async_trait};
use meshline::rpc::tm::TransactionManager;
use meshline::rpc::{Server, ServerConfig};
use meshline_example_tc::{Coordinator, TcOptions};

/// Two TCs, a file registry, a TM and an RM: a committed and a rolled-back global
/// transaction, then following an unregister. Takes no options; `MESHLINE_LOG=info`
/// shows the clients' logs.
#[derive(Parser, Debug)]
#[command(name = "quickstart", version)]
struct Args {}

type BoxError = Box<dyn Error + Send + Sync>;

/// How long the clients may take to see a registry change (the file registry polls
/// every 250 ms; the rest is connecting and registering).
const FOLLOW_LIMIT: Duration = Duration::from_secs(5);
const RESOURCE: &str = "jdbc:mysql://127.0.0.1:3306/orders";

/// The RM's phase two: remember what the TC asked, and say it is done.
#[derive(Clone, Default)]
struct Orders {
    asked: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl BranchHandler for Orders {
    async fn branch_commit(&self, r: BranchCommitRequest) -> Result<BranchStatus, String> {
        self.note(format!("BranchCommit for branch {}", r.branch_id));
        Ok(BranchStatus::PhaseTwoCommitted)
    }

    async fn branch_rollback(&self, r: BranchRollbackRequest) -> Result<BranchStatus, String> {
        self.note(format!("BranchRollback for branch {}", r.branch_id));
        Ok(BranchStatus::PhaseTwoRollbacked)
    }
}

impl Orders {
    fn note(&self, what: String) {
        self.asked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(what);
    }

    fn last(&self) -> String {
        let asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
        asked.last().cloned().unwrap_or_else(|| "nothing".into())
    }

    fn count(&self) -> usize {
        self.asked.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Waits (up to 3 s) until the RM was asked something more than `before` things:
    /// an AT commit is answered before its branch is committed (the TC's background
    /// loop does that, every second), as Seata's TC does.
    async fn asked_after(&self, before: usize) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        while self.count() <= before && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.last()
    }
}

/// Starts TC `name` on a free loopback port.
async fn start_tc(name: &str) -> Result<(Server, Coordinator), BoxError> {
    let options = TcOptions {
        tag: Some(name.to_string()),
        ..TcOptions::default()
    };
    let local: SocketAddr = "127.0.0.1:0".parse()?;
    Ok(Coordinator::serve(local, local.ip(), options, ServerConfig::default()).await?)
}

/// Writes the Seata configuration naming `members`, replacing the file in one rename
/// so the file registry never reads a half-written file.
fn write_registry(path: &Path, members: &[SocketAddr]) -> std::io::Result<()> {
    let grouplist: Vec<String> = members.iter().map(|a| a.to_string()).collect();
    let tmp = path.with_extension("properties.tmp");
    std::fs::write(
        &tmp,
        format!(
            "applicationId=quickstart\n\
             service.vgroupMapping.default_tx_group=default\n\
             service.default.grouplist={}\n",
            grouplist.join(",")
        ),
    )?;
    std::fs::rename(&tmp, path)
}

/// Which TC an XID names.
fn tc_of(xid: &str, tcs: &[(&str, SocketAddr)]) -> String {
    tcs.iter()
        .find(|(_, addr)| xid.starts_with(&format!("{addr}:")))
        .map_or("?".into(), |(name, _)| name.to_string())
}

/// One global transaction: begin, a branch at the RM, then commit or roll back.
async fn transaction(
    tm: &TransactionManager,
    rm: &ResourceManager,
    orders: &Orders,
    tcs: &[(&str, SocketAddr)],
    commit: bool,
) -> Result<String, BoxError> {
    let tx = tm.begin("create-order", Duration::from_secs(60)).await?;
    let tc = tc_of(tx.xid(), tcs);
    println!("  begun {} on {tc}", tx.xid());
    let branch = rm
        .branch_register(tx.xid(), BranchType::AT, RESOURCE, Some("orders:42"), None)
        .await?;
    println!("  branch {branch} registered by the RM (locks orders:42)");
    let before = orders.count();
    let (status, want) = if commit {
        (tx.commit().await?, GlobalStatus::Committed)
    } else {
        (tx.rollback().await?, GlobalStatus::Rollbacked)
    };
    println!(
        "  {} {}: {status} (the RM was asked: {})",
        if commit { "committed" } else { "rolled back" },
        tx.xid(),
        orders.asked_after(before).await
    );
    if status != want {
        return Err(format!("expected {want}, the TC answered {status}").into());
    }
    Ok(tc)
}

async fn run() -> Result<(), BoxError> {
    println!("meshline quickstart: two TCs, a file registry, a TM and an RM");

    // 1. Two TCs.
    let (a, _tc_a) = start_tc("tc-a").await?;
    let (b, _tc_b) = start_tc("tc-b").await?;
    let (a_addr, b_addr) = (a.local_addr(), b.local_addr());
    println!("  tc-a listening on {a_addr}");
    println!("  tc-b listening on {b_addr}");
    let tcs = [("tc-a", a_addr), ("tc-b", b_addr)];

    // 2. The file registry: a Seata .properties file (removed with `dir` on exit).
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("seata.properties");
    write_registry(&path, &[a_addr, b_addr])?;
    println!(
        "  registry file {}: service.default.grouplist={a_addr},{b_addr}",
        path.display()
    );

    // 3. A TM and an RM, built as an application builds them.
    let config = meshline::Config::load(Some(&path))?;
    let group = config.tx_service_group.clone();
    let tm = TransactionManager::builder()
        .config(&config)
        .discovery(
            meshline::registry::discovery_from_config(&config).await?,
            &group,
        )
        .build()
        .await?;
    let orders = Orders::default();
    let rm = ResourceManager::builder()
        .config(&config)
        .discovery(
            meshline::registry::discovery_from_config(&config).await?,
            &group,
        )
        .resource(RESOURCE)
        .handler(orders.clone())
        .build()
        .await?;
    tm.client().wait_alive(2, FOLLOW_LIMIT).await?;
    rm.client().wait_alive(2, FOLLOW_LIMIT).await?;
    println!("  TM and RM registered with both TCs (group {group} -> cluster default)");

    // 4. A committed and a rolled-back transaction.
    transaction(&tm, &rm, &orders, &tcs, true).await?;
    transaction(&tm, &rm, &orders, &tcs, false).await?;

    // 5. Unregister tc-b: the file now lists tc-a only. tc-b keeps running.
    write_registry(&path, &[a_addr])?;
    println!("  unregister tc-b: service.default.grouplist={a_addr}");
    let edited = Instant::now();
    while tm.client().alive().len() != 1 || rm.client().alive().len() != 1 {
        if edited.elapsed() > FOLLOW_LIMIT {
            return Err(
                format!("the clients did not follow the registry within {FOLLOW_LIMIT:?}").into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "  clients followed in {} ms: only tc-a alive",
        edited.elapsed().as_millis()
    );
    let tc = transaction(&tm, &rm, &orders, &tcs, true).await?;
    if tc != "tc-a" {
        return Err(
            format!("after the unregister, expected tc-a, the transaction began on {tc}").into(),
        );
    }

    // 6. Done.
    tm.client().shutdown(Duration::from_secs(1)).await;
    rm.client().shutdown(Duration::from_secs(1)).await;
    a.shutdown(Duration::from_millis(500)).await;
    b.shutdown(Duration::from_millis(500)).await;
    println!("  done: committed and rolled back through both TCs, then followed the unregister");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let Args {} = Args::parse();
    meshline_example_support::init_logging("warn");
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickstart: {e}");
            ExitCode::FAILURE
        }
    }
}
