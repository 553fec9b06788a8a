//! `demo`: meshline's rpc-client surviving a TC crash, in one command.
//!
//! ```text
//! cargo run --release -p meshline-examples --bin demo
//! ```
//!
//! 1. Starts three demo TCs in this process on free loopback ports.
//! 2. Writes a Seata `.properties` file naming them in `service.default.grouplist`,
//!    and builds a TM client the way an application would: `Config` -> file registry
//!    -> `Discovery` (`default_tx_group -> default`) -> `RpcClient` with the `XID`
//!    balancer and Seata RegisterTM on every connection.
//! 3. Drives transactions through them from 16 concurrent workers; each call carries
//!    an XID naming one of the three TCs.
//! 4. Kills TC 2 mid-run (its listener and connections vanish, as in a crash), keeps
//!    the load on, then removes it from the registry file.
//! 5. Prints a table: per-TC traffic before and after the kill, where the killed TC's
//!    transactions went, what happened to calls in flight on it, and whether any call
//!    written to a live TC failed (it must not: the exit code says so).
//!
//! No servers need to be installed; everything runs on 127.0.0.1.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use meshline::Config;
use meshline::rpc::{
    CallOptions, Payload, RegisterTmRequest, RpcClient, RpcError, SeataRegistration, Server,
};
use meshline_examples::{init_logging, tc};

const TCS: usize = 3;
const VICTIM: usize = 1;
const WORKERS: usize = 16;
const PHASE: Duration = Duration::from_millis(1500);

/// meshline's rpc-client surviving a TC crash: three in-process TCs, a file registry,
/// a TM client with XID routing, one TC killed under load. Takes no options; logs go to
/// stderr (`MESHLINE_LOG`, default `error`).
#[derive(Parser, Debug)]
#[command(name = "demo", version)]
struct Args {}

struct Tc {
    id: String,
    server: Server,
    addr: String,
}

#[derive(Default)]
struct Tally {
    /// Answers per TC address, before and after the kill.
    before: BTreeMap<String, u64>,
    after: BTreeMap<String, u64>,
    /// Before the kill: calls answered by the TC their XID named.
    xid_hits_before: u64,
    xid_calls_before: u64,
    /// After the kill: calls whose XID named the victim, and who answered them.
    victim_xid_after: BTreeMap<String, u64>,
    /// Calls written to the victim when it died.
    maybe_delivered_on_victim: u64,
    /// Anything else that failed (must stay 0).
    other_failures: Vec<String>,
}

fn write_registry_file(path: &Path, addrs: &[&str]) -> std::io::Result<()> {
    // Write-then-rename so the file registry never reads a half-written file.
    let tmp = path.with_extension("properties.tmp");
    std::fs::write(
        &tmp,
        format!(
            "registry.type=file\n\
             txServiceGroup=default_tx_group\n\
             service.vgroupMapping.default_tx_group=default\n\
             service.default.grouplist={}\n\
             client.loadBalance.type=XID\n",
            addrs.join(";")
        ),
    )?;
    std::fs::rename(&tmp, path)
}

async fn worker(
    client: RpcClient,
    tcs: Arc<Vec<String>>,
    victim: String,
    next_tx: Arc<AtomicU64>,
    killed_at: Arc<Mutex<Option<Instant>>>,
    stop: Arc<AtomicBool>,
    tally: Arc<Mutex<Tally>>,
) {
    while !stop.load(Ordering::Relaxed) {
        let tx = next_tx.fetch_add(1, Ordering::Relaxed);
        let named = &tcs[(tx % tcs.len() as u64) as usize];
        let xid = format!("{named}:{}", 2_000_000 + tx);
        // A little server-side work keeps calls in flight when the TC dies.
        let payload = Payload::new(format!("branch work for {xid}")).with_head("delay_ms", "2");
        let result = client.call(payload, CallOptions::xid(&xid)).await;
        let after_kill = killed_at.lock().map(|k| k.is_some()).unwrap_or(false);
        let mut t = match tally.lock() {
            Ok(t) => t,
            Err(p) => p.into_inner(),
        };
        match result {
            Ok(r) => {
                let by = r.endpoint.to_string();
                if after_kill {
                    *t.after.entry(by.clone()).or_default() += 1;
                    if *named == victim {
                        *t.victim_xid_after.entry(by).or_default() += 1;
                    }
                } else {
                    t.xid_calls_before += 1;
                    if by == *named {
                        t.xid_hits_before += 1;
                    }
                    *t.before.entry(by).or_default() += 1;
                }
            }
            Err(RpcError::MaybeDelivered { endpoint, .. }) if endpoint == victim => {
                t.maybe_delivered_on_victim += 1;
            }
            Err(e) => t.other_failures.push(format!("xid {xid}: {e}")),
        }
    }
}

