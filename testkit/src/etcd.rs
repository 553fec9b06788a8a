//! etcd 3.x: a single node, or a cluster of members on loopback.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::process::{
    Probe, ServerProcess, free_ports, require_binary, start_with_port_retry, tcp_exchange_at,
};
use crate::{Error, READY_TIMEOUT, Result, io_err};

const INSTALL: &str = "apt-get install -y etcd-server etcd-client";

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// One HTTP/1.0 request to an etcd client address; returns the body of a 200 answer.
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> std::result::Result<String, String> {
    http_limited(addr, method, path, body, 1 << 20)
}

/// [`http`] reading at most `max` bytes of the answer.
fn http_limited(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    max: usize,
) -> std::result::Result<String, String> {
    let req = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let resp = tcp_exchange_at(addr, req.as_bytes(), max)?;
    let (head, body) = resp
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("malformed HTTP answer: {resp:?}"))?;
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200") {
        return Err(format!("{method} {path}: {status}: {body}"));
    }
    Ok(body.to_string())
}

fn health_probe(addr: SocketAddr) -> Probe {
    Arc::new(move || {
        let body = http(addr, "GET", "/health", "")?;
        if body.replace(' ', "").contains("\"health\":\"true\"") {
            Ok(())
        } else {
            Err(format!("/health says {body}"))
        }
    })
}

/// `(member_id, leader_id)` as reported by `/v3/maintenance/status` of one member.
fn member_status(addr: SocketAddr) -> std::result::Result<(String, String), String> {
    let body = http(addr, "POST", "/v3/maintenance/status", "{}")?;
    let v: serde_json::Value =
        serde_json::from_str(&body).map_err(|e| format!("bad status JSON {body:?}: {e}"))?;
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let member = text(&v["header"]["member_id"]);
    let leader = text(&v["leader"]);
    if leader.is_empty() || leader == "null" || leader == "0" {
        return Err(format!("no leader yet: {body}"));
    }
    Ok((member, leader))
}

fn member_args(
    name: &str,
    data: &Path,
    client: SocketAddr,
    peer: SocketAddr,
    initial_cluster: &str,
    token: &str,
) -> Vec<OsString> {
    let client_url = format!("http://{client}");
    let peer_url = format!("http://{peer}");
    [
        "--name",
        name,
        "--data-dir",
        &data.display().to_string(),
        "--listen-client-urls",
        &client_url,
        "--advertise-client-urls",
        &client_url,
        "--listen-peer-urls",
        &peer_url,
        "--initial-advertise-peer-urls",
        &peer_url,
        "--initial-cluster",
        initial_cluster,
        "--initial-cluster-token",
        token,
        "--initial-cluster-state",
        "new",
        "--logger=zap",
        "--log-outputs=stderr",
    ]
    .iter()
    .map(OsString::from)
    .collect()
}

