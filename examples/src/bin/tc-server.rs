//! `tc-server`: a stand-in Seata TC front door speaking RPC v1 frames.
//!
//! It answers heartbeats and RegisterTM/RM (identified = 1, or 0 with
//! `--refuse-registration`), echoes any other request with head `tc = <id>` (after
//! `delay_ms` when the request's head map asks), registers itself in the configured
//! registry and unregisters on SIGINT / SIGTERM.
//!
//! ```text
//! tc-server [--id ID] [--host IP] [--port PORT] [--config FILE] [--cluster NAME]
//!           [--refuse-registration]
//! ```
//!
//! The first line on stdout is `tc-server <id> listening on <ip:port>` (tests read it
//! to learn the port when started with `--port 0`). Logs go to stderr (`MESHLINE_LOG`).
//!
//! Registries: every type the `meshline` facade has (the default `all-registries`
//! feature), opened with `meshline::registry::from_config`. With `file`, like Seata's
//! TC, nothing is registered: clients read `service.<cluster>.grouplist`. With the
//! others (etcd3, nacos, zk, redis, consul, eureka) the TC registers in Seata's layout
//! and stays registered (lease, ephemeral node, TTL, heartbeat) until SIGINT/SIGTERM.
//! The cluster registered under is `--cluster`, else the registry's own cluster key
//! (`registry.etcd3.cluster`, ...; see `meshline_examples::server_cluster`).

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Parser;
use meshline::rpc::Server;
use meshline::{Config, Instance, RegistryError};
use meshline_examples::{init_logging, server_cluster, tc};

/// A stand-in Seata TC: answers registration and echoes requests tagged with its id.
#[derive(Parser, Debug)]
#[command(name = "tc-server", version)]
struct Args {
    /// This TC's id, echoed in the `tc` head entry of every answer.
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
    let registry = meshline::registry::from_config(&config)
        .await
        .map_err(|e| e.to_string())?;
    let stats = Arc::new(tc::TcStats::default());
    let server = Server::bind(
        SocketAddr::new(args.host, args.port),
        tc::tc_handler(args.id.clone(), args.refuse, stats.clone()),
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
    tracing::info!(
        requests = stats.requests.load(Ordering::Relaxed),
        registrations = stats.registrations.load(Ordering::Relaxed),
        "stopped"
    );
    Ok(())
}

fn main() -> ExitCode {
    // Usage errors exit 2, --help / --version exit 0 (clap's convention).
    let args = Args::parse();
    init_logging("info");
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tc-server: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tc-server: {e}");
            ExitCode::FAILURE
        }
    }
}
