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

const INSTALL: &str = "cargo install rnacos --locked";

/// An rnacos server on free ports (HTTP and gRPC; console disabled) with its own data dir.
pub struct Rnacos {
    process: ServerProcess,
    http_port: u16,
    grpc_port: u16,
    _dir: TempDir,
}

impl std::fmt::Debug for Rnacos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rnacos")
            .field("http", &self.http_addr())
            .field("grpc_port", &self.grpc_port)
            .field("process", &self.process)
            .finish()
    }
}

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
        Rnacos::start_inner(None)
    }

    /// Starts rnacos with authentication on (open API and gRPC): clients must log in as
    /// `username` / `password` (the initial admin account).
    pub fn start_with_auth(username: &str, password: &str) -> Result<Rnacos> {
        Rnacos::start_inner(Some((username.to_string(), password.to_string())))
    }

    fn start_inner(auth: Option<(String, String)>) -> Result<Rnacos> {
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

    /// The process, for [`ServerProcess::kill`], [`ServerProcess::restart`] and friends.
    pub fn process(&mut self) -> &mut ServerProcess {
        &mut self.process
    }

    /// `SIGKILL`s the server and waits for it.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts the server again on the same ports and data dir.
    pub fn restart(&mut self) -> Result<()> {
        self.process.restart()
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

/// The HTTP and gRPC ports inside each test host (each host has its own ports; the
/// gRPC port is HTTP + 1000, where Nacos clients look for it by default).
const HOST_HTTP_PORT: u16 = 8848;
const HOST_GRPC_PORT: u16 = 9848;

/// How many times a cluster start is made again when one of its nodes panicked while
/// starting (see [`ServerProcess::wait_ready`]: rnacos 0.8.8's raft start race).
const CLUSTER_ATTEMPTS: usize = 5;

/// How long a node's join may take before the cluster start is made again.
const JOIN_TIMEOUT: Duration = Duration::from_secs(10);

/// An rnacos cluster (three nodes by default), each node on a test host of its own
/// ([`crate::net::Host`], a network namespace; the hosts reach each other through the
/// test's namespace), where a node can be [`cut`](Self::cut) off (blackholed: no FIN,
/// no RST) and [`restore`](Self::restore)d.
///
/// rnacos' cluster mode: configs are kept by raft (node 1 initialises it,
/// `RNACOS_RAFT_AUTO_INIT`; the others join it, `RNACOS_RAFT_JOIN_ADDR`), naming by a
/// Distro-like protocol, each node owning the instances its own clients registered and
/// sending them to the others. A node that hears nothing from another for 15 s
/// (checked every 3 s) drops the instances of that node's clients.
///
/// The nodes start one at a time, each in the raft membership before the next starts.
/// Ready means: every node answers `/health`; every node's raft membership has every
/// node and a leader; a config written through node 1 is read back from every node; and
/// a naming instance registered through node 1 is listed by every node.
///
/// Clean-up: the nodes are killed and waited for when the cluster drops, panics
/// included, then their hosts are removed (which kills whatever is still inside).
pub struct RnacosCluster {
    // Field order is drop order: the nodes stop before their hosts go.
    nodes: Vec<ServerProcess>,
    hosts: Vec<crate::net::Host>,
    _dir: TempDir,
}

impl std::fmt::Debug for RnacosCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RnacosCluster")
            .field("server_addr", &self.server_addr())
            .field("nodes", &self.nodes)
            .finish()
    }
}

impl RnacosCluster {
    /// Starts an `n`-node cluster (1..=7) with each node on a test host of its own and
    /// waits until it is ready (see the type's docs). Needs what the test network needs
    /// (see [`crate::net::skip_reason`]) and `rnacos`.
    pub fn start_on_hosts(n: usize) -> Result<RnacosCluster> {
        if !(1..=7).contains(&n) {
            return Err(Error::Other(format!(
                "an rnacos test cluster has 1..=7 nodes, not {n}"
            )));
        }
        let bin = find_rnacos()?.to_string_lossy().into_owned();
        let mut last = None;
        for _ in 0..CLUSTER_ATTEMPTS {
            match RnacosCluster::launch(&bin, n)? {
                Ok(cluster) => return Ok(cluster),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Other("no start attempt was made".into())))
    }