async fn run() -> Result<bool, String> {
    println!("meshline demo: 3 TCs in-process, file registry, TM client with XID routing\n");
    let mut tcs = Vec::new();
    for i in 1..=TCS {
        let id = format!("tc-{i}");
        let stats = Arc::new(tc::TcStats::default());
        let server = Server::bind(
            "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?,
            tc::tc_handler(id.clone(), false, stats),
        )
        .await
        .map_err(|e| format!("cannot start {id}: {e}"))?;
        let addr = server.local_addr().to_string();
        println!("  started {id} on {addr}");
        tcs.push(Tc { id, server, addr });
    }
    let dir: PathBuf = std::env::temp_dir().join(format!("meshline-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let file = dir.join("registry.properties");
    let all: Vec<&str> = tcs.iter().map(|t| t.addr.as_str()).collect();
    write_registry_file(&file, &all)
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    println!(
        "  registry file {}:\n    service.default.grouplist={}",
        file.display(),
        all.join(";")
    );

    let config = Config::load(Some(&file)).map_err(|e| e.to_string())?;
    let discovery = meshline::registry::discovery_from_config(&config)
        .await
        .map_err(|e| e.to_string())?;
    let client = RpcClient::builder()
        .config(&config)
        .discovery(discovery, config.tx_service_group.clone())
        .handshake(SeataRegistration::tm(RegisterTmRequest {
            version: env!("CARGO_PKG_VERSION").into(),
            application_id: "meshline-demo".into(),
            transaction_service_group: config.tx_service_group.clone(),
            extra_data: None,
        }))
        .configure(|o| {
            o.request_timeout = Duration::from_secs(2);
            o.backoff_initial = Duration::from_millis(100);
            o.backoff_max = Duration::from_secs(1);
        })
        .build()
        .await
        .map_err(|e| e.to_string())?;
    client
        .wait_alive(TCS, Duration::from_secs(5))
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "  client: group {} -> cluster default, balancer {}, {} TCs connected and registered (RegisterTM identified=1)\n",
        config.tx_service_group,
        client.balancer().load_balance().name(),
        client.alive().len()
    );

    let victim = tcs[VICTIM].addr.clone();
    let tc_addrs = Arc::new(tcs.iter().map(|t| t.addr.clone()).collect::<Vec<_>>());
    let next_tx = Arc::new(AtomicU64::new(0));
    let killed_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let tally: Arc<Mutex<Tally>> = Arc::default();
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        workers.push(tokio::spawn(worker(
            client.clone(),
            tc_addrs.clone(),
            victim.clone(),
            next_tx.clone(),
            killed_at.clone(),
            stop.clone(),
            tally.clone(),
        )));
    }
    println!("  phase 1: {WORKERS} workers sending transactions for {PHASE:?}");
    tokio::time::sleep(PHASE).await;

    println!(
        "  phase 2: killing {} ({victim}) under load",
        tcs[VICTIM].id
    );
    let victim_key = tcs[VICTIM].addr.clone();
    let kill_time = Instant::now();
    if let Ok(mut k) = killed_at.lock() {
        *k = Some(kill_time);
    }
    tcs[VICTIM].server.kill();
    let mut left_alive_after = None;
    while kill_time.elapsed() < Duration::from_secs(2) {
        if !client
            .alive()
            .endpoints()
            .iter()
            .any(|e| e.instance.to_string() == victim_key)
        {
            left_alive_after = Some(kill_time.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(PHASE.saturating_sub(kill_time.elapsed())).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.await;
    }
    let stats = client.stats();

    // The registry catches up: drop the dead TC from the grouplist file.
    let live: Vec<&str> = tcs
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != VICTIM)
        .map(|(_, t)| t.addr.as_str())
        .collect();
    write_registry_file(&file, &live)
        .map_err(|e| format!("cannot rewrite {}: {e}", file.display()))?;
    let edit = Instant::now();
    let mut followed_after = None;
    while edit.elapsed() < Duration::from_secs(3) {
        if client.endpoints().len() == TCS - 1 {
            followed_after = Some(edit.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let t = match Arc::try_unwrap(tally) {
        Ok(m) => m.into_inner().unwrap_or_else(|p| p.into_inner()),
        Err(shared) => std::mem::take(&mut *shared.lock().unwrap_or_else(|p| p.into_inner())),
    };
    println!();
    println!(
        "  {:<6} {:<26} {:>16} {:>16}",
        "TC", "address", "answered before", "answered after"
    );
    println!("  {}", "-".repeat(67));
    for (i, tc) in tcs.iter().enumerate() {
        let state = if i == VICTIM { " (killed)" } else { "" };
        println!(
            "  {:<6} {:<26} {:>16} {:>16}",
            tc.id,
            format!("{}{state}", tc.addr),
            t.before.get(&tc.addr).copied().unwrap_or(0),
            t.after.get(&tc.addr).copied().unwrap_or(0),
        );
    }
    println!("  {}", "-".repeat(67));
    let total_before: u64 = t.before.values().sum();
    let total_after: u64 = t.after.values().sum();
    println!("  {:<33} {:>16} {:>16}", "total", total_before, total_after);
    println!();
    println!(
        "  XID routing before the kill: {} of {} calls answered by the TC named in their XID",
        t.xid_hits_before, t.xid_calls_before
    );
    let moved: Vec<String> = t
        .victim_xid_after
        .iter()
        .map(|(tc, n)| format!("{n} by {tc}"))
        .collect();
    println!(
        "  after the kill, XIDs naming {}: {}",
        tcs[VICTIM].id,
        if moved.is_empty() {
            "none".to_string()
        } else {
            moved.join(", ")
        }
    );
    match left_alive_after {
        Some(d) => println!(
            "  {} left the alive set {:.1} ms after the kill",
            tcs[VICTIM].id,
            d.as_secs_f64() * 1e3
        ),
        None => println!(
            "  {} was still in the alive set 2 s after the kill",
            tcs[VICTIM].id
        ),
    }
    println!(
        "  calls in flight on {} when it died (failed: \"may have been delivered\"): {}",
        tcs[VICTIM].id, t.maybe_delivered_on_victim
    );
    println!(
        "  calls retried on another TC because they were not yet written: {}",
        stats.retries
    );
    println!(
        "  reconnect attempts to the dead TC that failed (jittered backoff): {}",
        stats.connect_failures
    );
    match followed_after {
        Some(d) => println!(
            "  registry file edited to drop {}: client followed in {:.0} ms",
            tcs[VICTIM].id,
            d.as_secs_f64() * 1e3
        ),
        None => println!(
            "  registry file edited, but the client still follows {} endpoints",
            client.endpoints().len()
        ),
    }
    let ok = t.other_failures.is_empty() && left_alive_after.is_some() && total_after > 0;
    println!(
        "  calls that failed on live TCs: {}  => {}",
        t.other_failures.len(),
        if ok { "OK" } else { "FAILED" }
    );
    for f in t.other_failures.iter().take(5) {
        println!("    {f}");
    }
    client.shutdown(Duration::from_secs(2)).await;
    for tc in tcs {
        tc.server.shutdown(Duration::from_millis(200)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ok)
}

fn main() -> ExitCode {
    let Args {} = Args::parse();
    init_logging("error");
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("demo: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("demo: {e}");
            ExitCode::FAILURE
        }
    }
}
