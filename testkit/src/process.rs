//! One server child process: spawn, readiness, SIGKILL, restart, SIGSTOP/SIGCONT.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::{Error, READY_TIMEOUT, Result, io_err};

/// A readiness probe: `Ok` once the server answers like a working server.
pub(crate) type Probe = Arc<dyn Fn() -> std::result::Result<(), String> + Send + Sync>;

/// One server running as a child process of the test.
///
/// Created by [`crate::Etcd`], [`crate::EtcdCluster`], [`crate::ZooKeeper`] and
/// [`crate::Redis`]; those wrappers hand out `&mut ServerProcess` for fault injection.
/// Dropping it kills the process (`SIGKILL`) and waits for it.
pub struct ServerProcess {
    name: String,
    dir: PathBuf,
    log: PathBuf,
    program: String,
    args: Vec<OsString>,
    probe: Probe,
    child: Option<Child>,
    paused: bool,
    /// Set when the last start was refused because the server panicked while starting.
    panicked: bool,
}

impl std::fmt::Debug for ServerProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerProcess")
            .field("name", &self.name)
            .field("dir", &self.dir)
            .field("pid", &self.pid())
            .field("paused", &self.paused)
            .finish()
    }
}

impl ServerProcess {
    pub(crate) fn new(
        name: impl Into<String>,
        dir: PathBuf,
        program: &str,
        args: Vec<OsString>,
        probe: Probe,
    ) -> Self {
        let log = dir.join("server.log");
        ServerProcess {
            name: name.into(),
            dir,
            log,
            program: program.to_string(),
            args,
            probe,
            child: None,
            paused: false,
            panicked: false,
        }
    }

