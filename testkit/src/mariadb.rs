//! MariaDB (Debian's `mariadb-server`), a fresh data directory in a temp dir, no
//! grant tables (any user, no password): a throwaway server for tests.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;

use crate::db_server::{DbServer, run_setup};
use crate::process::{require_binary, tcp_exchange_at};
use crate::{Result, io_err};

const INSTALL: &str = "apt-get install -y mariadb-server";

/// A MariaDB server on a free loopback port, as a child process, with its grant
/// tables off (connect as `root`, no password: [`MariaDb::url`]) and no binary log.
#[derive(Debug)]
pub struct MariaDb {
    server: DbServer,
}

crate::process::owns_process!(MariaDb, server.process);

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
        run_setup(
            Command::new("mariadb-install-db")
                .args([
                    "--no-defaults",
                    &format!("--datadir={}", data.display()),
                    &format!("--user={user}"),
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                    "--skip-name-resolve",
                ])
                .current_dir(dir.path()),
            "mariadb-install-db",
        )?;
        let dir_path = dir.path().to_path_buf();
        let command = |port: u16| {
            let args = [
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
            ];
            (
                "mariadbd".to_string(),
                args.into_iter().map(OsString::from).collect(),
            )
        };
        let server = DbServer::start("mariadb", dir, command, probe)?;
        Ok(MariaDb { server })
    }

    /// `mysql://root@127.0.0.1:<port>/` (no database chosen: create one).
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/", self.server.port)
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
