//! `game-backend`: the example game backend (lobby, chat, keyed room, dynamic bind and
//! static inventory modules; their opcodes are in `docs/gateway-protocol.md`).
//!
//! ```text
//! game-backend --config gateway.yaml --id be-1 [--port 0] [--snapshot-ms 100]
//! ```
//!
//! Registers itself under the `lobby`, `chat`, `room`, `bind` and `inventory` clusters of
//! the configured registry (with the file registry nothing is registered: list the
//! backends in `service.<cluster>.grouplist` instead), and unregisters on Ctrl-C /
//! SIGTERM. The first stdout line is `game-backend <id> listening on <addr>`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use meshline_example_gateway::game_backend::GameBackend;

#[derive(Parser, Debug)]
#[command(
    about = "The example game backend",
    long_about = "The example game backend behind the gateway: module 1 lobby (stateless), \
2 chat (broadcast), 3 room (keyed by room name: one backend per room), 4 bind (dynamic \
binding), 5 inventory (static binding). Their opcodes and payloads, and the gateway \
protocol clients speak, are in docs/gateway-protocol.md."
)]
struct Args {
    /// Config file (its registry settings are used).
    #[arg(long)]
    config: Option<PathBuf>,
    /// This backend's id (shown to players).
    #[arg(long, default_value = "be-1")]
    id: String,
    /// Listen address.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Listen port (0 = any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Room snapshot period, in milliseconds.
    #[arg(long, default_value_t = 100)]
    snapshot_ms: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    meshline_example_support::init_logging("info");
    let args = Args::parse();
    let run = async {
        let config = meshline::Config::load(args.config.as_deref())?;
        let registry = meshline::registry::from_config(&config).await?;
        // The file registry cannot register: its grouplists name the backends.
        let clusters: &[&str] = if registry.kind() == "file" {
            &[]
        } else {
            &["lobby", "chat", "room", "bind", "inventory"]
        };
        let addr = format!("{}:{}", args.host, args.port).parse()?;
        let be = GameBackend::start(
            &args.id,
            addr,
            registry.clone(),
            clusters,
            Duration::from_millis(args.snapshot_ms.max(1)),
        )
        .await?;
        println!("game-backend {} listening on {}", args.id, be.local_addr());
        meshline_example_support::wait_for_stop().await;
        be.stop(Duration::from_secs(2)).await;
        let _ = registry.close().await;
        Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    };
    match run.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("game-backend: {e}");
            ExitCode::FAILURE
        }
    }
}
