//! `gateway-idle`: resident memory per idle authenticated connection of one gateway.
//!
//! `gateway-idle run --conns 10000,19000` starts itself three or more times:
//! - one **gateway** process (`serve`: a gateway with an in-memory registry and no
//!   backends, rate limits and login queue off, 2 runtime workers);
//! - **client** processes (`connect`), each opening up to `--per-process` TCP
//!   connections from source addresses 127.0.0.2, 127.0.0.3, ... (`--source-ips` of
//!   them, round robin: one address has ~28k ephemeral ports), authenticating every one
//!   and then holding it idle.
//!
//! For each target count it reads `VmRSS` of the gateway process from
//! `/proc/<pid>/status` before any connection and once the count is reached and the
//! gateway has admitted every one (after `--settle` seconds), and prints
//! `(rss - rss_before) / connections` in KiB.
//!
//! Every open connection is a file descriptor in the gateway process, so the largest
//! count is bounded by `RLIMIT_NOFILE` (soft limit raised to the hard one here).
//!
//! ```text
//! cargo run --release -p meshline-example-gateway --bin gateway-idle -- run --conns 10000,19000
//! ```

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use meshline_example_gateway::client::Connector;
use meshline_example_gateway::gateway::Gateway;
use meshline_example_gateway::gateway::admission::TokenMinter;
use meshline_example_gateway::gateway::limits::LimitSettings;
use meshline_example_gateway::gateway::queue::QueueSettings;
use meshline_example_gateway::gateway::settings::GatewaySettings;
use meshline_example_gateway::memory_registry::MemoryRegistry;

