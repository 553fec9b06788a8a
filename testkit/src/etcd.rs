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

mod cluster;
pub use cluster::EtcdCluster;

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
#[derive(Debug)]
pub struct Etcd {
    process: ServerProcess,
    client_port: u16,
    /// Serving clients over TLS ([`Etcd::start_tls`]).
    tls: bool,
    _dir: TempDir,
}

crate::process::owns_process!(Etcd);

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

    /// Kills the server, deletes its data and starts it again on the same ports: an
    /// etcd that lost everything, whose revisions start again from 1.
    pub fn restart_empty(&mut self) -> Result<()> {
        self.process.kill();
        let data = self._dir.path().join("data");
        std::fs::remove_dir_all(&data).map_err(io_err(format!("remove {}", data.display())))?;
        self.process.restart()
    }
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
