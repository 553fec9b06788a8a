//! `tc-server`: an in-memory Seata TC (not durable) speaking Seata's RPC v1 frames and,
//! on the same port, Seata 2.x's gRPC transport (told apart per connection by its
//! first bytes, as Seata's TC does; clients with `transport.protocol = grpc`).
//!
//! It coordinates real global transactions (`meshline_example_tc`): RegisterTM/RM
//! (identified = 1, or 0 with `--refuse-registration`), GlobalBegin with XIDs naming
//! this server (`<host>:<port>:<id>`), branch registration with global row locks,
//! commit and rollback driving phase two on the RMs' connections with retries, global
//! timeouts, GlobalStatus / GlobalReport / GlobalLockQuery, and MergedWarpMessages
//! (answered result by result in BatchResultMessages to clients of 1.5.0 or later
//! unless `transport.enableTcServerBatchSendResponse=false`, in one MergeResultMessage
//! otherwise).
//! Every answer carries the head entry `tc = <id>`. Bad input is refused, never
//! echoed. It registers itself in the configured registry and unregisters on SIGINT /
//! SIGTERM. Transactions live in memory only: a killed tc-server loses the ones it had
//! not finished.
//!
//! ```text
//! tc-server [--id ID] [--host IP] [--port PORT] [--config FILE] [--cluster NAME]
//!           [--refuse-registration]
//! ```
//!
//! The first line on stdout is `tc-server <id> listening on <ip:port>` (tests read it
//! to learn the port when started with `--port 0`). Logs go to stderr (`MESHLINE_LOG`).
//!
//! Registries: every type the `meshline` facade has (with the `all-registries`
//! feature; the file registry alone without it), opened with `meshline::registry::from_config`. With `file`, like Seata's
//! TC, nothing is registered: clients read `service.<cluster>.grouplist`. With the
//! others (etcd3, nacos, zk, redis, consul, eureka) the TC registers in Seata's layout
//! and stays registered (lease, ephemeral node, TTL, heartbeat) until SIGINT/SIGTERM.
//! The cluster registered under is `--cluster`, else the registry's own cluster key
//! (`registry.etcd3.cluster`, ...; see `meshline_example_tc::server_cluster`).

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Parser;
use meshline::rpc::{ServerConfig, TransportConfig};
use meshline::{Config, Instance, RegistryError};
use meshline_example_support::init_logging;
use meshline_example_tc::server_cluster;
use meshline_example_tc::{Coordinator, TcOptions, batch_send_response};

/// An in-memory Seata TC (not durable): registration, begin, branches with global
/// locks, commit / rollback with phase two on the RMs, timeouts, batching.
#[derive(Parser, Debug)]
#[command(
    name = "tc-server",
    version,
    after_help = "Example: tc-server --id tc-1 --port 8091 --config seata.properties\n\
                  Then: tm-client --config seata.properties (begins and commits transactions),\n\
                  rm-client --config seata.properties (registers branches, answers phase two)."
)]
struct Args {
    /// This TC's id, in the `tc` head entry of every answer.
    #[arg(long, default_value = "1")]
    id: String,
    /// IP address to listen on (and to register).
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Port to listen on; 0 picks a free one (printed on the first stdout line).
    #[arg(long, default_value_t = 8091)]
    port: u16,
    /// Configuration file (Seata .properties, YAML, TOML or JSON); Seata's defaults
    /// without one.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Cluster to register under (default: the registry's cluster key).
    #[arg(long)]
    cluster: Option<String>,
    /// Answer RegisterTM/RM with identified = 0.
    #[arg(long = "refuse-registration")]
    refuse: bool,
}

async fn wait_for_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = tokio::signal::ctrl_c() => "SIGINT",
                _ = term.recv() => "SIGTERM",
            },
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only SIGINT stops the server");
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}

async fn run(args: Args) -> Result<(), String> {
    let config = Config::load(args.config.as_deref()).map_err(|e| e.to_string())?;
    let transport = TransportConfig::from_config(&config).map_err(|e| e.to_string())?;
    let registry = meshline::registry::from_config(&config)
        .await
        .map_err(|e| e.to_string())?;
    let options = TcOptions {
        refuse_registration: args.refuse,
        tag: Some(args.id.clone()),
        phase_two_timeout: transport.rpc_tc_request_timeout,
        batch_send_response: batch_send_response(&config).map_err(|e| e.to_string())?,
        ..TcOptions::default()
    };
    let (server, tc) = Coordinator::serve(
        SocketAddr::new(args.host, args.port),
        args.host,
        options,
        ServerConfig::from_config(&config).map_err(|e| e.to_string())?,
    )
    .await
    .map_err(|e| format!("cannot listen on {}:{}: {e}", args.host, args.port))?;
    let addr = server.local_addr();
    println!("tc-server {} listening on {addr}", args.id);
    let _ = std::io::stdout().flush();

    let cluster = args
        .cluster
        .clone()
        .unwrap_or_else(|| server_cluster(&config));
    let instance = Instance::new(&args.host.to_string(), addr.port())
        .map_err(|e| e.to_string())?
        .with_metadata("tc-id", args.id.clone());
    let registered = match registry.register(&cluster, &instance).await {
        Ok(()) => {
            tracing::info!(registry = registry.kind(), %cluster, %instance, "registered");
            true
        }
        Err(RegistryError::ReadOnly { kind, .. }) => {
            tracing::info!(
                registry = kind,
                %cluster,
                "nothing to register: clients find this TC in service.{cluster}.grouplist"
            );
            false
        }
        Err(e) => {
            return Err(format!(
                "cannot register in the {} registry: {e}",
                registry.kind()
            ));
        }
    };

    let signal = wait_for_signal().await;
    tracing::info!(signal, "stopping");
    if registered {
        if let Err(e) = registry.unregister(&cluster, &instance).await {
            tracing::warn!(error = %e, "unregister failed");
        } else {
            tracing::info!(%cluster, %instance, "unregistered");
        }
    }
    if let Err(e) = registry.close().await {
        tracing::warn!(error = %e, "registry close failed");
    }
    server.shutdown(Duration::from_secs(5)).await;
    let s = tc.stats();
    tracing::info!(
        registrations = s.registrations.load(Ordering::Relaxed),
        begun = s.begun.load(Ordering::Relaxed),
        committed = s.committed.load(Ordering::Relaxed),
        rolled_back = s.rolled_back.load(Ordering::Relaxed),
        timed_out = s.timed_out.load(Ordering::Relaxed),
        unfinished = tc.open_sessions(),
        "stopped"
    );
    Ok(())
}

fn main() -> ExitCode {
    // Usage errors exit 2, --help / --version exit 0 (clap's convention).
    let args = Args::parse();
    init_logging("info");
    meshline_example_support::run_main("tc-server", run(args))
}