#[derive(Parser, Debug)]
#[command(about = "Resident memory per idle authenticated gateway connection")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Orchestrates: one gateway process, client processes, RSS readings.
    Run {
        /// Connection counts to measure at, ascending, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "10000")]
        conns: Vec<usize>,
        /// Connections per client process (each is a file descriptor there too).
        #[arg(long, default_value_t = 9000)]
        per_process: usize,
        /// Source addresses 127.0.0.2.. the clients connect from.
        #[arg(long, default_value_t = 4)]
        source_ips: u8,
        /// Seconds to wait after the last connection before reading RSS.
        #[arg(long, default_value_t = 3)]
        settle: u64,
    },
    /// The gateway process: prints `listening <addr>`, then `sessions <n>` on every
    /// line it reads from stdin.
    Serve,
    /// A client process: opens connections as told on stdin (`open <n>`: n more), prints
    /// `open <total>` when they are all admitted.
    Connect {
        /// The gateway.
        #[arg(long)]
        addr: SocketAddr,
        /// Source addresses `127.0.0.<first-ip>` on (`--source-ips` of them).
        #[arg(long, default_value_t = 2)]
        first_ip: u8,
        /// How many source addresses.
        #[arg(long, default_value_t = 4)]
        source_ips: u8,
        /// Account names are `idle<prefix>-<i>`.
        #[arg(long)]
        prefix: String,
    },
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (`prlimit` on ourselves).
fn raise_nofile() {
    let pid = std::process::id().to_string();
    let hard = Command::new("sh")
        .args(["-c", "ulimit -Hn"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .unwrap_or_default();
    let hard = hard.trim();
    if !hard.is_empty() {
        let _ = Command::new("prlimit")
            .args(["--pid", &pid, &format!("--nofile={hard}:{hard}")])
            .status();
    }
}

/// Lines of stdin, read on a thread (the workspace's tokio has no `io-std`).
fn stdin_lines() -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    raise_nofile();
    match Args::parse().cmd {
        Cmd::Run {
            conns,
            per_process,
            source_ips,
            settle,
        } => run(conns, per_process, source_ips, settle),
        Cmd::Serve => serve(),
        Cmd::Connect {
            addr,
            first_ip,
            source_ips,
            prefix,
        } => connect(addr, first_ip, source_ips, prefix),
    }
}

struct Child {
    proc: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Child {
    fn start(args: &[String]) -> std::io::Result<Child> {
        let mut proc = Command::new(std::env::current_exe()?)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = proc.stdin.take().expect("piped");
        let stdout = BufReader::new(proc.stdout.take().expect("piped"));
        Ok(Child {
            proc,
            stdin,
            stdout,
        })
    }

    fn say(&mut self, line: &str) -> std::io::Result<String> {
        writeln!(self.stdin, "{line}")?;
        self.stdin.flush()?;
        self.read()
    }

    fn read(&mut self) -> std::io::Result<String> {
        let mut l = String::new();
        if self.stdout.read_line(&mut l)? == 0 {
            return Err(std::io::Error::other("child ended"));
        }
        Ok(l.trim().to_string())
    }
}

fn run(
    conns: Vec<usize>,
    per_process: usize,
    source_ips: u8,
    settle: u64,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut gw = Child::start(&["serve".into()])?;
    let addr = gw
        .read()?
        .strip_prefix("listening ")
        .ok_or("gateway did not start")?
        .to_string();
    std::thread::sleep(Duration::from_secs(settle));
    let before = rss_kib(gw.proc.id());
    println!(
        "gateway pid {}: RSS {before} KiB with no connection",
        gw.proc.id()
    );
    println!("\n| connections | gateway RSS (KiB) | added KiB / connection | open in |");
    println!("|------------:|------------------:|-----------------------:|--------:|");
    let mut clients: Vec<(Child, usize)> = Vec::new();
    let mut open = 0usize;
    for target in conns {
        let t0 = Instant::now();
        while open < target {
            if clients.last().is_none_or(|(_, n)| *n >= per_process) {
                let i = clients.len();
                clients.push((
                    Child::start(&[
                        "connect".into(),
                        "--addr".into(),
                        addr.clone(),
                        "--first-ip".into(),
                        (2 + (i as u8 * source_ips)).to_string(),
                        "--source-ips".into(),
                        source_ips.to_string(),
                        "--prefix".into(),
                        i.to_string(),
                    ])?,
                    0,
                ));
            }
            let (c, n) = clients.last_mut().expect("pushed");
            let more = (target - open).min(per_process - *n);
            let reply = c.say(&format!("open {more}"))?;
            if !reply.starts_with("open ") {
                return Err(format!("client: {reply}").into());
            }
            *n += more;
            open += more;
        }
        let took = t0.elapsed();
        std::thread::sleep(Duration::from_secs(settle));
        let sessions = gw.say("sessions")?;
        let rss = rss_kib(gw.proc.id());
        println!(
            "| {open:>11} | {rss:>17} | {:>22.1} | {:>6.1}s |   ({sessions})",
            (rss - before) as f64 / open as f64,
            took.as_secs_f64()
        );
    }
    for (mut c, _) in clients {
        let _ = c.proc.kill();
        let _ = c.proc.wait();
    }
    let _ = gw.proc.kill();
    let _ = gw.proc.wait();
    Ok(())
}

fn serve() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let registry = Arc::new(MemoryRegistry::default());
        let settings = GatewaySettings {
            listen: "127.0.0.1:0".parse()?,
            secret: "idle".into(),
            register_cluster: None,
            limits: LimitSettings::off(),
            queue: QueueSettings::off(),
            ..GatewaySettings::default()
        };
        let gw = Gateway::start(settings, registry).await?;
        println!("listening {}", gw.local_addr());
        let mut lines = stdin_lines();
        while lines.recv().await.is_some() {
            println!("sessions {}", gw.sessions());
        }
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
    })
}

fn connect(
    addr: SocketAddr,
    first_ip: u8,
    source_ips: u8,
    prefix: String,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let minter = Arc::new(TokenMinter::new("idle"));
        let connectors: Vec<Connector> = (0..source_ips)
            .map(|i| Connector::tcp(addr).bind(IpAddr::V4(Ipv4Addr::new(127, 0, 0, first_ip + i))))
            .collect();
        let mut held = Vec::new();
        let mut lines = stdin_lines();
        while let Some(line) = lines.recv().await {
            let n: usize = line
                .strip_prefix("open ")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let start = held.len();
            // 256 logins at a time.
            let mut i = start;
            let mut failed = None;
            while i < start + n {
                let batch: Vec<_> = (i..(start + n).min(i + 256))
                    .map(|k| {
                        let c = connectors[k % connectors.len()].clone();
                        let token =
                            minter.mint(&format!("idle{prefix}-{k}"), Duration::from_secs(86400));
                        tokio::spawn(async move { c.auth(&token).await })
                    })
                    .collect();
                for b in batch {
                    match b.await {
                        Ok(Ok(c)) => held.push(c),
                        Ok(Err(e)) => failed = Some(e.to_string()),
                        Err(e) => failed = Some(e.to_string()),
                    }
                }
                i += 256;
            }
            match failed {
                Some(e) => println!("failed after {}: {e}", held.len()),
                None => println!("open {}", held.len()),
            }
        }
        Ok(())
    })
}
