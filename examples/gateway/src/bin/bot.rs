//! `bot`: players for the example gateway. Each bot authenticates with a token minted
//! from the shared secret, joins a room, chats, and sends lobby requests in a loop;
//! the program reports requests/s and reply latency (p50 / p99) at the end.
//!
//! ```text
//! bot --gateway 127.0.0.1:7000 --secret change-me [--bots 50] [--secs 10]
//! bot --gateway 127.0.0.1:7001 --ws --secret change-me     # over WebSocket
//! bot --secret change-me --token-for alice                 # print a token (browser page)
//! ```
//!
//! A bot whose connection drops reconnects with exponential backoff and full jitter
//! and resumes its session. A bot told to reconnect (its gateway drains) finishes its
//! request in flight, then resumes its session on another of the `--gateway` addresses
//! (`--gateway a,b,c`: the first is where the bots start; see
//! `meshline_example_gateway::roaming`). With the memory session store the resume elsewhere is
//! refused and the bot authenticates again with a fresh token (a new session).
//! and resumes its session. A bot waiting in the gateway's login queue waits (its
//! `QUEUE` frames are handled by the client library); a request refused by the
//! gateway's rate limits (`rate limited: ...`) is counted, not retried, and the bot
//! slows down for a moment instead of reconnecting. The bots play flat out from one
//! address: give the gateway `limits: { allow: 127.0.0.1, account-messages-per-sec: 0 }`
//! (or similar) to measure it rather than its limits.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use meshline_example_gateway::client::{ClientError, GatewayClient, Welcome};
use meshline_example_gateway::game_backend::modules;
use meshline_example_gateway::gateway::admission::TokenMinter;
use meshline_example_gateway::roaming::{Gateways, RoamOptions, RoamingClient, TokenSource, Via};

#[derive(Parser, Debug)]
#[command(
    about = "Load bots for the example gateway",
    long_about = "Load bots for the example gateway: each authenticates with a token minted \
from the shared secret, joins a room, chats and sends lobby requests, and the program \
reports requests/s and reply latency. The protocol the bots speak (frame, module-0 \
opcodes, token bytes, refusal and kick codes, resume) is docs/gateway-protocol.md."
)]
struct Args {
    /// The gateways' addresses (their `ws-listen` addresses with `--ws`), comma
    /// separated: bots start on the first and move to the others when told to.
    #[arg(long, required_unless_present = "token_for", value_delimiter = ',')]
    gateway: Vec<SocketAddr>,
    /// Connect over WebSocket (one frame per binary message) instead of TCP.
    #[arg(long)]
    ws: bool,
    /// The token secret shared with the gateway.
    #[arg(long, env = "GATEWAY_SECRET")]
    secret: String,
    /// Bots.
    #[arg(long, default_value_t = 50)]
    bots: usize,
    /// How long to play.
    #[arg(long, default_value_t = 10)]
    secs: u64,
    /// Print a token for this account (valid one hour) and exit: for the browser page,
    /// `gateway.html?token=...`.
    #[arg(long, value_name = "ACCOUNT")]
    token_for: Option<String>,
}

/// Where the bots connect.
#[derive(Debug, Clone, Copy)]
struct Target {
    addr: SocketAddr,
    ws: bool,
}

impl Target {
    async fn auth(&self, token: &str) -> Result<GatewayClient, ClientError> {
        if self.ws {
            GatewayClient::auth_ws(&format!("ws://{}/", self.addr), token).await
        } else {
            GatewayClient::auth(self.addr, token).await
        }
    }

    async fn resume(&self, welcome: &Welcome) -> Result<GatewayClient, ClientError> {
        if self.ws {
            GatewayClient::resume_ws(&format!("ws://{}/", self.addr), welcome).await
        } else {
            GatewayClient::resume(self.addr, welcome).await
        }
    }
}