    /// Spawns the process (its output appended to the log file) without waiting.
    pub(crate) fn spawn(&mut self) -> Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(io_err(format!("open {}", self.log.display())))?;
        let err = out
            .try_clone()
            .map_err(io_err(format!("clone handle of {}", self.log.display())))?;
        let mut marker = &out;
        let _ = writeln!(marker, "=== testkit: starting {} ===", self.name);
        let child = Command::new(&self.program)
            .args(&self.args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(io_err(format!("spawn {} ({})", self.name, self.program)))?;
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    /// Polls the readiness probe until `deadline`; fails at once if the process exits.
    pub(crate) fn wait_ready(&mut self, deadline: Instant) -> Result<()> {
        self.panicked = false;
        let mut next_log_check = Instant::now();
        loop {
            if let Some(child) = self.child.as_mut() {
                match child.try_wait() {
                    Ok(Some(status)) => {
                        self.child = None;
                        return Err(self.not_ready(format!("the process exited with {status}")));
                    }
                    Ok(None) => {}
                    Err(e) => return Err(self.not_ready(format!("cannot poll the process: {e}"))),
                }
            } else {
                return Err(self.not_ready("the process is not running".into()));
            }
            let probed = (self.probe)();
            // A server thread that panicked while starting can leave the process up,
            // answering, and broken: rnacos 0.8.8 races its raft auto-init against its
            // bean injection and, about one start in five, the raft apply actor panics
            // (`raftapply.rs:421`), after which every config write answers `true` and
            // is never applied. Stop such a server, so the caller starts a fresh one;
            // checked after a good probe too, since the health check passes anyway.
            if probed.is_ok() || Instant::now() >= next_log_check {
                next_log_check = Instant::now() + Duration::from_millis(500);
                if self.panicked_in_this_start() {
                    let last = match &probed {
                        Ok(()) => "ready".to_string(),
                        Err(e) => e.clone(),
                    };
                    let err = self.not_ready(format!(
                        "the server panicked while starting; last probe: {last}"
                    ));
                    self.kill();
                    self.panicked = true;
                    return Err(err);
                }
            }
            let last = match probed {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(self.not_ready(format!(
                    "no ready answer within {:?}; last probe: {last}",
                    READY_TIMEOUT
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// True when this start's part of the log (a restart appends to the same file)
    /// shows a Rust panic.
    fn panicked_in_this_start(&self) -> bool {
        let tail = self.log_tail(400);
        let this_start = tail
            .rfind("=== testkit: starting")
            .map_or(&tail[..], |i| &tail[i..]);
        this_start.contains("panicked at")
    }

    /// True when the last start was refused because the server panicked while
    /// starting (see `wait_ready`).
    pub(crate) fn panicked_while_starting(&self) -> bool {
        self.panicked
    }

    /// True when the process exited by itself (used to retry on port clashes).
    pub(crate) fn exited(&mut self) -> bool {
        match self.child.as_mut() {
            None => true,
            Some(c) => matches!(c.try_wait(), Ok(Some(_))),
        }
    }

    fn not_ready(&self, reason: String) -> Error {
        Error::NotReady {
            name: self.name.clone(),
            reason,
            log_tail: self.log_tail(40),
        }
    }

    /// Spawns the process and waits until it answers (up to [`READY_TIMEOUT`]).
    pub fn start(&mut self) -> Result<()> {
        self.spawn()?;
        self.wait_ready(Instant::now() + READY_TIMEOUT)
    }

    /// Kills the process with `SIGKILL` (no graceful shutdown) and waits for it.
    /// Does nothing when it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// Starts the server again on the same ports with the same data dir, and waits
    /// until it answers. Kills it first if it is still running.
    pub fn restart(&mut self) -> Result<()> {
        let mut last = None;
        // A start that panicked (see `wait_ready`) is tried again, a few times.
        for _ in 0..3 {
            self.kill();
            match self.start() {
                Ok(()) => return Ok(()),
                Err(e)
                    if self.child.is_none()
                        && format!("{e:?}").contains("panicked while starting") =>
                {
                    last = Some(e)
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Other("no restart attempt was made".into())))
    }

    /// Stops the process with `SIGSTOP`: it keeps its sockets but answers nothing
    /// (clients time out; ZooKeeper sessions expire after the session timeout).
    ///
    /// Returns once every thread of the process is stopped (`/proc/<pid>/task/*/stat`
    /// in state `T`, at most 2 s): the signal is asynchronous, and a thread already
    /// running could still answer a request sent just after `kill` returned.
    pub fn pause(&mut self) -> Result<()> {
        self.signal(Signal::SIGSTOP)?;
        self.paused = true;
        if let Some(pid) = self.pid() {
            let deadline = Instant::now() + Duration::from_secs(2);
            while !all_threads_stopped(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(())
    }

    /// Continues a paused process with `SIGCONT`.
    pub fn resume(&mut self) -> Result<()> {
        self.signal(Signal::SIGCONT)?;
        self.paused = false;
        Ok(())
    }

    fn signal(&self, sig: Signal) -> Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| Error::Other(format!("{} is not running", self.name)))?;
        let pid =
            i32::try_from(pid).map_err(|_| Error::Other(format!("pid {pid} out of range")))?;
        kill(Pid::from_raw(pid), sig)
            .map_err(|e| Error::Other(format!("cannot send {sig} to {}: {e}", self.name)))
    }

    /// True while the child process is alive (paused counts as alive).
    pub fn is_running(&mut self) -> bool {
        !self.exited()
    }

    /// True between [`pause`](Self::pause) and [`resume`](Self::resume).
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's working and data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file that collects the server's stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        match std::fs::read(&self.log) {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                let all: Vec<&str> = text.lines().collect();
                all[all.len().saturating_sub(lines)..].join("\n")
            }
            Err(e) => format!("(cannot read {}: {e})", self.log.display()),
        }
    }

    /// A name for messages (`etcd`, `zookeeper`, `redis`, `etcd member 1`).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// True when every thread of `pid` is stopped (state `T` or `t` in its `stat`).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.filter_map(|t| t.ok()).all(|t| {
        std::fs::read_to_string(t.path().join("stat"))
            .ok()
            // The state follows the command name, which is in parentheses.
            .and_then(|st| {
                st.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().to_string())
            })
            .is_none_or(|rest| rest.starts_with('T') || rest.starts_with('t'))
    })
}

/// Finds `program` on `PATH`, or explains how to install it.
pub(crate) fn require_binary(program: &str, install: &str) -> Result<()> {
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
        .unwrap_or(false);
    if found {
        Ok(())
    } else {
        Err(Error::MissingBinary {
            what: format!("`{program}`"),
            install: install.to_string(),
        })
    }
}

/// Requires a file (e.g. a jar) to exist, or explains how to install it.
pub(crate) fn require_file(path: &str, install: &str) -> Result<()> {
    if Path::new(path).is_file() {
        Ok(())
    } else {
        Err(Error::MissingBinary {
            what: format!("`{path}`"),
            install: install.to_string(),
        })
    }
}

/// `n` distinct free ports on 127.0.0.1 (held open together so they differ, then
/// released for the server to bind).
pub(crate) fn free_ports(n: usize) -> Result<Vec<u16>> {
    let mut listeners = Vec::with_capacity(n);
    for _ in 0..n {
        let l = TcpListener::bind("127.0.0.1:0").map_err(io_err("bind a free port"))?;
        listeners.push(l);
    }
    listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .map(|a| a.port())
                .map_err(io_err("read a free port"))
        })
        .collect()
}

/// Connects to `127.0.0.1:port` with short timeouts, sends `request`, and reads the
/// answer until the server closes or `max` bytes arrived.
pub(crate) fn tcp_exchange(
    port: u16,
    request: &[u8],
    max: usize,
) -> std::result::Result<String, String> {
    tcp_exchange_at(SocketAddr::from(([127, 0, 0, 1], port)), request, max)
}

/// [`tcp_exchange`] with a server at any address (a test-network host's, for one).
pub(crate) fn tcp_exchange_at(
    addr: SocketAddr,
    request: &[u8],
    max: usize,
) -> std::result::Result<String, String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    s.write_all(request)
        .map_err(|e| format!("write to {addr}: {e}"))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() >= max {
                    break;
                }
            }
            // A read with a timeout set is never restarted after a signal.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if buf.is_empty() => return Err(format!("read from {addr}: {e}")),
            Err(_) => break,
        }
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Starts a server built by `make` (given fresh ports), retrying with new ports when
/// the process exits before it is ready (typically: a port was taken meanwhile).
pub(crate) fn start_with_port_retry<T>(
    ports_needed: usize,
    mut make: impl FnMut(&[u16]) -> Result<T>,
    process: impl Fn(&mut T) -> &mut ServerProcess,
) -> Result<T> {
    let mut last_err = None;
    // A start that panicked does not count against the port attempts: rnacos 0.8.8
    // panics in most fresh starts on a loaded machine (see `wait_ready`), each refused
    // within a second.
    let mut panics = 0;
    let mut attempts = 0;
    while attempts < crate::PORT_ATTEMPTS {
        let ports = free_ports(ports_needed)?;
        let mut server = make(&ports)?;
        let p = process(&mut server);
        match p.start() {
            Ok(()) => {
                // The probe may have reached another server on a port this one failed
                // to bind (see `ports`): retry with new ports unless every port is ours.
                let pid = p.pid();
                let stolen: Vec<u16> = ports
                    .iter()
                    .copied()
                    .filter(|&port| pid.is_some_and(|pid| !crate::ports::listens_on(pid, port)))
                    .collect();
                if stolen.is_empty() {
                    return Ok(server);
                }
                p.kill();
                attempts += 1;
                last_err = Some(Error::Other(format!(
                    "ports {stolen:?} were taken by another process before the server bound them"
                )));
            }
            Err(e) => {
                if p.panicked_while_starting() && panics < crate::PANIC_ATTEMPTS {
                    panics += 1;
                    last_err = Some(e);
                    continue;
                }
                if p.exited() {
                    attempts += 1;
                    last_err = Some(e);
                    continue;
                }
                return Err(e);
            }
        }
    }
    Err(last_err.unwrap_or_else(|| Error::Other("no start attempt was made".into())))
}

