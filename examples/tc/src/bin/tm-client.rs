//! `tm-client`: a Seata TM. Finds the TCs of a tx-service-group through the registry,
//! registers with each (RegisterTM), and runs global transactions: GlobalBegin, then
//! GlobalCommit (or GlobalRollback), printing each XID, the TC that began it and the
//! status the TC answered.
//!
//! ```text
//! tm-client [--config FILE] [--group GROUP] [--transactions N] [--rollback]
//!           [--hold DURATION] [--step] [--timeout DURATION] [--name NAME] [--lb NAME]
//! ```
//!
//! The XID names the TC that began the transaction (`ip:port:id`); with the `XID`
//! balancer (Seata's default) commit goes back to that TC. `--hold` waits between
//! begin and commit (`--step`: until Enter), so RMs (`rm-client --xid <xid>`) can
//! register branches, which the
//! commit then drives through phase two. The exit code is 0 when every transaction
//! ended as asked: committed (or rolled back) as the TC decided it, phase two finished
//! or still being retried by the TC (`CommitRetrying`, as Seata's TM counts it).
//!
//! With no `--config`, Seata's defaults apply: group `default_tx_group` -> cluster
//! `default` -> `127.0.0.1:8091` (start `tc-server` with no flags to match).
//! Registries: every type the `meshline` facade has (with the `all-registries`
//! feature; the file registry alone without it), and every configuration centre (`config.type`: file, nacos, etcd3, zk,
//! consul), through `meshline::centre::live_config` and `discovery_from_live`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use meshline::rpc::message::GlobalStatus;
use meshline::rpc::tm::TransactionManager;
use meshline_example_support::{client_setup, init_logging, run_main};

/// A Seata TM: begins global transactions on the group's TCs and commits or rolls them
/// back, printing each XID and status.
#[derive(Parser, Debug)]
#[command(
    name = "tm-client",
    version,
    after_help = "Example, with tc-server running on Seata's default 127.0.0.1:8091:\n  \
                  tm-client --transactions 3 --hold 5s\n\
                  and, while it holds, for each XID it prints:\n  \
                  rm-client --resource jdbc:mysql://db/orders --xid <xid>"
)]
struct Args {
    /// Configuration file (Seata .properties, YAML, TOML or JSON); Seata's defaults
    /// without one.
    #[arg(long)]
    config: Option<PathBuf>,
    /// tx-service-group (default: the config's `txServiceGroup`).
    #[arg(long)]
    group: Option<String>,
    /// Number of transactions to run, one after the other.
    #[arg(long, default_value_t = 10)]
    transactions: u64,
    /// Roll back instead of committing.
    #[arg(long)]
    rollback: bool,
    /// Wait this long between begin and commit (`5s`, `500ms`), for RMs to join.
    #[arg(long, value_parser = humantime::parse_duration)]
    hold: Option<Duration>,
    /// Wait for Enter (a line on stdin) between begin and commit, for RMs to join.
    #[arg(long)]
    step: bool,
    /// The transactions' timeout (default: `client.tm.defaultGlobalTransactionTimeout`).
    #[arg(long, value_parser = humantime::parse_duration)]
    timeout: Option<Duration>,
    /// Transaction name prefix.
    #[arg(long, default_value = "tm-client")]
    name: String,
    /// Load balancer by Seata name (default: the config's `client.loadBalance.type`).
    #[arg(long = "lb", value_name = "LOAD_BALANCE")]
    lb: Option<String>,
}

async fn run(args: Args) -> Result<(), String> {
    // Files, then Seata's configuration centre (`config.type`), then the environment;
    // the mapping is followed when it lives in a centre.
    let setup = client_setup(args.config.as_deref(), args.group.as_deref()).await?;
    let group = setup.group;
    let cluster = setup
        .discovery
        .cluster_for(&group)
        .map_err(|e| e.to_string())?;
    let mut builder = TransactionManager::builder()
        .config(&setup.config)
        .discovery(setup.discovery, group.clone());
    if let Some(lb) = &args.lb {
        builder = builder.load_balance_name(lb);
    }
    let tm = builder.build().await.map_err(|e| e.to_string())?;
    let client = tm.client();
    client
        .wait_alive(1, Duration::from_secs(5))
        .await
        .map_err(|e| e.to_string())?;
    // Give the other TCs a moment to finish connecting.
    let _ = client
        .wait_alive(client.endpoints().len(), Duration::from_millis(500))
        .await;
    let alive = client.alive();
    println!(
        "group {group} -> cluster {cluster}: {} TC(s) alive: {}",
        alive.len(),
        alive
            .endpoints()
            .iter()
            .map(|e| e.instance.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let timeout = args.timeout.unwrap_or(tm.options().default_timeout);
    let mut failed = 0u64;
    for n in 0..args.transactions {
        let tx = match tm.begin(&format!("{}-{n}", args.name), timeout).await {
            Ok(tx) => tx,
            Err(e) => {
                println!("begin failed: {e}");
                failed += 1;
                continue;
            }
        };
        println!("begun {}", tx.xid());
        let _ = std::io::stdout().flush();
        if let Some(h) = args.hold {
            tokio::time::sleep(h).await;
        }
        if args.step {
            println!(
                "press Enter to {}",
                if args.rollback { "roll back" } else { "commit" }
            );
            let _ = std::io::stdout().flush();
            let _ = tokio::task::spawn_blocking(|| {
                let mut line = String::new();
                std::io::stdin().read_line(&mut line)
            })
            .await;
        }
        let (verb, done, result) = if args.rollback {
            ("rolled back", GlobalStatus::Rollbacked, tx.rollback().await)
        } else {
            ("committed", GlobalStatus::Committed, tx.commit().await)
        };
        // `Ok` is a decided outcome (the TM's docs): the TC may still be finishing
        // phase two (`CommitRetrying`, `AsyncCommitting`...), which it does on its own.
        match result {
            Ok(s) if s == done => println!("{verb} {}: {s}", tx.xid()),
            Ok(s) => println!(
                "{verb} {}: {s} (decided; the TC finishes phase two on its own)",
                tx.xid()
            ),
            Err(e) => {
                println!(
                    "{} {} failed: {e}",
                    if args.rollback { "rollback" } else { "commit" },
                    tx.xid()
                );
                failed += 1;
            }
        }
        let _ = std::io::stdout().flush();
    }
    println!(
        "transactions: {}; not as asked: {failed}",
        args.transactions
    );
    client.shutdown(Duration::from_secs(5)).await;
    if failed > 0 {
        Err(format!("{failed} transaction(s) did not end as asked"))
    } else {
        Ok(())
    }
}

fn main() -> ExitCode {
    // Usage errors exit 2, --help / --version exit 0 (clap's convention).
    let args = Args::parse();
    init_logging("warn");
    run_main("tm-client", run(args))
}
