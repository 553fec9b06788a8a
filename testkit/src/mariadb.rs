//! MariaDB (Debian's `mariadb-server`), a fresh data directory in a temp dir, no
//! grant tables (any user, no password): a throwaway server for tests.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::sync::Arc;

use tempfile::TempDir;

use crate::process::{ServerProcess, require_binary, start_with_port_retry, tcp_exchange_at};
use crate::{Error, Result, io_err};

const INSTALL: &str = "apt-get install -y mariadb-server";

/// A MariaDB server on a free loopback port, as a child process, with its grant
/// tables off (connect as `root`, no password: [`MariaDb::url`]) and no binary log.
#[derive(Debug)]
pub struct MariaDb {
    process: ServerProcess,
    port: u16,
    /// Shared by every start attempt: the data directory is made once.
    _dir: Arc<TempDir>,
}

crate::process::owns_process!(MariaDb);

impl MariaDb {
    /// Initialises a data directory (`mariadb-install-db`) and starts the server;
    /// waits until it greets a connection.
    pub fn start() -> Result<MariaDb> {
        require_binary("mariadbd", INSTALL)?;
        require_binary("mariadb-install-db", INSTALL)?;
        let dir = tempfile::Builder::new()
            .prefix("meshline-mariadb-")
            .tempdir()
            .map_err(io_err("create a temp dir for mariadb"))?;
        let data = dir.path().join("data");
        let user = nix::unistd::User::from_uid(nix::unistd::geteuid())
            .ok()
            .flatten()
            .map_or_else(|| "root".to_string(), |u| u.name);
        let out = Command::new("mariadb-install-db")
            .args([
                "--no-defaults",
                &format!("--datadir={}", data.display()),
                &format!("--user={user}"),
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
            ])
            .current_dir(dir.path())
            .output()
            .map_err(io_err("run mariadb-install-db"))?;
        if !out.status.success() {
            return Err(Error::Other(format!(
                "mariadb-install-db failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let dir_path = dir.path().to_path_buf();
        let dir = Arc::new(dir);
        start_with_port_retry(
            1,
            |ports| {
                let port = ports[0];
                let args: Vec<OsString> = [
                    "--no-defaults".to_string(),
                    format!("--datadir={}", data.display()),
                    format!("--port={port}"),
                    "--bind-address=127.0.0.1".into(),
                    format!("--socket={}", dir_path.join("mysqld.sock").display()),
                    format!("--pid-file={}", dir_path.join("mysqld.pid").display()),
                    format!("--user={user}"),
                    "--skip-grant-tables".into(),
                    "--skip-log-bin".into(),
                    "--innodb-buffer-pool-size=32M".into(),
                    "--innodb-flush-log-at-trx-commit=2".into(),
                    "--skip-name-resolve".into(),
                ]
                .into_iter()
                .map(OsString::from)
                .collect();
                let probe = Arc::new(move || probe(port));
                let process =
                    ServerProcess::new("mariadb", dir_path.clone(), "mariadbd", args, probe);
                Ok(MariaDb {
                    process,
                    port,
                    _dir: dir.clone(),
                })
            },
            |m| &mut m.process,
        )
    }

    /// `mysql://root@127.0.0.1:<port>/` (no database chosen: create one).
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/", self.port)
    }
}

/// Ready once a connection is greeted: the handshake packet, protocol version 10
/// after the 4-byte packet header.
fn probe(port: u16) -> std::result::Result<(), String> {
    let answer = tcp_exchange_at(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), b"", 5)?;
    if answer.as_bytes().get(4) == Some(&10) {
        Ok(())
    } else {
        Err(format!("greeting {answer:?}"))
    }
}
