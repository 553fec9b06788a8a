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
//! Registries: `file` (like Seata's TC, nothing is registered there: clients read
//! `service.<cluster>.grouplist`) and, built with `--features etcd`, `etcd3` (Seata's
//! key layout, kept alive by a lease until SIGINT/SIGTERM). The cluster registered under
//! is `--cluster`, else the registry's own cluster key (`registry.etcd3.cluster`).

#[path = "shared/registry.rs"]
mod registry;
#[path = "shared/tc.rs"]
mod tc;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use meshline_registry_core::{Config, Instance, RegistryError};
use meshline_rpc_client::{Server, ServerConfig};

const USAGE: &str = "usage: tc-server [--id ID] [--host IP] [--port PORT] [--config FILE] [--cluster NAME] [--refuse-registration]";

#[derive(Debug)]
struct Args {
    id: String,
    host: String,
    port: u16,
    config: Option<PathBuf>,
    cluster: Option<String>,
    refuse: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        id: "1".into(),
        host: "127.0.0.1".into(),
        port: 8091,
        config: None,
        cluster: None,
        refuse: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--id" => args.id = value("--id")?,
            "--host" => args.host = value("--host")?,
            "--port" => {
                let v = value("--port")?;
                args.port = v
                    .parse()
                    .map_err(|_| format!("--port `{v}` is not a port number"))?;
            }
            "--config" => args.config = Some(PathBuf::from(value("--config")?)),
            "--cluster" => args.cluster = Some(value("--cluster")?),
            "--refuse-registration" => args.refuse = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(args)
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
    let registry = registry::open(&config).await?;
    let ip = args
        .host
        .parse()
        .map_err(|_| format!("--host `{}` is not an IP address", args.host))?;
    let stats = Arc::new(tc::TcStats::default());
    let server = Server::bind_with(
        SocketAddr::new(ip, args.port),
        ServerConfig::default(),
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
        .unwrap_or_else(|| registry::server_cluster(&config));
    let instance = Instance::new(&args.host, addr.port())
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
        requests = stats.requests.load(std::sync::atomic::Ordering::Relaxed),
        registrations = stats
            .registrations
            .load(std::sync::atomic::Ordering::Relaxed),
        "stopped"
    );
    Ok(())
}

fn main() -> ExitCode {
    tc::init_logging("info");
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("tc-server: {e}");
            }
            eprintln!("{USAGE}");
            return if e.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };
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
