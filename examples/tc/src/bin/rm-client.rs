//! `rm-client`: a Seata RM. Finds the TCs of a tx-service-group through the registry,
//! registers its resource with each (RegisterRM), optionally registers a branch in a
//! running global transaction, and answers phase two (BranchCommit / BranchRollback
//! from the TC), printing each request.
//!
//! ```text
//! rm-client --resource ID [--config FILE] [--group GROUP] [--application NAME]
//!           [--xid XID [--branch-type AT|TCC|SAGA|XA] [--lock-keys KEYS]]
//!           [--exit-after N] [--fail-first N]
//! ```
//!
//! With `--xid` (an XID `tm-client --hold` printed) it registers one branch of that
//! transaction on `--resource`, holding `--lock-keys` (`table:pk1,pk2`), and prints the
//! branch id. It then serves phase two until Ctrl-C, or until it has answered
//! `--exit-after` requests. `--fail-first N` answers the first N with a retryable
//! failure, to watch the TC retry.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clap::Parser;
use meshline::rpc::message::{
    BranchCommitRequest, BranchEndRequest, BranchRollbackRequest, BranchStatus, BranchType,
};
use meshline::rpc::rm::{BranchHandler, ResourceManager, async_trait};
use meshline_example_support::{client_setup, init_logging, run_main};
use tokio::sync::Notify;

/// A Seata RM: registers a resource with the group's TCs, optionally a branch of a
/// running transaction, and answers phase two.
#[derive(Parser, Debug)]
#[command(
    name = "rm-client",
    version,
    after_help = "Example, while `tm-client --hold 5s` holds transaction <xid>:\n  \
                  rm-client --resource jdbc:mysql://db/orders --xid <xid> --lock-keys orders:1 --exit-after 1"
)]
struct Args {
    /// The resource this RM manages (a JDBC URL, a TCC service name).
    #[arg(long)]
    resource: String,
    /// Configuration file (Seata .properties, YAML, TOML or JSON); Seata's defaults
    /// without one.
    #[arg(long)]
    config: Option<PathBuf>,
    /// tx-service-group (default: the config's `txServiceGroup`).
    #[arg(long)]
    group: Option<String>,
    /// `applicationId` (default: the config's).
    #[arg(long)]
    application: Option<String>,
    /// Register a branch of this global transaction.
    #[arg(long)]
    xid: Option<String>,
    /// The branch's type.
    #[arg(long, default_value = "AT", value_parser = parse_branch_type)]
    branch_type: BranchType,
    /// Rows the branch locks, `table:pk1,pk2;table2:pk` (AT).
    #[arg(long)]
    lock_keys: Option<String>,
    /// Exit after answering this many phase-two requests.
    #[arg(long)]
    exit_after: Option<u64>,
    /// Answer the first N phase-two requests with a retryable failure.
    #[arg(long, default_value_t = 0)]
    fail_first: u64,
}

fn parse_branch_type(s: &str) -> Result<BranchType, String> {
    BranchType::ALL
        .iter()
        .copied()
        .find(|t| t.java_name().eq_ignore_ascii_case(s))
        .ok_or_else(|| format!("`{s}`: expected AT, TCC, SAGA or XA"))
}

/// Prints each phase-two request and answers it.
struct Printer {
    answered: AtomicU64,
    fail_first: u64,
    done: Notify,
}

impl Printer {
    fn answer(
        &self,
        what: &str,
        r: &BranchEndRequest,
        ok: BranchStatus,
        retry: BranchStatus,
    ) -> BranchStatus {
        let n = self.answered.fetch_add(1, Ordering::SeqCst) + 1;
        let status = if n <= self.fail_first { retry } else { ok };
        println!("{what} xid {} branch {} -> {status}", r.xid, r.branch_id);
        let _ = std::io::stdout().flush();
        self.done.notify_one();
        status
    }
}

#[async_trait]
impl BranchHandler for Printer {
    async fn branch_commit(&self, r: BranchCommitRequest) -> Result<BranchStatus, String> {
        Ok(self.answer(
            "BranchCommit",
            &r,
            BranchStatus::PhaseTwoCommitted,
            BranchStatus::PhaseTwoCommitFailedRetryable,
        ))
    }

    async fn branch_rollback(&self, r: BranchRollbackRequest) -> Result<BranchStatus, String> {
        Ok(self.answer(
            "BranchRollback",
            &r,
            BranchStatus::PhaseTwoRollbacked,
            BranchStatus::PhaseTwoRollbackFailedRetryable,
        ))
    }
}

async fn run(args: Args) -> Result<(), String> {
    let setup = client_setup(args.config.as_deref(), args.group.as_deref()).await?;
    let group = setup.group;
    let printer = Arc::new(Printer {
        answered: AtomicU64::new(0),
        fail_first: args.fail_first,
        done: Notify::new(),
    });
    let mut builder = ResourceManager::builder()
        .config(&setup.config)
        .discovery(setup.discovery, group.clone())
        .resource(&args.resource)
        .handler(printer.clone());
    if let Some(app) = &args.application {
        builder = builder.application_id(app);
    }
    let rm = builder.build().await.map_err(|e| e.to_string())?;
    rm.client()
        .wait_alive(1, Duration::from_secs(5))
        .await
        .map_err(|e| e.to_string())?;
    let _ = rm
        .client()
        .wait_alive(rm.client().endpoints().len(), Duration::from_millis(500))
        .await;
    println!(
        "RM for {} registered with {} TC(s) of group {group}",
        args.resource,
        rm.client().alive().len()
    );
    if let Some(xid) = &args.xid {
        let branch = rm
            .branch_register(
                xid,
                args.branch_type,
                &args.resource,
                args.lock_keys.as_deref(),
                None,
            )
            .await
            .map_err(|e| e.to_string())?;
        println!("branch {branch} registered in {xid}");
    }
    let _ = std::io::stdout().flush();
    let stop = async {
        match args.exit_after {
            Some(n) => {
                while printer.answered.load(Ordering::SeqCst) < n {
                    printer.done.notified().await;
                }
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = stop => {}
        _ = meshline_example_support::wait_for_stop() => {}
    }
    // Before closing, let the last answer reach the TC: for our branch's transaction,
    // wait until the TC has finished it (its answer was read).
    if let Some(xid) = &args.xid {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while tokio::time::Instant::now() < deadline {
            match rm.global_status(xid).await {
                Ok(s) if s.is_final() => break,
                Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot ask the TC how {xid} ended");
                    break;
                }
            }
        }
    }
    rm.client().shutdown(Duration::from_secs(2)).await;
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    init_logging("warn");
    run_main("rm-client", run(args))
}