/// Sums the counter `name` of etcd's Prometheus text over the series whose labels
/// contain every one of `labels` (`key="value"` pairs as written in the text).
fn sum_counter(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (series, value) = rest.rsplit_once(' ')?;
            if !(series.is_empty() || series.starts_with('{')) {
                return None; // another metric whose name starts with `name`
            }
            labels
                .iter()
                .all(|want| series.contains(want))
                .then(|| value.trim().parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// A single-node etcd on a free port (`etcd` from apt `etcd-server`).
///
/// It runs with etcd's **default** gRPC keep-alive policy (no `--grpc-keepalive-*`
/// flag is passed): like a stock etcd, it closes the connection of a client that pings
/// more often than every 5 s (`--grpc-keepalive-min-time`), or pings at all while no
/// stream is open. Tests of client keep-alive settings rely on this.
///
/// ```no_run
/// let etcd = meshline_testkit::Etcd::start().expect("etcd");
/// let endpoint = etcd.endpoint(); // "http://127.0.0.1:<port>"
/// ```
pub struct Etcd {
    process: ServerProcess,
    client_port: u16,
    /// Serving clients over TLS ([`Etcd::start_tls`]).
    tls: bool,
    _dir: TempDir,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("endpoint", &self.endpoint())
            .field("process", &self.process)
            .finish()
    }
}

impl Etcd {
    /// Starts etcd and waits until `/health` says true.
    pub fn start() -> Result<Etcd> {
        Etcd::start_with(None)
    }

    /// Starts etcd serving its clients over TLS only (`https://`, [`Etcd::endpoint`])
    /// with `pki`'s server certificate (`--cert-file`, `--key-file`); with
    /// `client_cert_auth`, clients must present a certificate `pki`'s CA signed
    /// (`--client-cert-auth --trusted-ca-file`). Readiness is probed on a plain
    /// `--listen-metrics-urls` port.
    pub fn start_tls(pki: &crate::TestPki, client_cert_auth: bool) -> Result<Etcd> {
        let mut tls: Vec<OsString> = vec![
            "--cert-file".into(),
            pki.server_cert().into(),
            "--key-file".into(),
            pki.server_key().into(),
        ];
        if client_cert_auth {
            tls.push("--client-cert-auth".into());
            tls.push("--trusted-ca-file".into());
            tls.push(pki.ca().into());
        }
        Etcd::start_with(Some(tls))
    }

    fn start_with(tls: Option<Vec<OsString>>) -> Result<Etcd> {
        require_binary("etcd", INSTALL)?;
        start_with_port_retry(
            if tls.is_some() { 3 } else { 2 },
            |ports| {
                let dir = tempfile::Builder::new()
                    .prefix("meshline-etcd-")
                    .tempdir()
                    .map_err(io_err("create a temp dir for etcd"))?;
                let (client, peer) = (ports[0], ports[1]);
                let mut args = member_args(
                    "t1",
                    &dir.path().join("data"),
                    local(client),
                    local(peer),
                    &format!("t1=http://127.0.0.1:{peer}"),
                    &format!("meshline-{client}"),
                );
                let mut probe_port = client;
                if let Some(tls) = &tls {
                    let https = format!("https://127.0.0.1:{client}");
                    for a in args.iter_mut() {
                        if *a == OsString::from(format!("http://127.0.0.1:{client}")) {
                            *a = https.clone().into();
                        }
                    }
                    probe_port = ports[2];
                    args.push("--listen-metrics-urls".into());
                    args.push(format!("http://127.0.0.1:{probe_port}").into());
                    args.extend(tls.iter().cloned());
                }
                let process = ServerProcess::new(
                    "etcd",
                    dir.path().to_path_buf(),
                    "etcd",
                    args,
                    health_probe(local(probe_port)),
                );
                Ok(Etcd {
                    process,
                    client_port: client,
                    tls: tls.is_some(),
                    _dir: dir,
                })
            },
            |e| &mut e.process,
        )
    }

    /// `http://127.0.0.1:<port>` (`https://` when started with [`Etcd::start_tls`]):
    /// what etcd clients connect to.
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.client_port
    }

    /// The server's Prometheus metrics (`GET /metrics` on the client port), as text.
    pub fn metrics(&self) -> Result<String> {
        http_limited(local(self.client_port), "GET", "/metrics", "", 16 << 20).map_err(Error::Other)
    }

    /// How many calls or streams of the etcd gRPC method `method` (`Range`, `Put`,
    /// `Watch`, `LeaseKeepAlive`, `LeaseGrant`...) of etcd's own services
    /// (`etcdserverpb.*`) the server has started since it was (re)started, from its
    /// `grpc_server_started_total` counters. A client that re-opens a watch or a lease
    /// keep-alive stream, or re-lists, makes the matching count grow.
    pub fn grpc_started(&self, method: &str) -> Result<u64> {
        let text = self.metrics()?;
        if !text.contains("grpc_server_started_total") {
            return Err(Error::Other(format!(
                "etcd's /metrics has no grpc_server_started_total: {}",
                text.chars().take(200).collect::<String>()
            )));
        }
        let method = format!("grpc_method=\"{method}\"");
        let n = sum_counter(
            &text,
            "grpc_server_started_total",
            &[&method, "grpc_service=\"etcdserverpb."],
        );
        Ok(n as u64)
    }

    /// The process, for [`ServerProcess::kill`], [`ServerProcess::restart`] and friends.
    pub fn process(&mut self) -> &mut ServerProcess {
        &mut self.process
    }

    /// `SIGKILL`s the server and waits for it.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts the server again on the same ports and data dir; waits until healthy.
    pub fn restart(&mut self) -> Result<()> {
        self.process.restart()
    }

    /// Kills the server, deletes its data and starts it again on the same ports: an
    /// etcd that lost everything, whose revisions start again from 1.
    pub fn restart_empty(&mut self) -> Result<()> {
        self.process.kill();
        let data = self._dir.path().join("data");
        std::fs::remove_dir_all(&data).map_err(io_err(format!("remove {}", data.display())))?;
        self.process.restart()
    }
}

