//! PostgreSQL (Debian's `postgresql` package: `/usr/lib/postgresql/<v>/bin`), a fresh
//! cluster in a temp dir, trust authentication for the user `test`.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::db_server::{DbServer, run_setup};
use crate::process::tcp_exchange_at;
use crate::{Error, Result, io_err};

const INSTALL: &str = "apt-get install -y postgresql";

/// A PostgreSQL server on a free loopback port, as a child process (as the
/// `postgres` user when the tests run as root: the server refuses root), without
/// fsync. The database `postgres` is there; connect as `test` ([`Postgres::url`]).
#[derive(Debug)]
pub struct Postgres {
    server: DbServer,
}

crate::process::owns_process!(Postgres, server.process);

/// The newest installed server's `bin` directory.
fn bin_dir() -> Result<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").is_file().then_some((v, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, b)| b)
        .ok_or_else(|| Error::MissingBinary {
            what: "`/usr/lib/postgresql/<version>/bin/postgres`".into(),
            install: INSTALL.into(),
        })
}

/// How to run a server program: directly, or as `postgres` (uid, gid) when root.
fn runner() -> Result<Option<(u32, u32)>> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let user = nix::unistd::User::from_name("postgres")
        .map_err(|e| Error::Other(format!("look up the postgres user: {e}")))?
        .ok_or_else(|| Error::MissingBinary {
            what: "the `postgres` user (the server refuses to run as root)".into(),
            install: INSTALL.into(),
        })?;
    Ok(Some((user.uid.as_raw(), user.gid.as_raw())))
}

/// `program args`, as the server's user.
fn as_server_user(
    user: Option<(u32, u32)>,
    program: &Path,
    args: Vec<OsString>,
) -> (String, Vec<OsString>) {
    match user {
        None => (program.display().to_string(), args),
        Some((uid, gid)) => {
            let mut all: Vec<OsString> = vec![
                format!("--reuid={uid}").into(),
                format!("--regid={gid}").into(),
                "--clear-groups".into(),
                "--".into(),
                program.into(),
            ];
            all.extend(args);
            ("setpriv".into(), all)
        }
    }
}

/// Every directory above `dir` must let other users through (`o+x`): the server runs
/// as `postgres`. A private `TMPDIR` (mode 0700) is the usual culprit; said plainly
/// rather than as initdb's "Permission denied".
fn reachable_by_others(dir: &Path) -> Result<()> {
    for a in dir.ancestors().skip(1) {
        let mode = std::fs::metadata(a)
            .map_err(io_err(format!("stat {}", a.display())))?
            .permissions()
            .mode();
        if mode & 0o001 == 0 {
            return Err(Error::Other(format!(
                "{} (mode {:o}) is not traversable by other users; the PostgreSQL server \
                 runs as `postgres` and cannot reach its data under it: `chmod o+x {}` \
                 or point TMPDIR elsewhere",
                a.display(),
                mode & 0o777,
                a.display()
            )));
        }
    }
    Ok(())
}

impl Postgres {
    /// Creates a cluster (`initdb`) and starts it; waits until it accepts a login.
    pub fn start() -> Result<Postgres> {
        let bin = bin_dir()?;
        let user = runner()?;
        let dir = tempfile::Builder::new()
            .prefix("meshline-postgres-")
            .tempdir()
            .map_err(io_err("create a temp dir for postgres"))?;
        // The server's user must reach its data and socket directory.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .map_err(io_err("open the postgres temp dir"))?;
        if user.is_some() {
            reachable_by_others(dir.path())?;
        }
        let data = dir.path().join("data");
        std::fs::create_dir(&data).map_err(io_err("create the postgres data dir"))?;
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700))
            .map_err(io_err("restrict the postgres data dir"))?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&data, Some(uid), Some(gid))
                .map_err(io_err("chown the postgres data dir"))?;
        }
        let (program, args) = as_server_user(
            user,
            &bin.join("initdb"),
            [
                "-D",
                &data.display().to_string(),
                "-U",
                "test",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ]
            .iter()
            .map(OsString::from)
            .collect(),
        );
        run_setup(
            Command::new(&program).args(&args).current_dir(dir.path()),
            "initdb",
        )?;
        let command = |port: u16| {
            let args: Vec<OsString> = [
                "-D",
                &data.display().to_string(),
                "-p",
                &port.to_string(),
                // The socket beside the data: the server's user owns that dir.
                "-k",
                &data.display().to_string(),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ]
            .iter()
            .map(OsString::from)
            .collect();
            as_server_user(user, &bin.join("postgres"), args)
        };
        let server = DbServer::start("postgres", dir, command, probe)?;
        Ok(Postgres { server })
    }

    /// `postgres://test@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://test@127.0.0.1:{}/postgres", self.server.port)
    }
}

/// Ready once a startup message for `test` is answered `AuthenticationOk` (`R`): while
/// the cluster starts, the answer is an error (`E`, "the database system is starting
/// up").
fn probe(port: u16) -> std::result::Result<(), String> {
    let mut body = Vec::new();
    body.extend_from_slice(&196_608u32.to_be_bytes());
    for s in ["user", "test", "database", "postgres", ""] {
        body.extend_from_slice(s.as_bytes());
        body.push(0);
    }
    let mut msg = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    msg.extend_from_slice(&body);
    let answer = tcp_exchange_at(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), &msg, 1)?;
    if answer.starts_with('R') {
        Ok(())
    } else {
        Err(format!("startup answered {answer:?}"))
    }
}
