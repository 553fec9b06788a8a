//! Server memory per connection: what a meshline `Server` costs for connections that
//! are open but idle, and for connections that announced a large frame and then
//! stalled.
//!
//! ```text
//! cargo run --release -p meshline-rpc-client --example conn_memory
//! cargo run --release -p meshline-rpc-client --example conn_memory -- --idle 1000 --stalled 100 --frame-bytes 8388608
//! ```
//!
//! Flags: `--idle N` (default 1000), `--stalled N` (default 1000), `--frame-bytes N`
//! (the length the stalled connections announce, default 8388608 = 8 MiB, Seata's and
//! the server's default frame limit), `--rss-limit-mib N` (stop opening stalled
//! connections once the process has grown this much, default 16384).
//!
//! # Why
//!
//! A TC or a gateway keeps thousands of long connections, most of them quiet. What
//! each costs while idle decides how many one process can hold. And a peer (buggy,
//! slow, or hostile) can send a valid 16-byte header announcing a frame of the maximum
//! size and then nothing more: if the server reserves the announced length up front,
//! every such connection pins up to the frame limit (8 MiB) of memory, and a thousand
//! of them pin ~8 GiB. This program measures both in one process.
//!
//! # What it does
//!
//! One process, a multi-thread tokio runtime with 2 workers. It starts a `Server`
//! (echo handler, `ServerConfig::default()` with `read_idle: None` so quiet
//! connections are kept), takes a baseline of the process's resident memory (VmRSS in
//! `/proc/self/status`), then:
//!
//! - **phase A**: opens `--idle` plain TCP connections that send nothing, waits until
//!   the server holds them all plus 1 s, and measures again;
//! - **phase B**: opens `--stalled` more that each write one valid Seata v1 header (magic
//!   `da da`, version 1, full length `--frame-bytes`, head length 16, type 0 = request,
//!   codec 1, compressor 0, a request id) and then stall with the socket open; waits
//!   until the server holds them all plus 2 s, and measures again.
//!
//! The client sockets are raw `tokio::net::TcpStream`s kept in a `Vec` in the same
//! process: their user-space cost is a few hundred bytes each (the `TcpStream` and its
//! registration with the tokio driver), so nearly all of the increase is the server's.
//! Kernel socket buffers are not in RSS at all. The virtual size (VmSize) is shown too:
//! a reservation that is never written shows there before it shows in RSS.
//!
//! The process needs two descriptors per connection (both ends are here), so it raises
//! the soft `RLIMIT_NOFILE` to the hard limit at start and says so if that is not
//! enough.

use std::time::{Duration, Instant};

use meshline_rpc_client::{InboundRequest, Server, ServerConfig};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

// -------------------------------------------------------------------- flags --

#[derive(Debug, Clone, clap::Parser)]
#[command(about = "Server memory with idle and stalled connections")]
struct Args {
    /// Connections that send nothing.
    #[arg(long, default_value_t = 1000)]
    idle: usize,
    /// Connections that announce a frame and stall.
    #[arg(long, default_value_t = 1000)]
    stalled: usize,
    /// The announced frame length (header included; an i32 on the wire).
    #[arg(long, default_value_t = 8 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(16..=i32::MAX as u64))]
    frame_bytes: u64,
    /// Stop a phase when the process's resident memory passes this.
    #[arg(long, default_value_t = 16 * 1024)]
    rss_limit_mib: u64,
}

fn parse_args() -> Args {
    <Args as clap::Parser>::parse()
}

// ------------------------------------------------------------------- memory --

/// Resident and virtual size of this process, in KiB.
#[derive(Debug, Clone, Copy)]
struct Mem {
    rss_kib: u64,
    virt_kib: u64,
}

/// Reads `/proc/self/status` through a descriptor opened at start, so a measurement
/// still works when the connections have used up every other descriptor.
struct MemReader {
    file: std::fs::File,
}

impl MemReader {
    fn open() -> MemReader {
        MemReader {
            file: std::fs::File::open("/proc/self/status").expect("open /proc/self/status"),
        }
    }

    fn read(&mut self) -> Mem {
        use std::io::{Read, Seek, SeekFrom};
        let mut status = String::new();
        self.file
            .seek(SeekFrom::Start(0))
            .and_then(|_| self.file.read_to_string(&mut status))
            .expect("read /proc/self/status");
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or_else(|| panic!("no {name} in /proc/self/status"))
        };
        Mem {
            rss_kib: field("VmRSS:"),
            virt_kib: field("VmSize:"),
        }
    }
}

