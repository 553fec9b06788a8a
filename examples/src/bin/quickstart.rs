//! `quickstart`: the smallest complete meshline program with real servers.
//!
//! ```text
//! cargo run -p meshline-examples --bin quickstart
//! MESHLINE_LOG=info cargo run -p meshline-examples --bin quickstart   # see the client's logs
//! ```
//!
//! What it does, step by step (each step prints a line):
//!
//! 1. Starts two servers (`server-a`, `server-b`) on free loopback ports. Each answers
//!    Seata's RegisterTM, as a TC does, and echoes every other request with the head
//!    entry `server = <name>`, so the client can see who answered.
//! 2. Lists them in a Seata `.properties` file, the file registry:
//!    `service.vgroupMapping.default_tx_group=default` and
//!    `service.default.grouplist=<a>,<b>`.
//! 3. Builds an `RpcClient` exactly as an application does: `Config::load` ->
//!    `meshline::registry::discovery_from_config` -> `RpcClient::builder()` with the
//!    config (the `XID` balancer is Seata's default), the discovery of
//!    `default_tx_group`, and RegisterTM on every connection; then waits until both
//!    servers are connected and registered ("alive").
//! 4. Calls once per server with an XID naming it (`ip:port:txid`, as a TC hands out
//!    from GlobalBegin): the `XID` balancer sends each call to the server its XID names.
//! 5. Unregisters `server-b` by rewriting the file without it. The server keeps
//!    running: the client drops it because the registry says so (the file registry
//!    re-reads the file every 250 ms), not because a connection broke. The alive count
//!    goes to 1 and a call whose XID names `server-b` is answered by `server-a`.
//! 6. Stops both servers and exits 0 (1 if any step failed, with the reason on stderr).
//!
//! Logs go to stderr through `tracing-subscriber`, filtered by `MESHLINE_LOG`
//! (`EnvFilter` syntax, default `warn`).

use std::error::Error;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use meshline::rpc::message::register_reply;
use meshline::rpc::{
    CallOptions, InboundRequest, Payload, RegisterTmRequest, RpcClient, SeataRegistration, Server,
};

/// Two servers, a file registry and one RpcClient: XID routing, then following an
/// unregister. Takes no options; `MESHLINE_LOG=info` shows the client's logs.
#[derive(Parser, Debug)]
#[command(name = "quickstart", version)]
struct Args {}

type BoxError = Box<dyn Error + Send + Sync>;

/// How long the client may take to see a registry change (the file registry polls
/// every 250 ms; the rest is connecting and RegisterTM).
const FOLLOW_LIMIT: Duration = Duration::from_secs(5);

/// Starts a server named `name` on a free loopback port.
async fn start_server(name: &'static str) -> Result<Server, BoxError> {
    let handler = move |req: InboundRequest| async move {
        // RegisterTM / RegisterRM: answer identified = 1, as a TC does. A client only
        // offers a connection to its balancer after this handshake succeeded.
        if let Ok(msg) = req.payload.decode_seata()
            && let Some(reply) = register_reply(&msg, true, env!("CARGO_PKG_VERSION"))
        {
            return Payload::seata(&reply).ok();
        }
        // Anything else: echo the request, naming this server in the head map.
        Some(req.payload.with_head("server", name))
    };
    let addr: SocketAddr = "127.0.0.1:0".parse()?;
    Ok(Server::bind(addr, handler).await?)
}

/// Writes the Seata configuration naming `members`, replacing the file in one rename
/// so the file registry never reads a half-written file.
fn write_registry(path: &Path, members: &[SocketAddr]) -> std::io::Result<()> {
    let grouplist: Vec<String> = members.iter().map(|a| a.to_string()).collect();
    let tmp = path.with_extension("properties.tmp");
    std::fs::write(
        &tmp,
        format!(
            "service.vgroupMapping.default_tx_group=default\n\
             service.default.grouplist={}\n",
            grouplist.join(",")
        ),
    )?;
    std::fs::rename(&tmp, path)
}

