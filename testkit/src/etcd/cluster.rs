//! [`EtcdCluster`]: an etcd cluster of real members, each on loopback ports or on a
//! test-network host of its own.

use super::*;
use crate::HostedServers;

/// Several etcd members forming one cluster (three by default): on loopback
/// ([`start`](Self::start)), or each member on its own test host, a network namespace
/// ([`start_on_hosts`](Self::start_on_hosts)), where a member can be
/// [`cut`](HostedServers::cut) off (blackholed: no FIN, no RST) and
/// [`restore`](HostedServers::restore)d (until it answers as healthy again, caught up
/// with a leader): its members are [`HostedServers`].
///
/// Find the leader with [`leader`](Self::leader), kill it with
/// [`kill_leader`](Self::kill_leader), bring a member back with
/// [`restart_member`](Self::restart_member).
#[derive(Debug)]
pub struct EtcdCluster {
    /// A member cut off is not asked by [`leader`](Self::leader).
    members: HostedServers,
    client_addrs: Vec<SocketAddr>,
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
        let hosts = HostedServers::new_hosts(n)?;
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
                    args.insert(0, "etcd".into());
                    args = crate::hosted::in_host(host, args);
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
        let on_loopback = hosts.is_empty();
        let mut cluster = EtcdCluster {
            members: HostedServers::new(members, hosts, dir),
            client_addrs: addrs.iter().map(|(c, _)| *c).collect(),
        };
        let members = &mut cluster.members.servers;
        // All members must run before any can elect a leader.
        for m in members.iter_mut() {
            m.spawn()?;
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        for m in members.iter_mut() {
            if let Err(e) = m.wait_ready(deadline) {
                let any_exited = members.iter_mut().any(|m| m.exited());
                if any_exited && on_loopback {
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

    /// Member `i`'s test host, when the cluster was started on hosts.
    pub fn host(&self, i: usize) -> Option<&crate::net::Host> {
        self.members.hosts.get(i)
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
            let mut ids: Vec<Option<String>> = vec![None; self.len()];
            let mut leader_id = None;
            for (i, addr) in self.client_addrs.iter().enumerate() {
                let m = &mut self.members.servers[i];
                if !m.is_running() || m.is_paused() || self.members.cut[i] {
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
        self.member(i).kill();
        Ok(i)
    }

    /// `SIGKILL`s member `i`.
    pub fn kill_member(&mut self, i: usize) {
        self.member(i).kill();
    }

    /// Starts member `i` again on its ports and data dir; waits until it is healthy.
    pub fn restart_member(&mut self, i: usize) -> Result<()> {
        self.member(i).restart()
    }
}

crate::process::derefs_to!(EtcdCluster, members: HostedServers);

fn check_size(n: usize) -> Result<()> {
    HostedServers::check_size(n, "an etcd test cluster", "members")
}
