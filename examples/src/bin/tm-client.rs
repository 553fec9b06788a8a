//! `tm-client`: looks up the TCs of a tx-service-group, registers as a TM on each, and
//! sends requests carrying XIDs, printing which TC answered each.
//!
//! ```text
//! tm-client [--config FILE] [--group GROUP] [--requests N] [--lb NAME]
//! ```
//!
//! A real TM gets its XID from GlobalBegin; the XID names the TC that began the
//! transaction (`ip:port:txid`), and later calls for that transaction must reach that
//! TC. This client makes XIDs naming each alive TC in turn, so with the `XID` balancer
//! every line should show `xid <tc>:<n> -> <same tc>`.
//!
//! With no `--config`, Seata's defaults apply: group `default_tx_group` -> cluster
//! `default` -> `127.0.0.1:8091` (start `tc-server` with no flags to match).
//! Registries: every type the `meshline` facade has (the default `all-registries`
//! feature), and every configuration centre (`config.type`: file, nacos, etcd3, zk,
//! consul), through `meshline::centre::live_config` and `discovery_from_live`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use meshline::ConfigLoader;
use meshline::rpc::{CallOptions, Payload, RegisterTmRequest, RpcClient, SeataRegistration};
use meshline_examples::init_logging;

/// A Seata TM stand-in: finds the group's TCs and calls them by XID.
#[derive(Parser, Debug)]
#[command(name = "tm-client", version)]
struct Args {
    /// Configuration file (Seata .properties, YAML, TOML or JSON); Seata's defaults
    /// without one.
    #[arg(long)]
    config: Option<PathBuf>,
    /// tx-service-group (default: the config's `txServiceGroup`).
    #[arg(long)]
    group: Option<String>,
    /// Number of requests to send.
    #[arg(long, default_value_t = 10)]
    requests: u64,
    /// Load balancer by Seata name (default: the config's `client.loadBalance.type`).
    #[arg(long = "lb", value_name = "LOAD_BALANCE")]
    lb: Option<String>,
}

async fn run(args: Args) -> Result<(), String> {
    // Files, then Seata's configuration centre (`config.type`), then the environment;
    // the mapping is followed when it lives in a centre.
    let mut loader = ConfigLoader::new();
    if let Some(p) = &args.config {
        loader = loader.file(p);
    }
    let live = meshline::centre::live_config(loader.process_env())
        .await
        .map_err(|e| e.to_string())?;
    let config = live.current();
    let group = args
        .group
        .clone()
        .unwrap_or_else(|| config.tx_service_group.clone());
    let discovery = meshline::centre::discovery_from_live(&live)
        .await
        .map_err(|e| e.to_string())?;
    let cluster = discovery.cluster_for(&group).map_err(|e| e.to_string())?;
    let mut builder = RpcClient::builder()
        .config(&config)
        .discovery(discovery, group.clone())
        .handshake(SeataRegistration::tm(RegisterTmRequest {
            version: env!("CARGO_PKG_VERSION").into(),
            application_id: config.application_id.clone(),
            transaction_service_group: group.clone(),
            extra_data: None,
        }));
    if let Some(lb) = &args.lb {
        builder = builder.load_balance_name(lb);
    }
    let client = builder.build().await.map_err(|e| e.to_string())?;
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
    let tcs: Vec<String> = alive
        .endpoints()
        .iter()
        .map(|e| e.instance.to_java_string())
        .collect();
    let mut answered: BTreeMap<String, u64> = BTreeMap::new();
    let mut failed = 0u64;
    for n in 0..args.requests {
        let xid = format!("{}:{}", tcs[(n as usize) % tcs.len()], 1_000_000 + n);
        match client
            .call(
                Payload::new(format!("demo request {n}")),
                CallOptions::xid(&xid),
            )
            .await
        {
            Ok(r) => {
                let tc_id = r.payload.head.get("tc").unwrap_or("?").to_string();
                println!("xid {xid} -> answered by {} (tc id {tc_id})", r.endpoint);
                *answered.entry(r.endpoint.to_string()).or_default() += 1;
            }
            Err(e) => {
                println!("xid {xid} -> failed: {e}");
                failed += 1;
            }
        }
    }
    println!("answers per TC: {answered:?}; failed: {failed}");
    client.shutdown(Duration::from_secs(5)).await;
    if failed > 0 {
        Err(format!("{failed} request(s) failed"))
    } else {
        Ok(())
    }
}

fn main() -> ExitCode {
    // Usage errors exit 2, --help / --version exit 0 (clap's convention).
    let args = Args::parse();
    init_logging("warn");
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tm-client: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tm-client: {e}");
            ExitCode::FAILURE
        }
    }
}
