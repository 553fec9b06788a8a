//! What the database servers ([`crate::MariaDb`], [`crate::Postgres`]) share: a data
//! directory made once by a set-up program, then a server on one free loopback port.

use std::ffi::OsString;
use std::process::Command;
use std::sync::Arc;

use tempfile::TempDir;

use crate::process::{ServerProcess, start_with_port_retry};
use crate::{Error, Result, io_err};

/// Runs a database's one-off set-up program (`initdb`, `mariadb-install-db`) to its
/// end; when it fails, the error carries its exit status and what it printed.
pub(crate) fn run_setup(command: &mut Command, what: &str) -> Result<()> {
    let out = command.output().map_err(io_err(format!("run {what}")))?;
    if !out.status.success() {
        return Err(Error::Other(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}

/// A database server on a free loopback port, as a child process, its data directory
/// made before the first start attempt.
#[derive(Debug)]
pub(crate) struct DbServer {
    pub(crate) process: ServerProcess,
    pub(crate) port: u16,
    /// Shared by every start attempt: the data directory is made once.
    _dir: Arc<TempDir>,
}

impl DbServer {
    /// Starts `command(port)` (the program and its arguments) on a free port, its log in
    /// `dir`, and waits until `probe(port)` answers; on fresh ports again when the server
    /// exits before that (see [`start_with_port_retry`]).
    pub(crate) fn start(
        name: &str,
        dir: TempDir,
        command: impl Fn(u16) -> (String, Vec<OsString>),
        probe: fn(u16) -> std::result::Result<(), String>,
    ) -> Result<DbServer> {
        let dir_path = dir.path().to_path_buf();
        let dir = Arc::new(dir);
        start_with_port_retry(
            1,
            |ports| {
                let port = ports[0];
                let (program, args) = command(port);
                let probe = Arc::new(move || probe(port));
                let process = ServerProcess::new(name, dir_path.clone(), &program, args, probe);
                Ok(DbServer {
                    process,
                    port,
                    _dir: dir.clone(),
                })
            },
            |s| &mut s.process,
        )
    }
}