/// Several etcd members forming one cluster (three by default): on loopback
/// ([`start`](Self::start)), or each member on its own test host, a network namespace
/// ([`start_on_hosts`](Self::start_on_hosts)), where a member can be
/// [`cut`](Self::cut) off (blackholed: no FIN, no RST) and [`restore`](Self::restore)d.
///
/// Find the leader with [`leader`](Self::leader), kill it with
/// [`kill_leader`](Self::kill_leader), bring a member back with
/// [`restart_member`](Self::restart_member).
pub struct EtcdCluster {
    // Field order is drop order: the members stop before their hosts go.
    members: Vec<ServerProcess>,
    client_addrs: Vec<SocketAddr>,
    /// One per member when started on hosts; empty on loopback.
    hosts: Vec<crate::net::Host>,
    /// Members currently cut off (not asked by [`leader`](Self::leader)).
    cut: Vec<bool>,
    _dir: TempDir,
}

impl std::fmt::Debug for EtcdCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdCluster")
            .field("endpoints", &self.endpoints())
            .field("members", &self.members)
            .field("hosts", &self.hosts)
            .finish()
    }
}

/// The etcd client and peer ports inside a test host (each host has its own ports).
const HOST_CLIENT_PORT: u16 = 2379;
const HOST_PEER_PORT: u16 = 2380;

impl EtcdCluster {
    /// Starts a 3-member cluster and waits until every member reports a healthy
    /// cluster (a leader elected).
    pub fn start() -> Result<EtcdCluster> {
        EtcdCluster::start_with(3)
    }

    /// Starts an `n`-member cluster (1..=7).
    pub fn start_with(n: usize) -> Result<EtcdCluster> {
        check_size(n)?;
        require_binary("etcd", INSTALL)?;
        let mut last_err = None;
        for _ in 0..crate::PORT_ATTEMPTS {
            let ports = free_ports(2 * n)?;
            let addrs: Vec<(SocketAddr, SocketAddr)> = (0..n)
                .map(|i| (local(ports[2 * i]), local(ports[2 * i + 1])))
                .collect();
            match EtcdCluster::launch(addrs, Vec::new())? {
                Ok(cluster) => return Ok(cluster),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| Error::Other("no start attempt was made".into())))
    }

    /// Starts an `n`-member cluster (1..=7) with each member on a test host of its own
    /// ([`crate::net::Host`], a network namespace; the hosts reach each other through
    /// the test's namespace, see [`Host::forward`](crate::net::Host::forward)), serving
    /// clients at `http://<host address>:2379`. Needs what the test network needs (see
    /// [`crate::net::skip_reason`]). The hosts are removed when the cluster drops.
    pub fn start_on_hosts(n: usize) -> Result<EtcdCluster> {
        check_size(n)?;
        require_binary("etcd", INSTALL)?;
        let mut hosts = Vec::with_capacity(n);
        for _ in 0..n {
            let host = crate::net::Host::new().map_err(Error::Other)?;
            host.forward().map_err(Error::Other)?;
            hosts.push(host);
        }
        let addrs = hosts
            .iter()
            .map(|h| {
                (
                    SocketAddr::new(h.ip(), HOST_CLIENT_PORT),
                    SocketAddr::new(h.ip(), HOST_PEER_PORT),
                )
            })
            .collect();
        EtcdCluster::launch(addrs, hosts)?
    }