/// Makes a server type that owns its child in a `process` field (or in the field named
/// after it, as `server.process`) dereference to that [`ServerProcess`], so every
/// server is killed, restarted, paused and read the same way (`etcd.kill()`,
/// `zk.pause()`, `redis.log_tail(20)`) without each type repeating the delegation.
/// What a restart keeps (ports, data dir) is said on each server type.
macro_rules! owns_process {
    ($server:ty) => {
        $crate::process::derefs_to!($server, process: $crate::process::ServerProcess);
    };
    ($server:ty, $($field:ident).+) => {
        $crate::process::derefs_to!($server, $($field).+: $crate::process::ServerProcess);
    };
}
pub(crate) use owns_process;

/// `impl Deref` and `DerefMut` for `$outer` to its field `$field` of type `$target`:
/// a server to its process ([`owns_process`]), a cluster to its servers
/// ([`crate::HostedServers`]).
macro_rules! derefs_to {
    ($outer:ty, $($field:ident).+ : $target:ty) => {
        impl std::ops::Deref for $outer {
            type Target = $target;
            fn deref(&self) -> &Self::Target {
                &self.$($field).+
            }
        }
        impl std::ops::DerefMut for $outer {
            fn deref_mut(&mut self) -> &mut Self::Target {
                &mut self.$($field).+
            }
        }
    };
}
pub(crate) use derefs_to;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_names_the_install_command() {
        let err = require_binary("meshline-no-such-server", "apt-get install -y nothing")
            .expect_err("must be missing");
        let msg = err.to_string();
        assert!(msg.contains("scripts/install-test-deps.sh"), "{msg}");
        assert!(msg.contains("apt-get install -y nothing"), "{msg}");
        let err = require_file("/no/such/file.jar", "apt-get install -y zookeeper")
            .expect_err("must be missing");
        assert!(err.to_string().contains("apt-get install -y zookeeper"));
    }

    #[test]
    fn free_ports_are_distinct() {
        let p = free_ports(6).unwrap();
        let mut q = p.clone();
        q.sort();
        q.dedup();
        assert_eq!(q.len(), 6);
    }

    #[test]
    fn a_server_that_never_answers_reports_its_log_tail() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = ServerProcess::new(
            "echo-server",
            dir.path().to_path_buf(),
            "sh",
            vec!["-c".into(), "echo boom-marker; exit 3".into()],
            Arc::new(|| Err("never".into())),
        );
        let err = p.start().expect_err("cannot be ready");
        let msg = err.to_string();
        assert!(msg.contains("boom-marker"), "{msg}");
        assert!(msg.contains("exited"), "{msg}");
    }
}