/// The alive endpoints, as `ip:port` text.
fn alive_list(client: &RpcClient) -> String {
    client
        .alive()
        .endpoints()
        .iter()
        .map(|e| e.instance.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Calls with an XID naming `named` and prints who answered; returns the answering
/// server's name.
async fn call_by_xid(client: &RpcClient, named: SocketAddr, tx: u64) -> Result<String, BoxError> {
    let xid = format!("{named}:{tx}");
    let reply = client
        .call(
            Payload::new(format!("hello from {xid}")),
            CallOptions::xid(&xid),
        )
        .await?;
    let who = reply.payload.head.get("server").unwrap_or("?").to_string();
    println!("  xid {xid} -> answered by {} ({who})", reply.endpoint);
    Ok(who)
}

async fn run() -> Result<(), BoxError> {
    println!("meshline quickstart: two servers, a file registry, one RpcClient");

    // 1. Two servers.
    let a = start_server("server-a").await?;
    let b = start_server("server-b").await?;
    let (a_addr, b_addr) = (a.local_addr(), b.local_addr());
    println!("  server-a listening on {a_addr}");
    println!("  server-b listening on {b_addr}");

    // 2. The file registry: a Seata .properties file (removed with `dir` on exit).
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("seata.properties");
    write_registry(&path, &[a_addr, b_addr])?;
    println!(
        "  registry file {}: service.default.grouplist={a_addr},{b_addr}",
        path.display()
    );

    // 3. The client, built as an application builds it.
    let config = meshline::Config::load(Some(&path))?;
    let discovery = meshline::registry::discovery_from_config(&config).await?;
    let cluster = discovery.cluster_for(&config.tx_service_group)?;
    let client = RpcClient::builder()
        .config(&config)
        .discovery(discovery, &config.tx_service_group)
        .handshake(SeataRegistration::tm(RegisterTmRequest {
            version: env!("CARGO_PKG_VERSION").into(),
            application_id: "meshline-quickstart".into(),
            transaction_service_group: config.tx_service_group.clone(),
            extra_data: None,
        }))
        .build()
        .await?;
    client.wait_alive(2, FOLLOW_LIMIT).await?;
    println!(
        "  client: group {} -> cluster {cluster}, {} alive: {}",
        config.tx_service_group,
        client.alive().len(),
        alive_list(&client)
    );

    // 4. One call per server, each XID naming it.
    let first = call_by_xid(&client, a_addr, 1).await?;
    let second = call_by_xid(&client, b_addr, 2).await?;
    if (first.as_str(), second.as_str()) != ("server-a", "server-b") {
        return Err(format!(
            "XID routing: expected server-a then server-b, got {first} then {second}"
        )
        .into());
    }

    // 5. Unregister server-b: the file now lists server-a only. server-b keeps running.
    write_registry(&path, &[a_addr])?;
    println!("  unregister server-b: service.default.grouplist={a_addr}");
    let edited = Instant::now();
    while client.alive().len() != 1 {
        if edited.elapsed() > FOLLOW_LIMIT {
            return Err(format!(
                "the client did not follow the registry within {FOLLOW_LIMIT:?}: alive {}",
                alive_list(&client)
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "  client followed in {} ms: {} alive: {}",
        edited.elapsed().as_millis(),
        client.alive().len(),
        alive_list(&client)
    );
    // A transaction begun on server-b: its server is gone from the registry, so the
    // XID balancer falls back to a server that is there.
    let moved = call_by_xid(&client, b_addr, 3).await?;
    if moved != "server-a" {
        return Err(format!("after the unregister, expected server-a, got {moved}").into());
    }

    // 6. Done.
    drop(client);
    a.shutdown(Duration::from_millis(500)).await;
    b.shutdown(Duration::from_millis(500)).await;
    println!("  done: both servers answered, then the client followed the unregister");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let Args {} = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MESHLINE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickstart: {e}");
            ExitCode::FAILURE
        }
    }
}
