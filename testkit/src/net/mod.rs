//! Test networks: hosts in their own network namespaces, links that can be cut without
//! a reset, and a fault proxy for delay, jitter, loss and bandwidth.
//!
//! Every fault test on one loopback interface sees a dead peer answer with a reset at
//! once. Production sees hosts vanish without a word, links that drop everything, slow
//! and lossy paths. This module builds those, on this machine:
//!
//! - A [`Host`] is a Linux network namespace joined to the test's own namespace by a
//!   veth pair: the host is `10.P.N.2`, the test's side `10.P.N.1` (a /30 each; `P`
//!   from the process id, `N` a counter). A server binds inside it with
//!   [`Host::bind_tcp`] (the test process enters the namespace on one thread just to
//!   create the socket, which stays in that namespace) or runs there as a child process
//!   with [`Host::command`].
//! - [`Host::cut`] blackholes the host: an nftables table inside its namespace drops
//!   every packet in and out. No FIN, no RST: connections stay open and silent, which
//!   is what a vanished host or a cut link looks like. [`Host::restore`] removes it.
//!   [`Host::link_down`] / [`Host::link_up`] take the veth down instead.
//! - [`FaultProxy`] (`proxy`) sits between a client and a server and adds delay,
//!   jitter, loss (as the retransmission stall TCP turns it into), a bandwidth cap, or a
//!   blackhole, changeable while it runs. The kernel here has no `netem` qdisc.
//! - [`Host::runtime`] runs a client inside a host (a tokio runtime whose threads live
//!   in its namespace), so one client can be partitioned from every server while the
//!   servers keep their quorum.
//!
//! Namespaces are removed when their [`Host`] drops, panics included, and any process
//! still inside one is killed first; ones left behind by a test process that was killed
//! are removed, with the servers still running in them, by the next process that
//! creates a host (their names carry the creating process's id).
//!
//! It needs root, `ip` (iproute2) and `nft` (nftables); [`available`] says whether
//! they are here and why not. Tests call [`skip_reason`] and return early with the
//! reason printed when it is `Some`: only where those are missing, and never under
//! `CI=true`, where a missing tool fails the test with the reason (a fault test that
//! did not run must not count as passed). `scripts/test.sh` installs iproute2 and
//! nftables and CI runs as root, so there they run.

mod proxy;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

pub use proxy::{FaultProxy, Faults, RETRANSMIT};

/// Why the test network cannot be built here, or `None` when it can.
///
/// # Panics
///
/// Under `CI=true` when it cannot be built, naming what is missing: there a test that
/// returned early would count as passed without having run.
pub fn skip_reason() -> Option<String> {
    let why = available().err()?;
    cannot_run(&why);
    Some(why)
}

/// A test is about to return early because `why` (a tool or server it needs is
/// missing): prints so, and under `CI=true` fails instead, naming `why`, so that a test
/// that did not run is never counted as passed there.
pub fn cannot_run(why: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("this test cannot run here and CI=true: {why}");
    }
    eprintln!("skipped: {why}");
}

/// Whether this process can build test networks (root, `ip`, `nft`).
pub fn available() -> Result<(), String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Err("test networks need root (network namespaces, nftables)".into());
    }
    for (tool, package) in [("ip", "iproute2"), ("nft", "nftables")] {
        let found = Command::new(tool)
            .arg("-V")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !found {
            return Err(format!(
                "test networks need `{tool}` (apt-get install {package}; scripts/install-test-deps.sh does)"
            ));
        }
    }
    Ok(())
}

/// Runs `cmd`, failing with its output when it fails.
fn run(cmd: &mut Command) -> Result<Output, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(out)
}

fn ip(args: &[&str]) -> Result<Output, String> {
    run(Command::new("ip").args(args))
}

const PREFIX: &str = "meshline-";

/// Removes namespaces a killed test process left behind (their creator is gone).
fn remove_stale() {
    static ONCE: Mutex<bool> = Mutex::new(false);
    let mut done = ONCE.lock().unwrap_or_else(|p| p.into_inner());
    if *done {
        return;
    }
    *done = true;
    let Ok(out) = ip(&["netns", "list"]) else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid: Option<u32> = rest.split('-').next().and_then(|p| p.parse().ok());
        if let Some(pid) = pid
            && !std::path::Path::new(&format!("/proc/{pid}")).exists()
        {
            // A server it started there may have outlived it: killed with the namespace.
            kill_processes_in(name);
            let _ = ip(&["netns", "delete", name]);
        }
    }
}