    /// Starts one member per `(client, peer)` address pair, inside `hosts[i]` when
    /// given. The outer error is final; the inner one is worth another attempt on
    /// other ports (a member exited, e.g. its port was taken).
    fn launch(
        addrs: Vec<(SocketAddr, SocketAddr)>,
        hosts: Vec<crate::net::Host>,
    ) -> Result<Result<EtcdCluster>> {
        let n = addrs.len();
        let dir = tempfile::Builder::new()
            .prefix("meshline-etcd-cluster-")
            .tempdir()
            .map_err(io_err("create a temp dir for the etcd cluster"))?;
        let initial: Vec<String> = addrs
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://{peer}"))
            .collect();
        let initial = initial.join(",");
        let token = format!("meshline-cluster-{}", addrs[0].0);
        let mut members = Vec::with_capacity(n);
        for (i, (client, peer)) in addrs.iter().enumerate() {
            let mdir = dir.path().join(format!("m{i}"));
            std::fs::create_dir_all(&mdir).map_err(io_err(format!("create {}", mdir.display())))?;
            let mut args = member_args(
                &format!("m{i}"),
                &mdir.join("data"),
                *client,
                *peer,
                &initial,
                &token,
            );
            let program = match hosts.get(i) {
                // `ip netns exec` execs etcd in the namespace: the child is etcd.
                Some(host) => {
                    let mut wrapped: Vec<OsString> = vec![
                        "netns".into(),
                        "exec".into(),
                        host.name().into(),
                        "etcd".into(),
                    ];
                    wrapped.append(&mut args);
                    args = wrapped;
                    "ip"
                }
                None => "etcd",
            };
            members.push(ServerProcess::new(
                format!("etcd member m{i}"),
                mdir,
                program,
                args,
                health_probe(*client),
            ));
        }
        let mut cluster = EtcdCluster {
            members,
            client_addrs: addrs.iter().map(|(c, _)| *c).collect(),
            hosts,
            cut: vec![false; n],
            _dir: dir,
        };
        // All members must run before any can elect a leader.
        for m in &mut cluster.members {
            m.spawn()?;
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        for m in &mut cluster.members {
            if let Err(e) = m.wait_ready(deadline) {
                let any_exited = cluster.members.iter_mut().any(|m| m.exited());
                if any_exited && cluster.hosts.is_empty() {
                    return Ok(Err(e));
                }
                return Err(e);
            }
        }
        Ok(Ok(cluster))
    }

    /// Every member's client URL (`http://<address>:<port>`), in member order.
    pub fn endpoints(&self) -> Vec<String> {
        self.client_addrs
            .iter()
            .map(|a| format!("http://{a}"))
            .collect()
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always false (a cluster has at least one member).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Member `i`'s process.
    pub fn member(&mut self, i: usize) -> &mut ServerProcess {
        &mut self.members[i]
    }

    /// Member `i`'s test host, when the cluster was started on hosts.
    pub fn host(&self, i: usize) -> Option<&crate::net::Host> {
        self.hosts.get(i)
    }

    /// Blackholes member `i`'s host ([`Host::cut`](crate::net::Host::cut)): its
    /// clients and its peers see it fall silent, without FIN or RST. Only for a
    /// cluster started with [`start_on_hosts`](Self::start_on_hosts).
    pub fn cut(&mut self, i: usize) -> Result<()> {
        let host = self.hosts.get(i).ok_or_else(|| {
            Error::Other("only a cluster started on hosts can cut a member".into())
        })?;
        host.cut().map_err(Error::Other)?;
        self.cut[i] = true;
        Ok(())
    }

    /// Ends a [`cut`](Self::cut) of member `i` and waits until it answers as healthy
    /// again (caught up with a leader).
    pub fn restore(&mut self, i: usize) -> Result<()> {
        let host = self.hosts.get(i).ok_or_else(|| {
            Error::Other("only a cluster started on hosts can cut a member".into())
        })?;
        host.restore().map_err(Error::Other)?;
        self.cut[i] = false;
        self.members[i].wait_ready(Instant::now() + READY_TIMEOUT)
    }

    /// Member `i`'s Prometheus metrics (`GET /metrics` on its client address).
    pub fn metrics(&self, i: usize) -> Result<String> {
        http_limited(self.client_addrs[i], "GET", "/metrics", "", 16 << 20).map_err(Error::Other)
    }

    /// How many streams or calls of etcd's gRPC method `method` (`Watch`,
    /// `LeaseKeepAlive`, `Range`...) member `i` has open now: started minus handled
    /// (`grpc_server_started_total - grpc_server_handled_total`). Tells which member a
    /// client's watch or lease keep-alive stream is on.
    pub fn open_streams(&self, i: usize, method: &str) -> Result<u64> {
        let text = self.metrics(i)?;
        let m = format!("grpc_method=\"{method}\"");
        let labels = [m.as_str(), "grpc_service=\"etcdserverpb."];
        let started = sum_counter(&text, "grpc_server_started_total", &labels);
        let handled = sum_counter(&text, "grpc_server_handled_total", &labels);
        Ok((started - handled).max(0.0) as u64)
    }

    /// How many calls or streams of `method` member `i` has started (see
    /// [`Etcd::grpc_started`]).
    pub fn grpc_started(&self, i: usize, method: &str) -> Result<u64> {
        let text = self.metrics(i)?;
        let m = format!("grpc_method=\"{method}\"");
        let n = sum_counter(
            &text,
            "grpc_server_started_total",
            &[m.as_str(), "grpc_service=\"etcdserverpb."],
        );
        Ok(n as u64)
    }

    /// The index of the current leader, asking the running members that are not cut
    /// off; waits (up to [`READY_TIMEOUT`]) while an election is in progress.
    pub fn leader(&mut self) -> Result<usize> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut last = String::from("no member answered");
        loop {
            let mut ids: Vec<Option<String>> = vec![None; self.members.len()];
            let mut leader_id = None;
            for (i, addr) in self.client_addrs.iter().enumerate() {
                if !self.members[i].is_running() || self.members[i].is_paused() || self.cut[i] {
                    continue;
                }
                match member_status(*addr) {
                    Ok((member, leader)) => {
                        ids[i] = Some(member);
                        leader_id = Some(leader);
                    }
                    Err(e) => last = e,
                }
            }
            if let Some(leader) = leader_id
                && let Some(i) = ids.iter().position(|m| m.as_deref() == Some(&leader))
            {
                return Ok(i);
            }
            if Instant::now() >= deadline {
                return Err(Error::Other(format!(
                    "no etcd leader found within {READY_TIMEOUT:?}: {last}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `SIGKILL`s the current leader and returns its index.
    pub fn kill_leader(&mut self) -> Result<usize> {
        let i = self.leader()?;
        self.members[i].kill();
        Ok(i)
    }

    /// `SIGKILL`s member `i`.
    pub fn kill_member(&mut self, i: usize) {
        self.members[i].kill();
    }

    /// Starts member `i` again on its ports and data dir; waits until it is healthy.
    pub fn restart_member(&mut self, i: usize) -> Result<()> {
        self.members[i].restart()
    }
}

fn check_size(n: usize) -> Result<()> {
    if !(1..=7).contains(&n) {
        return Err(Error::Other(format!(
            "an etcd test cluster has 1..=7 members, not {n}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::sum_counter;

    #[test]
    fn counters_are_summed_over_matching_series_only() {
        let text = "# HELP grpc_server_started_total x\n\
            grpc_server_started_total{grpc_method=\"Watch\",grpc_service=\"etcdserverpb.Watch\",grpc_type=\"bidi_stream\"} 3\n\
            grpc_server_started_total{grpc_method=\"Watch\",grpc_service=\"grpc.health.v1.Health\",grpc_type=\"server_stream\"} 7\n\
            grpc_server_started_total{grpc_method=\"Range\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 2\n\
            grpc_server_started_total_other{grpc_method=\"Watch\",grpc_service=\"etcdserverpb.Watch\"} 100\n";
        let watch = sum_counter(
            text,
            "grpc_server_started_total",
            &["grpc_method=\"Watch\"", "grpc_service=\"etcdserverpb."],
        );
        assert_eq!(watch, 3.0);
        assert_eq!(
            sum_counter(
                text,
                "grpc_server_started_total",
                &["grpc_method=\"Range\""]
            ),
            2.0
        );
    }
}