    /// One start. The outer error is final; the inner one (a node panicked while
    /// starting) is worth another attempt on fresh hosts.
    fn launch(bin: &str, n: usize) -> Result<Result<RnacosCluster>> {
        let mut hosts = Vec::with_capacity(n);
        for _ in 0..n {
            let host = crate::net::Host::new().map_err(Error::Other)?;
            host.forward().map_err(Error::Other)?;
            hosts.push(host);
        }
        let dir = tempfile::Builder::new()
            .prefix("meshline-rnacos-cluster-")
            .tempdir()
            .map_err(io_err("create a temp dir for the rnacos cluster"))?;
        let first = SocketAddr::new(hosts[0].ip(), HOST_GRPC_PORT);
        let mut nodes = Vec::with_capacity(n);
        for (i, host) in hosts.iter().enumerate() {
            let ndir = dir.path().join(format!("node{}", i + 1));
            std::fs::create_dir_all(&ndir).map_err(io_err(format!("create {}", ndir.display())))?;
            let ip = host.ip();
            let mut settings = format!(
                "RNACOS_HTTP_PORT={HOST_HTTP_PORT}\nRNACOS_GRPC_PORT={HOST_GRPC_PORT}\n\
                 RNACOS_HTTP_CONSOLE_PORT=0\nRNACOS_SDK_HOST={ip}\nRNACOS_CONSOLE_HOST={ip}\n\
                 RNACOS_RAFT_NODE_ID={}\nRNACOS_RAFT_NODE_ADDR={ip}:{HOST_GRPC_PORT}\n\
                 RNACOS_DATA_DIR={}\nRNACOS_ENABLE_METRICS=false\nRUST_LOG=warn\n",
                i + 1,
                ndir.join("data").display()
            );
            if i == 0 {
                settings.push_str("RNACOS_RAFT_AUTO_INIT=true\n");
            } else {
                settings.push_str(&format!(
                    "RNACOS_RAFT_AUTO_INIT=false\nRNACOS_RAFT_JOIN_ADDR={first}\n"
                ));
            }
            let env_file = ndir.join("rnacos.env");
            std::fs::write(&env_file, settings)
                .map_err(io_err(format!("write {}", env_file.display())))?;
            // `ip netns exec` execs rnacos in the namespace: the child is the server.
            let args: Vec<OsString> = vec![
                "netns".into(),
                "exec".into(),
                host.name().into(),
                bin.into(),
                "-e".into(),
                env_file.into_os_string(),
            ];
            let http = SocketAddr::new(ip, HOST_HTTP_PORT);
            let grpc = SocketAddr::new(ip, HOST_GRPC_PORT);
            let probe = Arc::new(move || {
                let answer =
                    tcp_exchange_at(http, b"GET /health HTTP/1.0\r\nHost: rnacos\r\n\r\n", 12)?;
                if !is_ok(&answer) {
                    return Err(format!("GET /health answered {answer:?}"));
                }
                std::net::TcpStream::connect_timeout(&grpc, Duration::from_millis(500))
                    .map_err(|e| format!("gRPC port {grpc}: {e}"))?;
                Ok(())
            });
            nodes.push(ServerProcess::new(
                format!("rnacos node {}", i + 1),
                ndir,
                "ip",
                args,
                probe,
            ));
        }
        let mut cluster = RnacosCluster {
            nodes,
            hosts,
            _dir: dir,
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        // One node at a time: node 1 initialises raft, then each other node asks it to
        // join (once, 500 ms after its start) and is in the membership before the next
        // starts. A join sent before node 1's raft has a leader, or while another
        // membership change is under way, is lost: then the whole cluster starts again.
        for i in 0..n {
            cluster.nodes[i].spawn()?;
            if let Err(e) = cluster.nodes[i].wait_ready(deadline) {
                if cluster.nodes[i].panicked_while_starting() {
                    return Ok(Err(e));
                }
                return Err(e);
            }
            if let Err(e) = cluster.wait_member(i, Instant::now() + JOIN_TIMEOUT) {
                return Ok(Err(e));
            }
        }
        match cluster.wait_formed(deadline) {
            Ok(()) => Ok(Ok(cluster)),
            Err(e) if cluster.any_panicked() => Ok(Err(e)),
            Err(e) => Err(e),
        }
    }

    /// Waits until node 1's raft has a leader and node `i` in its membership.
    fn wait_member(&self, i: usize, deadline: Instant) -> Result<()> {
        let id = (i + 1) as u64;
        loop {
            let metrics = self
                .http(0, "GET", "/nacos/v1/raft/metrics", "")
                .unwrap_or_default();
            let v: serde_json::Value = serde_json::from_str(&metrics).unwrap_or_default();
            let joined = v["membership_config"]["members"]
                .as_array()
                .is_some_and(|m| m.iter().any(|x| x.as_u64() == Some(id)));
            if joined && !v["current_leader"].is_null() {
                return Ok(());
            }
            if Instant::now() >= deadline || self.any_panicked() {
                return Err(Error::Other(format!(
                    "rnacos node {id} is not in the raft membership after {JOIN_TIMEOUT:?}: \
                     {metrics}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// True when a node's log shows a Rust panic.
    fn any_panicked(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| n.log_tail(400).contains("panicked at"))
    }

    /// Waits until raft has every node, configs replicate and naming instances reach
    /// every node.
    fn wait_formed(&self, deadline: Instant) -> Result<()> {
        let n = self.nodes.len();
        let (data_id, group, _) = CANARY;
        let calls = ConfigCalls::new(data_id, group, "cluster");
        let service = "meshline-testkit-ready";
        let canary_ip = "192.0.2.1";
        let instance = format!("serviceName={service}&ip={canary_ip}&port=1&ephemeral=true");
        let mut published = false;
        let mut registered = false;
        let mut last = String::new();
        loop {
            if self.any_panicked() {
                return Err(Error::Other(format!(
                    "an rnacos node panicked while the cluster formed; last: {last}"
                )));
            }
            let http = |i: usize, method: &str, path: &str| {
                self.http(i, method, path, "").map_err(|e| e.to_string())
            };
            let mut step = || -> std::result::Result<(), String> {
                for i in 0..n {
                    let metrics = http(i, "GET", "/nacos/v1/raft/metrics")?;
                    let v: serde_json::Value = serde_json::from_str(&metrics)
                        .map_err(|e| format!("node {}: raft metrics {metrics:?}: {e}", i + 1))?;
                    let members = v["membership_config"]["members"]
                        .as_array()
                        .map_or(0, Vec::len);
                    if members != n || v["current_leader"].is_null() {
                        return Err(format!("node {}: raft {metrics}", i + 1));
                    }
                }
                if !published {
                    calls.publish_at(self.http_addr(0))?;
                    published = true;
                }
                for i in 0..n {
                    let (shown, answer) = calls.read_back_at(self.http_addr(i))?;
                    if !shown {
                        return Err(format!("node {}: canary config {answer:?}", i + 1));
                    }
                }
                if !registered {
                    let answer = http(0, "POST", &format!("/nacos/v1/ns/instance?{instance}"))?;
                    if answer.trim() != "ok" {
                        return Err(format!("canary instance: {answer:?}"));
                    }
                    registered = true;
                }
                for i in 0..n {
                    let list = http(
                        i,
                        "GET",
                        &format!("/nacos/v1/ns/instance/list?serviceName={service}"),
                    )?;
                    if !list.contains(canary_ip) {
                        return Err(format!(
                            "node {}: canary instance not listed: {list}",
                            i + 1
                        ));
                    }
                }
                Ok(())
            };
            match step() {
                Ok(()) => {
                    let _ = self.http(
                        0,
                        "DELETE",
                        &format!("/nacos/v1/ns/instance?{instance}"),
                        "",
                    );
                    return Ok(());
                }
                Err(e) => last = e,
            }
            if Instant::now() >= deadline {
                return Err(Error::Other(format!(
                    "the rnacos cluster did not form within {READY_TIMEOUT:?}: {last}"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// An HTTP/1.0 call to node `i`: the body of a 200 answer, else an error with the
    /// answer.
    pub fn http(&self, i: usize, method: &str, path: &str, body: &str) -> Result<String> {
        let request = format!(
            "{method} {path} HTTP/1.0\r\nHost: rnacos\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let answer = tcp_exchange_at(self.http_addr(i), request.as_bytes(), 1 << 20)
            .map_err(Error::Other)?;
        match answer.split_once("\r\n\r\n") {
            Some((_, b)) if is_ok(&answer) => Ok(b.to_string()),
            _ => Err(Error::Other(format!(
                "{method} {path} on node {}: {answer:?}",
                i + 1
            ))),
        }
    }

    /// `ip1:8848,ip2:8848,...`: every node's HTTP address (the gRPC port is HTTP +
    /// 1000), as `registry.nacos.serverAddr` takes a cluster.
    pub fn server_addr(&self) -> String {
        (0..self.len())
            .map(|i| self.http_addr(i).to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Node `i`'s HTTP address.
    pub fn http_addr(&self, i: usize) -> SocketAddr {
        SocketAddr::new(self.hosts[i].ip(), HOST_HTTP_PORT)
    }

    /// Node `i`'s gRPC address (what Nacos 2.x clients connect to).
    pub fn grpc_addr(&self, i: usize) -> SocketAddr {
        SocketAddr::new(self.hosts[i].ip(), HOST_GRPC_PORT)
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false (a cluster has at least one node).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `i`'s test host.
    pub fn host(&self, i: usize) -> &crate::net::Host {
        &self.hosts[i]
    }

    /// Node `i`'s process.
    pub fn node(&mut self, i: usize) -> &mut ServerProcess {
        &mut self.nodes[i]
    }

    /// The node whose gRPC address is `addr`, if any.
    pub fn node_at(&self, addr: SocketAddr) -> Option<usize> {
        (0..self.len()).find(|&i| self.grpc_addr(i) == addr)
    }

    /// Blackholes node `i`'s host ([`Host::cut`](crate::net::Host::cut)): its clients
    /// and the other nodes see it fall silent, without FIN or RST.
    pub fn cut(&self, i: usize) -> Result<()> {
        self.hosts[i].cut().map_err(Error::Other)
    }

    /// Ends a [`cut`](Self::cut) of node `i` and waits until it answers `/health`.
    pub fn restore(&mut self, i: usize) -> Result<()> {
        self.hosts[i].restore().map_err(Error::Other)?;
        self.nodes[i].wait_ready(Instant::now() + READY_TIMEOUT)
    }
}
