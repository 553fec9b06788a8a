//! Redis 6/7 (`redis-server`), without persistence.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use tempfile::TempDir;

use crate::process::{ServerProcess, require_binary, start_with_port_retry, tcp_exchange_at};
use crate::{Result, io_err};

const INSTALL: &str = "apt-get install -y redis-server";

/// A Redis server on a free port, foreground child process, no RDB/AOF (a restart
/// starts empty, like a failover to a fresh replica: clients must re-write their keys).
pub struct Redis {
    process: ServerProcess,
    /// Where it listens: `127.0.0.1`, or a test-network host's address.
    ip: IpAddr,
    port: u16,
    password: Option<String>,
    /// The TLS port, when started with [`Redis::start_tls`].
    tls_port: Option<u16>,
    _dir: TempDir,
}

crate::process::owns_process!(Redis);

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

    /// Starts Redis serving TLS on the port of [`Redis::tls_url`] with `pki`'s server certificate
    /// (the plain port stays open for the readiness probe). With
    /// `require_client_cert`, clients must present a certificate `pki`'s CA signed
    /// (`--tls-auth-clients yes`).
    pub fn start_tls(pki: &crate::TestPki, require_client_cert: bool) -> Result<Redis> {
        let p = |p: std::path::PathBuf| p.display().to_string();
        let auth = if require_client_cert { "yes" } else { "no" };
        let tls: Vec<String> = vec![
            "--tls-cert-file".into(),
            p(pki.server_cert()),
            "--tls-key-file".into(),
            p(pki.server_key()),
            "--tls-ca-cert-file".into(),
            p(pki.ca()),
            "--tls-auth-clients".into(),
            auth.into(),
        ];
        Redis::start_with(None, Some(tls))
    }

    /// Starts Redis inside a test-network host (`ip netns exec`), listening on the
    /// host's address: a cut of the host blackholes it for every client, with no reset.
    pub fn start_in(host: &crate::net::Host) -> Result<Redis> {
        Redis::start_at(None, None, Some(host))
    }

    fn start_inner(password: Option<String>) -> Result<Redis> {
        Redis::start_with(password, None)
    }

    fn start_with(password: Option<String>, tls: Option<Vec<String>>) -> Result<Redis> {
        Redis::start_at(password, tls, None)
    }

    fn start_at(
        password: Option<String>,
        tls: Option<Vec<String>>,
        host: Option<&crate::net::Host>,
    ) -> Result<Redis> {
        require_binary("redis-server", INSTALL)?;
        let ip = host.map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |h| h.ip());
        start_with_port_retry(
            if tls.is_some() { 2 } else { 1 },
            |ports| {
                let port = ports[0];
                let tls_port = tls.as_ref().map(|_| ports[1]);
                let dir = tempfile::Builder::new()
                    .prefix("meshline-redis-")
                    .tempdir()
                    .map_err(io_err("create a temp dir for redis"))?;
                let mut args: Vec<OsString> = [
                    "--port",
                    &port.to_string(),
                    "--bind",
                    &ip.to_string(),
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
                if let (Some(tls), Some(tp)) = (&tls, tls_port) {
                    args.push("--tls-port".into());
                    args.push(tp.to_string().into());
                    args.extend(tls.iter().map(OsString::from));
                }
                if host.is_some() {
                    // Bound to a non-loopback address without a password.
                    args.push("--protected-mode".into());
                    args.push("no".into());
                }
                let probe = Arc::new(move || {
                    let answer = tcp_exchange_at(SocketAddr::new(ip, port), b"PING\r\n", 7)?;
                    // With requirepass, an unauthenticated PING gets -NOAUTH: up as well.
                    if answer.starts_with("+PONG") || answer.starts_with("-NOAUTH") {
                        Ok(())
                    } else {
                        Err(format!("PING answered {answer:?}"))
                    }
                });
                let (program, args) = match host {
                    Some(h) => {
                        // `ip netns exec` execs redis-server: the child is the server.
                        let mut all: Vec<OsString> = ["netns", "exec", h.name(), "redis-server"]
                            .iter()
                            .map(OsString::from)
                            .collect();
                        all.extend(args);
                        ("ip", all)
                    }
                    None => ("redis-server", args),
                };
                let process =
                    ServerProcess::new("redis", dir.path().to_path_buf(), program, args, probe);
                Ok(Redis {
                    process,
                    ip,
                    port,
                    password: password.clone(),
                    tls_port,
                    _dir: dir,
                })
            },
            |r| &mut r.process,
        )
    }

    /// `<ip>:<port>`: `127.0.0.1`, or the host's address ([`Redis::start_in`]).
    pub fn addr(&self) -> String {
        SocketAddr::new(self.ip, self.port).to_string()
    }

    /// `redis://[:password@]<ip>:<port>/`: for the `redis` crate.
    pub fn url(&self) -> String {
        match &self.password {
            Some(pw) => format!("redis://:{pw}@{}/", self.addr()),
            None => format!("redis://{}/", self.addr()),
        }
    }

    /// `rediss://127.0.0.1:<tls port>/` when started with [`Redis::start_tls`].
    pub fn tls_url(&self) -> Option<String> {
        self.tls_port.map(|p| format!("rediss://127.0.0.1:{p}/"))
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }
}