/// Raises the soft descriptor limit to the hard one; says whether `need` fits.
fn raise_nofile(need: u64) {
    match rlimit::Resource::NOFILE.get() {
        Ok((soft, hard)) => {
            if soft < hard {
                match rlimit::Resource::NOFILE.set(hard, hard) {
                    Ok(()) => println!("RLIMIT_NOFILE: soft limit raised from {soft} to {hard}"),
                    Err(e) => println!(
                        "RLIMIT_NOFILE: could not raise the soft limit from {soft} to {hard}: {e}"
                    ),
                }
            } else {
                println!("RLIMIT_NOFILE: soft limit already at the hard limit ({hard})");
            }
            let (soft, hard) = rlimit::Resource::NOFILE.get().unwrap_or((soft, hard));
            if soft < need {
                println!(
                    "WARNING: this run needs about {need} file descriptors but the limit is {soft} (hard {hard}); \
                     raise it (e.g. `ulimit -n {need}` as root) or pass smaller --idle / --stalled. \
                     Connects past the limit will fail and the phase will stop there."
                );
            }
        }
        Err(e) => println!(
            "RLIMIT_NOFILE: cannot read the limit ({e}); this run needs about {need} file descriptors"
        ),
    }
}

// ----------------------------------------------------------------- phases --

/// A valid Seata v1 fixed header announcing a `full_len`-byte request frame with no
/// head map.
fn stalled_header(full_len: u64, request_id: u32) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[0] = 0xda;
    h[1] = 0xda;
    h[2] = 0x01; // version
    h[3..7].copy_from_slice(&(full_len as i32).to_be_bytes()); // full length
    h[7..9].copy_from_slice(&16i16.to_be_bytes()); // head length: the fixed header only
    h[9] = 0; // message type: request
    h[10] = 1; // codec: Seata
    h[11] = 0; // compressor: none
    h[12..16].copy_from_slice(&request_id.to_be_bytes());
    h
}

