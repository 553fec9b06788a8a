//! rnacos: a Nacos-protocol server (HTTP open API v1 and the 2.x gRPC protocol) from
//! crates.io, used because no official Nacos server can be installed here.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::process::{ServerProcess, start_with_port_retry, tcp_exchange, tcp_exchange_at};
use crate::{Error, READY_TIMEOUT, Result, io_err};

mod cluster;
pub use cluster::RnacosCluster;

const INSTALL: &str = "cargo install rnacos --locked";

/// An rnacos server on free ports (HTTP and gRPC; console disabled) with its own data dir.
#[derive(Debug)]
pub struct Rnacos {
    process: ServerProcess,
    http_port: u16,
    grpc_port: u16,
    _dir: TempDir,
}

crate::process::owns_process!(Rnacos);

/// `rnacos` on `PATH`, else in `$CARGO_HOME/bin` or `~/.cargo/bin` (where
/// `cargo install` puts it).
fn find_rnacos() -> Result<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(h) = std::env::var_os("CARGO_HOME") {
        dirs.push(PathBuf::from(h).join("bin"));
    }
    if let Some(h) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(h).join(".cargo").join("bin"));
    }
    dirs.into_iter()
        .map(|d| d.join("rnacos"))
        .find(|p| p.is_file())
        .ok_or_else(|| Error::MissingBinary {
            what: "`rnacos`".into(),
            install: INSTALL.into(),
        })
}

impl Rnacos {
    /// Starts rnacos and waits until its HTTP `/health` answers 200 and its gRPC port
    /// accepts connections.
    pub fn start() -> Result<Rnacos> {
        Rnacos::start_inner(None, &[])
    }

    /// Starts rnacos with extra settings, `RNACOS_*` keys of its env file: e.g.
    /// `RNACOS_NAMING_HEALTH_TIMEOUT_SECOND` and `RNACOS_NAMING_INSTANCE_TIMEOUT_SECOND`,
    /// after which (plus 3 s) a heartbeat instance is marked unhealthy and removed
    /// (defaults 15 and 30).
    pub fn start_with_settings(settings: &[(&str, &str)]) -> Result<Rnacos> {
        Rnacos::start_inner(None, settings)
    }

    /// Starts rnacos with authentication on (open API and gRPC): clients must log in as
    /// `username` / `password` (the initial admin account).
    pub fn start_with_auth(username: &str, password: &str) -> Result<Rnacos> {
        Rnacos::start_inner(Some((username.to_string(), password.to_string())), &[])
    }

    fn start_inner(auth: Option<(String, String)>, extra: &[(&str, &str)]) -> Result<Rnacos> {
        let bin = find_rnacos()?;
        let bin = bin.to_string_lossy().into_owned();
        start_with_port_retry(
            2,
            |ports| {
                let (http_port, grpc_port) = (ports[0], ports[1]);
                let dir = tempfile::Builder::new()
                    .prefix("meshline-rnacos-")
                    .tempdir()
                    .map_err(io_err("create a temp dir for rnacos"))?;
                // rnacos reads its settings from the environment or from an env file
                // (`-e FILE`); the file keeps the test process's environment clean.
                let env_file = dir.path().join("rnacos.env");
                let data = dir.path().join("data");
                let mut settings = format!(
                    "RNACOS_HTTP_PORT={http_port}\nRNACOS_GRPC_PORT={grpc_port}\nRNACOS_HTTP_CONSOLE_PORT=0\n\
                     RNACOS_SDK_HOST=127.0.0.1\nRNACOS_CONSOLE_HOST=127.0.0.1\n\
                     RNACOS_RAFT_NODE_ADDR=127.0.0.1:{grpc_port}\nRNACOS_DATA_DIR={}\n\
                     RNACOS_ENABLE_METRICS=false\nRUST_LOG=warn\n",
                    data.display()
                );
                if let Some((user, pass)) = &auth {
                    settings.push_str(&format!(
                        "RNACOS_ENABLE_OPEN_API_AUTH=true\nRNACOS_INIT_ADMIN_USERNAME={user}\n\
                         RNACOS_INIT_ADMIN_PASSWORD={pass}\n"
                    ));
                }
                for (key, value) in extra {
                    settings.push_str(&format!("{key}={value}\n"));
                }
                std::fs::write(&env_file, settings)
                    .map_err(io_err(format!("write {}", env_file.display())))?;
                let args: Vec<OsString> = vec!["-e".into(), env_file.into_os_string()];
                // With auth on, the admin account is created after the ports open: ready
                // means a login with it succeeds.
                let login = auth.as_ref().map(|(user, pass)| {
                    format!(
                        "POST /nacos/v1/auth/login?username={user}&password={pass} HTTP/1.0\r\n\
                         Host: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"
                    )
                });
                let probe = Arc::new(move || {
                    let answer = tcp_exchange(
                        http_port,
                        b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n",
                        12,
                    )?;
                    if !answer.starts_with("HTTP/1.1 200") && !answer.starts_with("HTTP/1.0 200") {
                        return Err(format!("GET /health answered {answer:?}"));
                    }
                    std::net::TcpStream::connect(("127.0.0.1", grpc_port))
                        .map_err(|e| format!("gRPC port {grpc_port}: {e}"))?;
                    // Only once the server answers: an early login can hit rnacos before
                    // its raft store is initialised. Either step proves that raft writes
                    // are applied (the admin account and configs are raft writes): a
                    // start whose raft apply actor panicked answers `/health` but loses
                    // every write (see `ServerProcess::wait_ready`).
                    match &login {
                        Some(req) => {
                            let answer = tcp_exchange(http_port, req.as_bytes(), 12)?;
                            if !is_ok(&answer) {
                                return Err(format!("admin login answered {answer:?}"));
                            }
                        }
                        None => config_canary(http_port)?,
                    }
                    Ok(())
                });
                let process =
                    ServerProcess::new("rnacos", dir.path().to_path_buf(), &bin, args, probe);
                Ok(Rnacos {
                    process,
                    http_port,
                    grpc_port,
                    _dir: dir,
                })
            },
            |r| &mut r.process,
        )
    }

