//! Shared helpers for the tests that run the example programs as child processes.

#![allow(dead_code)] // each test binary uses its own subset

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
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

#[allow(unused_imports)] // each test binary uses its own subset
pub use meshline_testkit::until;
