//! [`RnacosCluster`]: three (or more) rnacos nodes joined as one cluster, each on a
//! loopback port or on a test-network host of its own.

use super::*;
use crate::HostedServers;
use crate::process::Probe;

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
/// test's namespace), where a node can be [`cut`](HostedServers::cut) off (blackholed:
/// no FIN, no RST) and [`restore`](HostedServers::restore)d (until it answers
/// `/health`): its nodes are [`HostedServers`].
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
#[derive(Debug)]
pub struct RnacosCluster {
    nodes: HostedServers,
}

impl RnacosCluster {
    /// Starts an `n`-node cluster (1..=7) with each node on a test host of its own and
    /// waits until it is ready (see the type's docs). Needs what the test network needs
    /// (see [`crate::net::skip_reason`]) and `rnacos`.
    pub fn start_on_hosts(n: usize) -> Result<RnacosCluster> {
        HostedServers::check_size(n, "an rnacos test cluster", "nodes")?;
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
        let hosts = HostedServers::new_hosts(n)?;
        let dir = tempfile::Builder::new()
            .prefix("meshline-rnacos-cluster-")
            .tempdir()
            .map_err(io_err("create a temp dir for the rnacos cluster"))?;
        let first = SocketAddr::new(hosts[0].ip(), HOST_GRPC_PORT);
        let dir_path = dir.path().to_path_buf();
        let nodes = HostedServers::on_hosts(hosts, dir, "rnacos node", |i, host| {
            let ndir = dir_path.join(format!("node{}", i + 1));
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
            let command = vec![bin.into(), "-e".into(), env_file.into_os_string()];
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
            Ok((ndir, command, probe as Probe))
        })?;
        let mut cluster = RnacosCluster { nodes };
        let deadline = Instant::now() + READY_TIMEOUT;
        // One node at a time: node 1 initialises raft, then each other node asks it to
        // join (once, 500 ms after its start) and is in the membership before the next
        // starts. A join sent before node 1's raft has a leader, or while another
        // membership change is under way, is lost: then the whole cluster starts again.
        for i in 0..n {
            let node = cluster.member(i);
            node.spawn()?;
            if let Err(e) = node.wait_ready(deadline) {
                if node.panicked_while_starting() {
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
            .servers
            .iter()
            .any(|n| n.log_tail(400).contains("panicked at"))
    }

    /// Waits until raft has every node, configs replicate and naming instances reach
    /// every node.
    fn wait_formed(&self, deadline: Instant) -> Result<()> {
        let n = self.len();
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
        self.nodes.host_addrs(HOST_HTTP_PORT)
    }

    /// Node `i`'s HTTP address.
    pub fn http_addr(&self, i: usize) -> SocketAddr {
        self.nodes.host_addr(i, HOST_HTTP_PORT)
    }

    /// Node `i`'s gRPC address (what Nacos 2.x clients connect to).
    pub fn grpc_addr(&self, i: usize) -> SocketAddr {
        self.nodes.host_addr(i, HOST_GRPC_PORT)
    }

    /// Node `i`'s test host.
    pub fn host(&self, i: usize) -> &crate::net::Host {
        &self.nodes.hosts[i]
    }

    /// Node `i`'s process.
    pub fn node(&mut self, i: usize) -> &mut ServerProcess {
        self.member(i)
    }

    /// The node whose gRPC address is `addr`, if any.
    pub fn node_at(&self, addr: SocketAddr) -> Option<usize> {
        (0..self.len()).find(|&i| self.grpc_addr(i) == addr)
    }
}

crate::process::derefs_to!(RnacosCluster, nodes: HostedServers);