    /// Publishes `content` as config `data_id` of `group` (public namespace) through
    /// the open API (`POST /nacos/v1/cs/configs`) and waits until the read API shows
    /// it (at most 10 s), so a test step starts from the state it published: rnacos
    /// answers a publish before the raft write is applied. Blocking (plain HTTP/1.0 on
    /// loopback).
    ///
    /// A publish answered `true` and never applied was a start whose raft apply actor
    /// had panicked; [`Rnacos::start`] now refuses such a server (its readiness probe
    /// writes and reads back a canary config).
    pub fn publish_config(&self, data_id: &str, group: &str, content: &str) -> Result<()> {
        let calls = ConfigCalls::new(data_id, group, content);
        calls.publish(self.http_port).map_err(Error::Other)?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let (shown, answer) = calls.read_back(self.http_port).map_err(Error::Other)?;
            if shown {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                return Err(Error::Other(format!(
                    "rnacos did not show the published {data_id} within 10 s (last read: \
                     {answer:?}; server log: {})",
                    self.process.log_tail(20)
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// A registry configuration for this server: `registry.type=nacos`, its address and
    /// its gRPC port, then `extra`.
    pub fn registry_config(&self, extra: &[(&str, &str)]) -> meshline_registry_core::Config {
        let (addr, grpc) = (self.http_addr(), self.grpc_port().to_string());
        let base = [
            ("registry.type", "nacos"),
            ("registry.nacos.serverAddr", addr.as_str()),
            ("registry.nacos.grpcPort", grpc.as_str()),
        ];
        crate::config_of(&base, extra)
    }

    /// `127.0.0.1:<http port>`: the Nacos server address clients are given.
    pub fn http_addr(&self) -> String {
        format!("127.0.0.1:{}", self.http_port)
    }

    /// The HTTP (open API) port.
    pub fn http_port(&self) -> u16 {
        self.http_port
    }

    /// The gRPC port (not HTTP + 1000: pass it to clients explicitly).
    pub fn grpc_port(&self) -> u16 {
        self.grpc_port
    }
}

/// True for an HTTP 200 answer.
fn is_ok(answer: &str) -> bool {
    answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200")
}

/// Data id, group and content of the config the readiness probe writes and reads back.
const CANARY: (&str, &str, &str) = ("meshline-testkit-ready", "MESHLINE_TESTKIT", "ready");

/// Writes the canary config and reads it back once: `Ok` when rnacos applies writes.
fn config_canary(http_port: u16) -> std::result::Result<(), String> {
    let (data_id, group, content) = CANARY;
    let calls = ConfigCalls::new(data_id, group, content);
    calls.publish(http_port)?;
    match calls.read_back(http_port)? {
        (true, _) => Ok(()),
        (false, answer) => Err(format!("canary config not readable yet: {answer:?}")),
    }
}

/// The open API's publish and read of one config (public namespace), as plain
/// HTTP/1.0 requests.
struct ConfigCalls {
    data_id: String,
    content: String,
    post: String,
    get: String,
}

impl ConfigCalls {
    fn new(data_id: &str, group: &str, content: &str) -> ConfigCalls {
        let query = format!(
            "dataId={}&group={}&tenant=",
            form_encode(data_id),
            form_encode(group)
        );
        let body = format!("{query}&content={}", form_encode(content));
        ConfigCalls {
            data_id: data_id.to_string(),
            content: content.to_string(),
            post: format!(
                "POST /nacos/v1/cs/configs HTTP/1.0\r\nHost: 127.0.0.1\r\n\
                 Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            ),
            get: format!("GET /nacos/v1/cs/configs?{query} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"),
        }
    }

    /// `POST /nacos/v1/cs/configs`: `Ok` when rnacos answers `true`.
    fn publish(&self, http_port: u16) -> std::result::Result<(), String> {
        self.publish_at(loopback(http_port))
    }

    /// [`publish`](Self::publish) to a server at any address.
    fn publish_at(&self, addr: SocketAddr) -> std::result::Result<(), String> {
        let answer = tcp_exchange_at(addr, self.post.as_bytes(), 1 << 16)?;
        match answer.split_once("\r\n\r\n") {
            Some((_, b)) if is_ok(&answer) && b.trim() == "true" => Ok(()),
            _ => Err(format!("publish {}: {answer:?}", self.data_id)),
        }
    }

    /// One read: whether it shows the content, and the answer.
    fn read_back(&self, http_port: u16) -> std::result::Result<(bool, String), String> {
        self.read_back_at(loopback(http_port))
    }

    /// [`read_back`](Self::read_back) from a server at any address.
    fn read_back_at(&self, addr: SocketAddr) -> std::result::Result<(bool, String), String> {
        let answer = tcp_exchange_at(addr, self.get.as_bytes(), 1 << 20)?;
        let shown = matches!(answer.split_once("\r\n\r\n"),
            Some((_, b)) if is_ok(&answer) && b == self.content);
        Ok((shown, answer))
    }
}

/// `application/x-www-form-urlencoded` encoding: every byte but the unreserved ones as
/// `%XX`.
fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}
