//! Redis 6/7 (`redis-server`), without persistence.

use std::ffi::OsString;
use std::sync::Arc;

use tempfile::TempDir;

use crate::process::{ServerProcess, require_binary, start_with_port_retry, tcp_exchange};
use crate::{Result, io_err};

const INSTALL: &str = "apt-get install -y redis-server";

/// A Redis server on a free port, foreground child process, no RDB/AOF (a restart
/// starts empty, like a failover to a fresh replica: clients must re-write their keys).
pub struct Redis {
    process: ServerProcess,
    port: u16,
    password: Option<String>,
    _dir: TempDir,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("addr", &self.addr())
            .field("process", &self.process)
            .finish()
    }
}

impl Redis {
    /// Starts Redis and waits until it answers `PING`.
    pub fn start() -> Result<Redis> {
        Redis::start_inner(None)
    }

    /// Starts Redis with `requirepass <password>`.
    pub fn start_with_password(password: &str) -> Result<Redis> {
        Redis::start_inner(Some(password.to_string()))
    }

    fn start_inner(password: Option<String>) -> Result<Redis> {
        require_binary("redis-server", INSTALL)?;
        start_with_port_retry(
            1,
            |ports| {
                let port = ports[0];
                let dir = tempfile::Builder::new()
                    .prefix("meshline-redis-")
                    .tempdir()
                    .map_err(io_err("create a temp dir for redis"))?;
                let mut args: Vec<OsString> = [
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    &dir.path().display().to_string(),
                    "--daemonize",
                    "no",
                    "--logfile",
                    "",
                ]
                .iter()
                .map(OsString::from)
                .collect();
                if let Some(pw) = &password {
                    args.push("--requirepass".into());
                    args.push(pw.into());
                }
                let probe = Arc::new(move || {
                    let answer = tcp_exchange(port, b"PING\r\n", 7)?;
                    // With requirepass, an unauthenticated PING gets -NOAUTH: up as well.
                    if answer.starts_with("+PONG") || answer.starts_with("-NOAUTH") {
                        Ok(())
                    } else {
                        Err(format!("PING answered {answer:?}"))
                    }
                });
                let process = ServerProcess::new(
                    "redis",
                    dir.path().to_path_buf(),
                    "redis-server",
                    args,
                    probe,
                );
                Ok(Redis {
                    process,
                    port,
                    password: password.clone(),
                    _dir: dir,
                })
            },
            |r| &mut r.process,
        )
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `redis://[:password@]127.0.0.1:<port>/`: for the `redis` crate.
    pub fn url(&self) -> String {
        match &self.password {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{}/", self.port),
            None => format!("redis://127.0.0.1:{}/", self.port),
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process, for [`ServerProcess::kill`], [`ServerProcess::restart`] and friends.
    pub fn process(&mut self) -> &mut ServerProcess {
        &mut self.process
    }

    /// `SIGKILL`s the server and waits for it.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts the server again on the same port and dir (empty: no persistence).
    pub fn restart(&mut self) -> Result<()> {
        self.process.restart()
    }
}
