//! `bank`: a TCC account service for the transfer example. Its money is in a SQLite
//! file, each transfer leg a TCC branch (try / confirm / cancel) behind Seata's fence,
//! registered with the TCs of its group as an RM; the leg's try is reached over HTTP
//! (axum) or gRPC (tonic), inside the caller's global transaction (`TX_XID`).
//!
//! ```text
//! bank --name bank-a --db a.db --config client.properties --seed alice=100 [--grpc]
//!      [--listen 127.0.0.1:0] [--try-delay-ms N] [--lose-confirm-answers N]
//! ```
//!
//! Prints `bank <name> listening on <addr>` once it serves, and one line per phase two
//! (`confirm <branch> <account> ran|already-done`, `cancel ... empty-rollback`...).
//! The faults are for the example's scenarios: a slow try (the transaction can be
//! rolled back before it runs: the fence then refuses it), a confirm whose answer is
//! lost (the TC sends it again: the fence runs it once).

mod grpc;
mod http;
mod ledger;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use clap::Parser;
use meshline::rpc::rm::ResourceManager;
use meshline::rpc::tcc::TccActions;
use meshline::tx;
use meshline_example_support::init_logging;

use ledger::{Faults, Ledger};

/// A TCC account service over HTTP or gRPC, its money behind Seata's fence.
#[derive(Parser, Debug)]
#[command(name = "bank", version)]
struct Args {
    /// The service's name: its application id, and its TCC action `<name>-transfer`.
    #[arg(long)]
    name: String,
    /// The SQLite file that holds its accounts and fence log (created if missing).
    #[arg(long)]
    db: PathBuf,
    /// Configuration file (the TCs' registry and group, as for `rm-client`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Where to serve the try.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Serve gRPC (tonic) instead of HTTP (axum).
    #[arg(long)]
    grpc: bool,
    /// Accounts to create if missing, `id=balance` (repeatable).
    #[arg(long, value_parser = parse_seed)]
    seed: Vec<(String, i64)>,
    /// Fault: the try's work waits this long after its branch is registered.
    #[arg(long)]
    try_delay_ms: Option<u64>,
    /// Fault: this many confirms do their work and then answer an error.
    #[arg(long, default_value_t = 0)]
    lose_confirm_answers: u32,
}

fn parse_seed(s: &str) -> Result<(String, i64), String> {
    let (id, balance) = s.split_once('=').ok_or("expected id=balance")?;
    let balance = balance.parse().map_err(|e| format!("{balance}: {e}"))?;
    Ok((id.to_string(), balance))
}

/// The service: its ledger and its RM.
pub struct Bank {
    ledger: Arc<Ledger>,
    rm: ResourceManager,
}

impl Bank {
    /// A leg's try in the request's transaction. It runs to its end in a task of its
    /// own: a caller that gives up (a timeout) does not stop a try already under way,
    /// as it would not stop a slow service.
    pub async fn try_leg(self: Arc<Self>, account: String, amount: i64) -> Result<i64, String> {
        let Some(current) = tx::current() else {
            return Err("no global transaction: the request carried no TX_XID".into());
        };
        let bank = self.clone();
        let task = tokio::spawn(
            current.scope(async move { bank.ledger.try_leg(&bank.rm, &account, amount).await }),
        );
        task.await.map_err(|e| format!("the try failed: {e}"))?
    }
}

async fn run(args: Args) -> Result<(), String> {
    let (live, discovery) =
        meshline_example_support::live_discovery(args.config.as_deref()).await?;
    let config = live.current();
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(4)
        .connect(&format!("sqlite://{}?mode=rwc", args.db.display()))
        .await
        .map_err(|e| format!("{}: {e}", args.db.display()))?;
    let faults = Faults {
        try_delay: args.try_delay_ms.map(Duration::from_millis),
        lose_confirm_answers: AtomicU32::new(args.lose_confirm_answers),
    };
    let action = format!("{}-transfer", args.name);
    let ledger = Ledger::open(pool, action.clone(), &args.seed, faults)
        .await
        .map_err(|e| e.to_string())?;
    let rm = ResourceManager::builder()
        .config(&config)
        .discovery(discovery, config.tx_service_group.clone())
        .application_id(&args.name)
        .resource(&action)
        .handler(TccActions::new().with(ledger.clone()))
        .build()
        .await
        .map_err(|e| e.to_string())?;
    rm.client()
        .wait_alive(1, Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    let bank = Arc::new(Bank { ledger, rm });
    let addr = if args.grpc {
        grpc::serve(bank, args.listen).await
    } else {
        http::serve(bank, args.listen).await
    }
    .map_err(|e| format!("listen on {}: {e}", args.listen))?;
    println!("bank {} listening on {addr}", args.name);
    let _ = std::io::stdout().flush();
    meshline_example_support::wait_for_stop().await;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    init_logging("warn");
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bank: {e}");
            ExitCode::FAILURE
        }
    }
}
