//! `gateway`: the example game gateway.
//!
//! ```text
//! gateway --config gateway.yaml
//! ```
//!
//! Reads the registry settings and the `gateway:` section from the config file (and
//! `MESHLINE_*` variables), finds the backend clusters in that registry, listens for
//! clients, registers itself, and on Ctrl-C / SIGTERM (or `POST /drain` on the admin
//! port, which must not be reachable from the public network) drains (see
//! `meshline_example_gateway::gateway::drain`: unregister, stop accepting, advise clients to
//! reconnect elsewhere, wait for them up to `gateway.drain.deadline`, close the rest,
//! flush sessions), closes and exits 0. The first
//! stdout line is `gateway <id> listening on <addr>`; with `ws-listen` /
//! `admin-listen` set, lines `gateway <id> websocket on ws://<addr>/` and
//! `gateway <id> browser client on http://<addr>/gateway.html` follow. When a drain ends:
//! `gateway <id> drained: <advised> advised, <closed> closed at the deadline`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use meshline_example_gateway::gateway::Gateway;
use meshline_example_gateway::gateway::settings::GatewaySettings;

#[derive(Parser, Debug)]
#[command(
    about = "The example game gateway",
    long_about = "The example game gateway: clients connect over TCP (gateway.listen) or \
WebSocket (gateway.ws-listen) and speak the frame of docs/gateway-protocol.md: a 13-byte \
header (length, module, opcode, sequence, flags) and a payload; module 0 is the gateway \
(AUTH with an HMAC-SHA256 token, RESUME, PING, KICK, ...). That document lists every \
opcode, refusal and kick code, the token's exact bytes, the resume rules and every limit \
with its gateway.* key and default."
)]
struct Args {
    /// Config file (registry + `gateway:` section).
    #[arg(long)]
    config: PathBuf,
}

#[tokio::main]
async fn main() -> ExitCode {
    meshline_example_support::init_logging("info");
    let args = Args::parse();
    let run = async {
        // `gateway.*` is this program's own part of the configuration: declared, so the
        // loader keeps it for GatewaySettings instead of reporting it unknown.
        let loader = meshline::ConfigLoader::new()
            .file(&args.config)
            .process_env()
            .part_root("gateway");
        // Held for the whole run: the file registry follows this live configuration
        // (its files, its centre) for as long as it is held.
        let live = meshline::centre::live_config(loader).await?;
        let config = (*live.current()).clone();
        let settings = GatewaySettings::from_config(&config)?;
        let registry = meshline::registry::from_config(&config).await?;
        let gw = Gateway::start(settings.clone(), registry.clone()).await?;
        println!("gateway {} listening on {}", settings.id, gw.local_addr());
        if let Some(a) = gw.ws_addr() {
            println!("gateway {} websocket on ws://{a}/", settings.id);
        }
        if let Some(a) = gw.admin_addr() {
            println!(
                "gateway {} browser client on http://{a}/gateway.html",
                settings.id
            );
        }
        tokio::select! {
            _ = meshline_example_support::wait_for_stop() => {}
            _ = gw.drain_requested() => {}
        }
        let report = gw.drain().await;
        println!(
            "gateway {} drained: {} advised, {} closed at the deadline",
            settings.id, report.advised, report.closed
        );
        gw.shutdown().await;
        let _ = registry.close().await;
        Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    };
    match run.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gateway: {e}");
            ExitCode::FAILURE
        }
    }
}