async fn connect(
    target: Target,
    minter: &TokenMinter,
    account: &str,
    welcome: Option<&Welcome>,
) -> GatewayClient {
    let mut delay = Duration::from_millis(100);
    loop {
        let attempt = match welcome {
            Some(w) => target.resume(w).await,
            None => {
                target
                    .auth(&minter.mint(account, Duration::from_secs(300)))
                    .await
            }
        };
        match attempt {
            Ok(c) => return c,
            Err(e) => {
                tracing::debug!(account, error = %e, "connect failed; retrying");
                // Full jitter: anywhere between 0 and the current ceiling.
                let wait = Duration::from_micros(fastrand::u64(0..=delay.as_micros() as u64));
                tokio::time::sleep(wait).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    meshline_example_support::init_logging("info");
    let args = Args::parse();
    let minter = Arc::new(TokenMinter::new(args.secret.clone()));
    if let Some(account) = &args.token_for {
        println!("{}", minter.mint(account, Duration::from_secs(3600)));
        return ExitCode::SUCCESS;
    }
    let Some(&gateway) = args.gateway.first() else {
        eprintln!("bot: --gateway is required");
        return ExitCode::FAILURE;
    };
    let gateways = Gateways::fixed(args.gateway.clone());
    let options = RoamOptions {
        via: if args.ws { Via::WebSocket } else { Via::Tcp },
        ..RoamOptions::default()
    };
    let target = Target {
        addr: gateway,
        ws: args.ws,
    };
    let until = Instant::now() + Duration::from_secs(args.secs);
    let mut tasks = Vec::new();
    for i in 0..args.bots {
        let minter = minter.clone();
        let addr = target;
        let (gateways, options) = (gateways.clone(), options.clone());
        tasks.push(tokio::spawn(async move {
            let account = format!("bot{i}");
            let mut latencies = Vec::new();
            let mut errors = 0u64;
            let mut limited = 0u64;
            let tokens: TokenSource = {
                let (minter, account) = (minter.clone(), account.clone());
                Arc::new(move || minter.mint(&account, Duration::from_secs(300)))
            };
            let first = connect(addr, &minter, &account, None).await;
            let mut client = RoamingClient::new(
                first,
                addr.addr,
                gateways.clone(),
                Some(tokens.clone()),
                options.clone(),
            );
            let _ = client
                .request(modules::ROOM, 1, Bytes::from(format!("room{}", i % 10)))
                .await;
            let mut n = 0u64;
            while Instant::now() < until {
                n += 1;
                let t0 = Instant::now();
                let r = if n.is_multiple_of(50) {
                    client
                        .request(modules::CHAT, 1, Bytes::from(format!("hello {n}")))
                        .await
                } else {
                    client.request(modules::LOBBY, 1, Bytes::new()).await
                };
                match r {
                    Ok(_) => latencies.push(t0.elapsed()),
                    Err(ClientError::Reply(text)) if text.starts_with("rate limited") => {
                        limited += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(e) => {
                        errors += 1;
                        tracing::debug!(%account, error = %e, "request failed; resuming");
                        // The roaming client moves by itself on advice or a drop; when
                        // it gave up, start over (resume where the bot began).
                        if client.gave_up() {
                            let w = client.current().resume_ticket();
                            let again = connect(addr, &minter, &account, Some(&w)).await;
                            client = RoamingClient::new(
                                again,
                                addr.addr,
                                gateways.clone(),
                                Some(tokens.clone()),
                                options.clone(),
                            );
                        }
                    }
                }
            }
            (latencies, errors, limited)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    let mut limited = 0;
    for t in tasks {
        if let Ok((l, e, r)) = t.await {
            all.extend(l);
            errors += e;
            limited += r;
        }
    }
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .map(|d| d.as_micros())
            .unwrap_or(0)
    };
    println!(
        "bots {}: {} requests in {} s = {:.0}/s, p50 {} us, p99 {} us, errors {}, rate limited {}",
        args.bots,
        all.len(),
        args.secs,
        all.len() as f64 / args.secs as f64,
        pct(0.50),
        pct(0.99),
        errors,
        limited
    );
    if errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