/// `SIGKILL`s every process still inside namespace `name` (`ip netns pids`) and waits
/// (up to 2 s) until none is left: a namespace whose name is deleted lives on while a
/// process is in it, and so would a server started there whose test died.
fn kill_processes_in(name: &str) {
    let pids = |name: &str| -> Vec<i32> {
        ip(&["netns", "pids", name])
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let left = pids(name);
        if left.is_empty() || std::time::Instant::now() >= deadline {
            return;
        }
        for pid in left {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A host: a network namespace with one address, reachable from the test's namespace
/// over a veth pair.
#[derive(Debug)]
pub struct Host {
    name: String,
    veth_outside: String,
    veth_inside: String,
    addr: Ipv4Addr,
    gateway: Ipv4Addr,
}

impl Host {
    /// A new host. Fails (with the command's output) when the namespace or the link
    /// cannot be made; check [`skip_reason`] first.
    pub fn new() -> Result<Host, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        available()?;
        remove_stale();
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        if n >= 64 * 200 {
            return Err("too many test hosts in one process".into());
        }
        let name = format!("{PREFIX}{pid}-{n}");
        // /30 subnets: 64 per /24 of 10.P.Q.0.
        let p = 100 + (pid % 100) as u8;
        let q = (n / 64) as u8;
        let base = ((n % 64) * 4) as u8;
        let gateway = Ipv4Addr::new(10, p, q, base + 1);
        let addr = Ipv4Addr::new(10, p, q, base + 2);
        let tag = format!("{}x{n}", pid % 100_000);
        let host = Host {
            veth_outside: format!("mlo{tag}"),
            veth_inside: format!("mli{tag}"),
            name,
            addr,
            gateway,
        };
        host.create()?;
        Ok(host)
    }

    fn create(&self) -> Result<(), String> {
        let ns = self.name.as_str();
        ip(&["netns", "add", ns])?;
        let setup = || -> Result<(), String> {
            ip(&[
                "link",
                "add",
                &self.veth_outside,
                "type",
                "veth",
                "peer",
                "name",
                &self.veth_inside,
            ])?;
            ip(&["link", "set", &self.veth_inside, "netns", ns])?;
            ip(&[
                "addr",
                "add",
                &format!("{}/30", self.gateway),
                "dev",
                &self.veth_outside,
            ])?;
            ip(&["link", "set", &self.veth_outside, "up"])?;
            self.exec(&[
                "ip",
                "addr",
                "add",
                &format!("{}/30", self.addr),
                "dev",
                &self.veth_inside,
            ])?;
            self.exec(&["ip", "link", "set", &self.veth_inside, "up"])?;
            self.exec(&["ip", "link", "set", "lo", "up"])?;
            self.exec(&[
                "ip",
                "route",
                "add",
                "default",
                "via",
                &self.gateway.to_string(),
            ])?;
            Ok(())
        };
        if let Err(e) = setup() {
            self.destroy();
            return Err(e);
        }
        Ok(())
    }

    /// Runs `argv` inside the namespace, failing with its output.
    pub fn exec(&self, argv: &[&str]) -> Result<Output, String> {
        run(Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(argv))
    }

    /// A command that runs `program` inside the namespace (`ip netns exec`): add
    /// arguments and spawn it.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host's address.
    pub fn ip(&self) -> IpAddr {
        IpAddr::V4(self.addr)
    }

    /// The test namespace's address on this host's link (what the host sees the test
    /// process as).
    pub fn gateway(&self) -> IpAddr {
        IpAddr::V4(self.gateway)
    }

    /// A TCP listener on `port` (0: any) at the host's address, inside its namespace:
    /// a server in the test process that lives on this host. Non-blocking, ready for
    /// `tokio::net::TcpListener::from_std`.
    pub fn bind_tcp(&self, port: u16) -> Result<std::net::TcpListener, String> {
        let path = format!("/var/run/netns/{}", self.name);
        let addr = SocketAddr::new(self.ip(), port);
        // A thread of its own enters the namespace (a namespace is per thread) and
        // creates the socket, which then belongs to that namespace wherever it is used.
        std::thread::spawn(move || -> Result<std::net::TcpListener, String> {
            let f = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
            nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| format!("setns {path}: {e}"))?;
            let l = std::net::TcpListener::bind(addr).map_err(|e| format!("bind {addr}: {e}"))?;
            l.set_nonblocking(true).map_err(|e| e.to_string())?;
            Ok(l)
        })
        .join()
        .map_err(|_| "the namespace thread panicked".to_string())?
    }

    /// Blackholes the host: every packet in or out of its namespace is dropped (an
    /// nftables table with drop policies). Connections stay open; nothing answers,
    /// nothing resets.
    pub fn cut(&self) -> Result<(), String> {
        self.nft(
            "table inet meshline_cut {\n\
             chain in { type filter hook input priority -300; policy drop; }\n\
             chain out { type filter hook output priority -300; policy drop; }\n\
             }\n",
        )
    }

    /// Loads nftables `rules` inside the namespace (`nft -f -`).
    fn nft(&self, rules: &str) -> Result<(), String> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, "nft", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| format!("nft: {e}"))?;
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().ok_or("nft: no stdin")?;
            stdin
                .write_all(rules.as_bytes())
                .map_err(|e| format!("nft: {e}"))?;
        }
        let out = child.wait_with_output().map_err(|e| format!("nft: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "nft failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    }

    /// Real packet loss: each packet in or out of the namespace is dropped with
    /// probability `percent` / 100 (an nftables `numgen random` rule, counted), so TCP
    /// connections through the host lose segments and ACKs and retransmit them, as on a
    /// lossy path. `percent` 0 removes the rule. See [`dropped`](Self::dropped).
    pub fn drop_randomly(&self, percent: u32) -> Result<(), String> {
        if percent > 100 {
            return Err(format!("{percent} % is not a loss rate"));
        }
        let _ = self.exec(&["nft", "delete", "table", "inet", "meshline_loss"]);
        if percent == 0 {
            return Ok(());
        }
        self.nft(&format!(
            "table inet meshline_loss {{\n\
             chain in {{ type filter hook input priority -200; numgen random mod 100 < {percent} counter drop; }}\n\
             chain out {{ type filter hook output priority -200; numgen random mod 100 < {percent} counter drop; }}\n\
             }}\n"
        ))
    }

    /// Packets dropped by [`drop_randomly`](Self::drop_randomly)'s rule so far (0 without
    /// the rule).
    pub fn dropped(&self) -> u64 {
        let Ok(out) = self.exec(&["nft", "list", "table", "inet", "meshline_loss"]) else {
            return 0;
        };
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.split("packets ")
            .skip(1)
            .filter_map(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    }

    /// Sets the minimum TCP retransmission timeout of this host's link, both ways (the
    /// `rto_min` of the link's routes, in the namespace and in the test's). On a veth
    /// the round trip is microseconds, so a lost segment is resent after Linux's 200 ms
    /// minimum; a path with a longer round trip (delay from a [`FaultProxy`]) resends
    /// later: about its round trip plus 200 ms.
    pub fn set_rto_min(&self, rto: std::time::Duration) -> Result<(), String> {
        let o = self.addr.octets();
        let net = format!("{}.{}.{}.{}/30", o[0], o[1], o[2], o[3] & !3);
        let rto = format!("{}ms", rto.as_millis());
        self.exec(&[
            "ip",
            "route",
            "replace",
            &net,
            "dev",
            &self.veth_inside,
            "src",
            &self.addr.to_string(),
            "rto_min",
            &rto,
        ])?;
        ip(&[
            "route",
            "replace",
            &net,
            "dev",
            &self.veth_outside,
            "src",
            &self.gateway.to_string(),
            "rto_min",
            &rto,
        ])
        .map(drop)
    }

    /// Ends a [`cut`](Self::cut): packets flow again (retransmissions deliver what was
    /// held).
    pub fn restore(&self) -> Result<(), String> {
        self.exec(&["nft", "delete", "table", "inet", "meshline_cut"])
            .map(drop)
    }

    /// Lets this host reach the other hosts of the process (and they it): IPv4
    /// forwarding is switched on for packets arriving from this host's link only
    /// (`net.ipv4.conf.<link>.forwarding`; the machine-wide setting is left alone, and
    /// the setting goes with the link). For servers that talk to each other, such as
    /// the members of a cluster: call it on each host. A [`cut`](Self::cut) host stays
    /// cut from the others too.
    pub fn forward(&self) -> Result<(), String> {
        let path = format!("/proc/sys/net/ipv4/conf/{}/forwarding", self.veth_outside);
        std::fs::write(&path, "1").map_err(|e| format!("{path}: {e}"))
    }

    /// The peers of this host's established TCP connections whose remote port is
    /// `port` (`ss` inside the namespace): which server a client run on this host
    /// ([`runtime`](Self::runtime)) is connected to.
    pub fn peers_on(&self, port: u16) -> Result<Vec<SocketAddr>, String> {
        Ok(self
            .established()?
            .into_iter()
            .filter_map(|(_, remote)| (remote.port() == port).then_some(remote))
            .collect())
    }

    /// The peers of this host's established TCP connections to its local port `port`:
    /// the clients a server run on this host has, as this host's kernel sees them (a
    /// connection whose client has gone, its FIN lost, stays here until the FIN comes).
    pub fn clients_on(&self, port: u16) -> Result<Vec<SocketAddr>, String> {
        Ok(self
            .established()?
            .into_iter()
            .filter_map(|(local, remote)| (local.port() == port).then_some(remote))
            .collect())
    }

    /// This host's established TCP connections, (local, remote) (`ss` inside the
    /// namespace).
    fn established(&self) -> Result<Vec<(SocketAddr, SocketAddr)>, String> {
        let out = self.exec(&["ss", "-Htn", "state", "established"])?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let mut ends = l
                    .split_whitespace()
                    .filter_map(|f| f.parse::<SocketAddr>().ok());
                Some((ends.next()?, ends.next()?))
            })
            .collect())
    }

    /// Takes the link down (the test's side of the veth).
    pub fn link_down(&self) -> Result<(), String> {
        ip(&["link", "set", &self.veth_outside, "down"]).map(drop)
    }

    /// Brings the link up again.
    pub fn link_up(&self) -> Result<(), String> {
        ip(&["link", "set", &self.veth_outside, "up"]).map(drop)
    }

    /// A tokio runtime (multi-thread, `workers` workers, I/O and time enabled) whose
    /// every thread, the blocking pool's included, lives in this host's namespace: the
    /// sockets its tasks open belong to the host. A client run on it (spawn its
    /// `connect` there: `spawn`, not `block_on`, which runs the future on the calling
    /// thread) connects from the host's address, so a [`cut`](Self::cut) of
    /// this host partitions that client alone while the servers and other clients go
    /// on. Reach other hosts with [`forward`](Self::forward) on both. It may be dropped
    /// anywhere, async code and a panicking test included: its tasks are stopped
    /// without being waited for.
    pub fn runtime(&self, workers: usize) -> Result<HostRuntime, String> {
        let path = format!("/var/run/netns/{}", self.name);
        let file =
            std::sync::Arc::new(std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?);
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers.max(1))
            .thread_name(format!("{}-rt", self.name))
            .enable_all()
            .on_thread_start(move || {
                // A thread that cannot enter the namespace must not run the host's
                // tasks from the test's namespace unnoticed.
                if let Err(e) = nix::sched::setns(&*file, nix::sched::CloneFlags::CLONE_NEWNET) {
                    panic!("setns into {path}: {e}");
                }
            })
            .build()
            .map(|rt| HostRuntime(Some(rt)))
            .map_err(|e| format!("a runtime in {}: {e}", self.name))
    }

    fn destroy(&self) {
        // A process still inside (a server whose own clean-up did not run) would keep
        // the namespace alive after its name is gone.
        kill_processes_in(&self.name);
        // Deleting the namespace deletes the veth pair with it.
        let _ = ip(&["netns", "delete", &self.name]);
        let _ = ip(&["link", "delete", &self.veth_outside]);
    }
}

/// A tokio runtime whose threads live in a host's namespace ([`Host::runtime`]); use
/// it as a [`tokio::runtime::Runtime`]. Dropping it shuts it down in the background
/// (a plain runtime dropped inside async code panics, and in a panicking test that
/// aborts the process before the servers' clean-up runs).
#[derive(Debug)]
pub struct HostRuntime(Option<tokio::runtime::Runtime>);

impl std::ops::Deref for HostRuntime {
    type Target = tokio::runtime::Runtime;

    fn deref(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("the runtime is there until dropped")
    }
}

impl Drop for HostRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.destroy();
    }
}

/// The names of the namespaces this process made and still has (for tests that check
/// nothing is left behind).
pub fn namespaces_of_this_process() -> Vec<String> {
    let prefix = format!("{PREFIX}{}-", std::process::id());
    ip(&["netns", "list"])
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split_whitespace().next())
                .filter(|n| n.starts_with(&prefix))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}
