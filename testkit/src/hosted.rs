//! [`HostedServers`]: the servers of a test cluster, each on a test host of its own,
//! as [`crate::EtcdCluster`], [`crate::RnacosCluster`] and [`crate::ZkEnsemble`] keep
//! them.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Instant;

use tempfile::TempDir;

use crate::net::Host;
use crate::process::{Probe, ServerProcess};
use crate::{Error, READY_TIMEOUT, Result};

/// The servers of a test cluster, each on a [`Host`] of its own (a network namespace;
/// the hosts reach each other through the test's namespace), where a server can be
/// [`cut`](Self::cut) off (blackholed: no FIN, no RST) and [`restore`](Self::restore)d.
/// The clusters deref to it, so that these calls read the same on each of them. An
/// [`EtcdCluster`](crate::EtcdCluster) started on loopback has no hosts: it cannot cut
/// its members.
#[derive(Debug)]
pub struct HostedServers {
    // Field order is drop order: the servers stop before their hosts and their dir go.
    pub(crate) servers: Vec<ServerProcess>,
    /// One per server, or none (loopback).
    pub(crate) hosts: Vec<Host>,
    /// Servers currently cut off (left out when a cluster asks for its leader).
    pub(crate) cut: Vec<bool>,
    /// The servers' data and logs, removed once they have stopped.
    _dir: TempDir,
}

impl HostedServers {
    /// `servers`, server `i` on `hosts[i]` (or on loopback when `hosts` is empty), none
    /// cut off; their data and logs in `dir`.
    pub(crate) fn new(
        servers: Vec<ServerProcess>,
        hosts: Vec<Host>,
        dir: TempDir,
    ) -> HostedServers {
        let cut = vec![false; servers.len()];
        HostedServers {
            servers,
            hosts,
            cut,
            _dir: dir,
        }
    }

    /// `Ok` for a cluster of 1 to 7 servers; else an error that says so of `kind` (the
    /// cluster, as "an etcd test cluster") and its `servers` ("members").
    pub(crate) fn check_size(n: usize, kind: &str, servers: &str) -> Result<()> {
        if !(1..=7).contains(&n) {
            return Err(Error::Other(format!("{kind} has 1..=7 {servers}, not {n}")));
        }
        Ok(())
    }

    /// A server inside each of `hosts`, named `{kind} {i + 1}`: `server(i, host)` gives
    /// server `i`'s dir (its log goes there), its command line and its readiness probe.
    /// None is started yet; the servers' data and logs are in `dir`.
    pub(crate) fn on_hosts(
        hosts: Vec<Host>,
        dir: TempDir,
        kind: &str,
        mut server: impl FnMut(usize, &Host) -> Result<(PathBuf, Vec<OsString>, Probe)>,
    ) -> Result<HostedServers> {
        let mut servers = Vec::with_capacity(hosts.len());
        for (i, host) in hosts.iter().enumerate() {
            let (server_dir, command, probe) = server(i, host)?;
            let name = format!("{kind} {}", i + 1);
            let args = in_host(host, command);
            servers.push(ServerProcess::new(name, server_dir, "ip", args, probe));
        }
        Ok(HostedServers::new(servers, hosts, dir))
    }

    /// `n` new hosts that reach each other ([`Host::forward`]).
    pub(crate) fn new_hosts(n: usize) -> Result<Vec<Host>> {
        let mut hosts = Vec::with_capacity(n);
        for _ in 0..n {
            let host = Host::new().map_err(Error::Other)?;
            host.forward().map_err(Error::Other)?;
            hosts.push(host);
        }
        Ok(hosts)
    }

    /// Number of servers.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Always false (a cluster has at least one server).
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Server `i`'s process.
    pub fn member(&mut self, i: usize) -> &mut ServerProcess {
        &mut self.servers[i]
    }

    /// Blackholes server `i`'s host ([`Host::cut`]): its clients and its peers see it
    /// fall silent, without FIN or RST.
    pub fn cut(&mut self, i: usize) -> Result<()> {
        self.host_to_cut(i)?.cut().map_err(Error::Other)?;
        self.cut[i] = true;
        Ok(())
    }

    /// Ends a [`cut`](Self::cut) of server `i` and waits until it is ready again (its
    /// cluster's readiness probe: healthy, serving, answering).
    pub fn restore(&mut self, i: usize) -> Result<()> {
        self.host_to_cut(i)?.restore().map_err(Error::Other)?;
        self.cut[i] = false;
        self.servers[i].wait_ready(Instant::now() + READY_TIMEOUT)
    }

    /// Server `i`'s address on `port` of its host.
    pub(crate) fn host_addr(&self, i: usize, port: u16) -> SocketAddr {
        SocketAddr::new(self.hosts[i].ip(), port)
    }

    /// `ip1:port,ip2:port,...`: every server's address on `port`, in server order (a
    /// cluster's address as its clients take it).
    pub(crate) fn host_addrs(&self, port: u16) -> String {
        (0..self.len())
            .map(|i| self.host_addr(i, port).to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    fn host_to_cut(&self, i: usize) -> Result<&Host> {
        self.hosts
            .get(i)
            .ok_or_else(|| Error::Other("only a cluster started on hosts can cut a member".into()))
    }
}

/// The arguments of `ip` that run `command` (a program and its arguments) inside
/// `host`: `ip netns exec` execs it in the namespace, so the child is the server itself.
pub(crate) fn in_host(host: &Host, command: Vec<OsString>) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["netns".into(), "exec".into(), host.name().into()];
    args.extend(command);
    args
}