/// Waits until the server holds `n` connections (or 10 s pass); returns what it holds.
async fn wait_server_holds(server: &Server, n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let held = server.connections().len();
        if held >= n || Instant::now() >= deadline {
            return held;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

struct Phase {
    name: &'static str,
    /// Connections asked for.
    wanted: usize,
    /// Connections opened (and, for phase B, header written).
    opened: usize,
    /// Connections the server held at the measurement.
    held: usize,
    before: Mem,
    after: Mem,
    note: Option<String>,
}

impl Phase {
    fn rss_mib(&self) -> f64 {
        self.after.rss_kib.saturating_sub(self.before.rss_kib) as f64 / 1024.0
    }
    fn virt_mib(&self) -> f64 {
        self.after.virt_kib.saturating_sub(self.before.virt_kib) as f64 / 1024.0
    }
    fn kib_per_conn(&self) -> f64 {
        if self.opened == 0 {
            return 0.0;
        }
        self.after.rss_kib.saturating_sub(self.before.rss_kib) as f64 / self.opened as f64
    }
}

async fn run(args: Args) -> Vec<Phase> {
    let mut meter = MemReader::open();
    let config = ServerConfig {
        read_idle: None,
        ..ServerConfig::default()
    };
    let server = Server::bind_with(
        "127.0.0.1:0".parse().expect("addr"),
        config,
        |req: InboundRequest| std::future::ready(Some(req.payload)),
    )
    .await
    .expect("bind server");
    let addr = server.local_addr();
    // Let the runtime and the allocator settle before the baseline.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let baseline = meter.read();
    println!(
        "baseline: RSS {:.1} MiB, virtual {:.1} MiB (server on {addr})",
        baseline.rss_kib as f64 / 1024.0,
        baseline.virt_kib as f64 / 1024.0
    );

    // Phase A: idle connections.
    let mut idle: Vec<TcpStream> = Vec::with_capacity(args.idle);
    let mut note_a = None;
    for i in 0..args.idle {
        match TcpStream::connect(addr).await {
            Ok(s) => idle.push(s),
            Err(e) => {
                let msg = format!(
                    "idle connect #{} failed: {e}; stopped at {}",
                    i + 1,
                    idle.len()
                );
                println!("{msg}");
                note_a = Some(msg);
                break;
            }
        }
    }
    let held_a = wait_server_holds(&server, idle.len()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_a = meter.read();
    let phase_a = Phase {
        name: "A: idle",
        wanted: args.idle,
        opened: idle.len(),
        held: held_a,
        before: baseline,
        after: after_a,
        note: note_a,
    };
    println!(
        "phase A: {} idle connections open, server holds {held_a}; RSS +{:.1} MiB",
        idle.len(),
        phase_a.rss_mib()
    );

    // Phase B: connections that announce a large frame and stall.
    let limit_kib = args.rss_limit_mib * 1024;
    let mut stalled: Vec<TcpStream> = Vec::with_capacity(args.stalled);
    let mut note_b = None;
    for i in 0..args.stalled {
        if i % 50 == 0 && i > 0 {
            let now = meter.read();
            if now.rss_kib.saturating_sub(baseline.rss_kib) > limit_kib {
                let msg = format!(
                    "RSS grew past --rss-limit-mib {} after {i} stalled connections: stopped opening more",
                    args.rss_limit_mib
                );
                println!("{msg}");
                note_b = Some(msg);
                break;
            }
        }
        let mut s = match TcpStream::connect(addr).await {
            Ok(s) => s,
            Err(e) => {
                let msg = format!("stalled connect #{} failed: {e}; stopped at {i}", i + 1);
                println!("{msg}");
                note_b = Some(msg);
                break;
            }
        };
        if let Err(e) = s
            .write_all(&stalled_header(args.frame_bytes, i as u32 + 1))
            .await
        {
            let msg = format!("header write #{} failed: {e}; stopped at {i}", i + 1);
            println!("{msg}");
            note_b = Some(msg);
            break;
        }
        stalled.push(s);
    }
    wait_server_holds(&server, idle.len() + stalled.len()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after_b = meter.read();
    // Counted after the wait: connections the server closed (a refused header, say)
    // are not in it.
    let held_b = server.connections().len();
    let phase_b = Phase {
        name: "B: header, then stall",
        wanted: args.stalled,
        opened: stalled.len(),
        held: held_b.saturating_sub(idle.len()),
        before: after_a,
        after: after_b,
        note: note_b,
    };
    println!(
        "phase B: {} stalled connections open (each announced {} bytes), server holds {held_b} in all; RSS +{:.1} MiB",
        stalled.len(),
        args.frame_bytes,
        phase_b.rss_mib()
    );
    drop(stalled);
    drop(idle);
    vec![phase_a, phase_b]
}

fn main() {
    let args = parse_args();
    // Both ends of every connection live in this process, plus a few for the runtime.
    raise_nofile(2 * (args.idle + args.stalled) as u64 + 100);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let phases = rt.block_on(run(args.clone()));

    println!(
        "\n## Server memory per connection (stalled connections announce {} bytes)\n",
        args.frame_bytes
    );
    println!(
        "| {:<22} | {:>11} | {:>12} | {:>16} | {:>14} | {:>20} |",
        "phase",
        "connections",
        "server holds",
        "RSS increase MiB",
        "KiB per conn",
        "virtual increase MiB"
    );
    println!(
        "|{:-<24}|{:->13}|{:->14}|{:->18}|{:->16}|{:->22}|",
        "", "", "", "", "", ""
    );
    for p in &phases {
        println!(
            "| {:<22} | {:>11} | {:>12} | {:>16.1} | {:>14.1} | {:>20.1} |",
            p.name,
            p.opened,
            p.held,
            p.rss_mib(),
            p.kib_per_conn(),
            p.virt_mib()
        );
    }
    println!();
    for p in &phases {
        println!(
            "{}: {:.1} MiB per thousand connections (RSS){}",
            p.name,
            p.kib_per_conn() * 1000.0 / 1024.0,
            if p.opened < p.wanted {
                format!(
                    "; only {} of {} opened: {}",
                    p.opened,
                    p.wanted,
                    p.note.as_deref().unwrap_or("")
                )
            } else {
                String::new()
            }
        );
    }
    println!(
        "(client sockets are raw tokio TcpStreams in this process; their user-space memory is a few \
         hundred bytes each, negligible next to the server's, and kernel socket buffers are not in RSS)"
    );
    rt.shutdown_timeout(Duration::from_secs(1));
}
