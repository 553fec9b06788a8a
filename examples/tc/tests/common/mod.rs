//! Shared helpers for the tests that run the example programs as child processes.

#![allow(dead_code)] // each test binary uses its own subset

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use meshline::Instance;
use meshline::rpc::{RegisterTmRequest, SeataRegistration};

/// A `tc-server` child process, killed (SIGKILL) and reaped on drop, so a failing test
/// leaks no servers.
pub struct TcProcess {
    /// `None` once killed or taken.
    pub child: Option<Child>,
    /// Where it listens, from its first stdout line.
    pub addr: SocketAddr,
}

impl TcProcess {
    /// Starts `tc-server --id <id> --port <port>` (and `--config <config>` when given)
    /// and reads its banner, `tc-server <id> listening on <ip:port>`.
    pub fn start(id: &str, port: u16, config: Option<&Path>) -> TcProcess {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tc-server"));
        cmd.args(["--id", id, "--port", &port.to_string()]);
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        let mut child = cmd
            .env("MESHLINE_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn tc-server");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read tc-server banner");
        let prefix = format!("tc-server {id} listening on ");
        let addr = line
            .trim()
            .strip_prefix(&prefix)
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("unexpected tc-server banner `{line}`"));
        TcProcess {
            child: Some(child),
            addr,
        }
    }

    /// The registry instance of this TC.
    pub fn instance(&self) -> Instance {
        Instance::new("127.0.0.1", self.addr.port()).unwrap()
    }

    /// Sends it `sig` (`-STOP`, `-CONT`...) with kill(1).
    pub fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let out = Command::new("kill")
            .args([sig, &pid])
            .output()
            .expect("kill(1)");
        assert!(out.status.success(), "kill {sig} {pid}: {out:?}");
    }

    /// Writes a Seata client config at `dir/name` that maps `default_tx_group` to the
    /// cluster `default` listing this TC alone, as a user's client file does; returns
    /// its path.
    pub fn write_client_config(&self, dir: &Path, name: &str) -> PathBuf {
        let config = dir.join(name);
        std::fs::write(
            &config,
            format!(
                "service.vgroupMapping.default_tx_group=default\nservice.default.grouplist={}\n",
                self.addr
            ),
        )
        .unwrap();
        config
    }

    /// SIGKILL: no chance to close anything gracefully.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for TcProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Takes `child`'s piped stdout and sends its lines on the returned channel from a
/// thread of their own, so a test can wait for a line with a timeout.
pub fn stdout_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().expect("stdout piped");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    lines
}

/// RegisterTM as the tests' TM sends it, with a short handshake timeout.
pub fn seata_tm() -> SeataRegistration {
    SeataRegistration::tm(RegisterTmRequest {
        version: "2.3.0".into(),
        application_id: "test-app".into(),
        transaction_service_group: "default_tx_group".into(),
        extra_data: None,
    })
    .with_timeout(Duration::from_secs(2))
}

/// The callers of a load test: tasks that each keep calling until [`Callers::stop`].
pub struct Callers {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Callers {
    /// Starts `n` callers: caller `c` runs `caller(c, stop)`, which calls until `stop`
    /// is set.
    pub fn start<F>(n: usize, caller: impl Fn(usize, Arc<AtomicBool>) -> F) -> Callers
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..n)
            .map(|c| tokio::spawn(caller(c, stop.clone())))
            .collect();
        Callers { stop, tasks }
    }

    /// Tells every caller to stop and waits for each, each given `within` to end the
    /// call it has in flight.
    pub async fn stop(self, within: Duration) {
        self.stop.store(true, Ordering::Relaxed);
        for c in self.tasks {
            tokio::time::timeout(within, c)
                .await
                .expect("a caller hung")
                .expect("caller");
        }
    }
}

/// The load-aware balancers, plain and in their `xid:` form (an XID's own TC first, the
/// load-aware pick for the rest): the ones the fault tests (a slow, lossy or sick TC)
/// hold to keep calls off the TC at fault.
pub const LOAD_AWARE: [&str; 6] = [
    "P2C",
    "LeastActiveLoadBalance",
    "BoundedLoad",
    "xid:P2C",
    "xid:LeastActiveLoadBalance",
    "xid:BoundedLoad",
];

#[allow(unused_imports)] // each test binary uses its own subset
pub use meshline_testkit::until;
