//! ZooKeeper 3.x (`java -cp /usr/share/java/zookeeper.jar`): standalone on loopback
//! ([`ZooKeeper`]), or an ensemble with each server on a test host of its own
//! ([`ZkEnsemble`]).

use std::ffi::OsString;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::process::{
    Probe, ServerProcess, require_binary, require_file, start_with_port_retry, tcp_exchange,
    tcp_exchange_at,
};
use crate::{Error, HostedServers, READY_TIMEOUT, Result, io_err};

const INSTALL: &str = "apt-get install -y zookeeper";
const JAR: &str = "/usr/share/java/zookeeper.jar";
const SLF4J: &str = "/usr/share/java/slf4j-simple.jar";

/// A standalone ZooKeeper on a free port, with `tickTime=500` so that session timeouts
/// from 1 s to 60 s are accepted (tests use short sessions).
///
/// A restart keeps the data dir, so sessions and ephemeral nodes survive in its
/// snapshot and txn log. [`pause`](ServerProcess::pause) (`SIGSTOP`: the server keeps
/// its socket but answers nothing) past a client's session timeout, then
/// [`resume`](ServerProcess::resume), expires that client's session: on resume the server's
/// session tracker finds the session overdue and closes it, deleting its ephemerals.
#[derive(Debug)]
pub struct ZooKeeper {
    process: ServerProcess,
    port: u16,
    /// The secureClientPort, when started with [`ZooKeeper::start_tls`].
    secure_port: Option<u16>,
    _dir: TempDir,
}

crate::process::owns_process!(ZooKeeper);

impl ZooKeeper {
    /// Starts ZooKeeper and waits until `srvr` reports it serving.
    pub fn start() -> Result<ZooKeeper> {
        ZooKeeper::start_with(None)
    }

    /// Starts ZooKeeper serving TLS on [`ZooKeeper::secure_connect_string`] (Netty
    /// `secureClientPort`, PEM key and trust stores) with `pki`'s server certificate;
    /// with `require_client_cert`, clients must present a certificate `pki`'s CA
    /// signed (`ssl.clientAuth=need`). The plain port stays open for the readiness
    /// probe. Debian's `zookeeper` package ships the Netty jars this needs.
    pub fn start_tls(pki: &crate::TestPki, require_client_cert: bool) -> Result<ZooKeeper> {
        ZooKeeper::start_with(Some((pki, require_client_cert)))
    }

    fn start_with(tls: Option<(&crate::TestPki, bool)>) -> Result<ZooKeeper> {
        require_binary("java", INSTALL)?;
        require_file(JAR, INSTALL)?;
        start_with_port_retry(
            if tls.is_some() { 2 } else { 1 },
            |ports| {
                let port = ports[0];
                let secure_port = tls.map(|_| ports[1]);
                let dir = tempfile::Builder::new()
                    .prefix("meshline-zk-")
                    .tempdir()
                    .map_err(io_err("create a temp dir for zookeeper"))?;
                let data = dir.path().join("data");
                std::fs::create_dir_all(&data).map_err(io_err("create the zookeeper data dir"))?;
                let cfg = dir.path().join("zoo.cfg");
                std::fs::write(
                    &cfg,
                    format!(
                        "tickTime=500\nminSessionTimeout=1000\nmaxSessionTimeout=60000\n\
                         dataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
                         maxClientCnxns=0\nadmin.enableServer=false\n\
                         4lw.commands.whitelist=ruok,srvr,stat,mntr,conf,cons\n",
                        data.display()
                    ),
                )
                .map_err(io_err("write zoo.cfg"))?;
                let mut cp = classpath();
                if let (Some((pki, need)), Some(sp)) = (tls, secure_port) {
                    let read = |p: std::path::PathBuf| {
                        std::fs::read_to_string(&p).map_err(io_err(format!("read {}", p.display())))
                    };
                    let keystore = dir.path().join("server-keystore.pem");
                    std::fs::write(
                        &keystore,
                        read(pki.server_cert())? + &read(pki.server_key())?,
                    )
                    .map_err(io_err("write the zookeeper key store"))?;
                    let auth = if need { "need" } else { "none" };
                    let extra = format!(
                        "secureClientPort={sp}\nsecureClientPortAddress=127.0.0.1\n\
                         serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
                         ssl.keyStore.location={}\nssl.keyStore.type=PEM\n\
                         ssl.trustStore.location={}\nssl.trustStore.type=PEM\n\
                         ssl.clientAuth={auth}\n",
                        keystore.display(),
                        pki.ca().display()
                    );
                    let mut text = std::fs::read_to_string(&cfg).map_err(io_err("read zoo.cfg"))?;
                    text.push_str(&extra);
                    std::fs::write(&cfg, text).map_err(io_err("write zoo.cfg"))?;
                    // Netty (NettyServerCnxnFactory), from Debian's libnetty-java.
                    let mut netty: Vec<String> = std::fs::read_dir("/usr/share/java")
                        .map_err(io_err("list /usr/share/java"))?
                        .filter_map(|e| e.ok())
                        .map(|e| e.path().display().to_string())
                        .filter(|p| {
                            let n = p.rsplit('/').next().unwrap_or_default();
                            n.starts_with("netty-") && n.ends_with(".jar") && !n.contains("Final")
                        })
                        .collect();
                    netty.sort();
                    for j in netty {
                        cp.push(':');
                        cp.push_str(&j);
                    }
                }
                let args = java_args(&cp, "org.apache.zookeeper.server.ZooKeeperServerMain", &cfg);
                let probe = Arc::new(move || {
                    let answer = tcp_exchange(port, b"srvr", 8192)?;
                    if answer.contains("Mode:") {
                        Ok(())
                    } else {
                        Err(format!("srvr answered {answer:?}"))
                    }
                });
                let process =
                    ServerProcess::new("zookeeper", dir.path().to_path_buf(), "java", args, probe);
                Ok(ZooKeeper {
                    process,
                    port,
                    secure_port,
                    _dir: dir,
                })
            },
            |z| &mut z.process,
        )
    }

    /// `127.0.0.1:<port>`: the connect string.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:<secure port>` when started with [`ZooKeeper::start_tls`].
    pub fn secure_connect_string(&self) -> Option<String> {
        self.secure_port.map(|p| format!("127.0.0.1:{p}"))
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// The JVM's arguments for ZooKeeper's `main_class` with `cfg` (a small heap, quick
/// start, warnings only).
fn java_args(cp: &str, main_class: &str, cfg: &std::path::Path) -> Vec<OsString> {
    [
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-cp",
        cp,
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-Dzookeeper.jmx.log4j.disable=true",
        main_class,
        &cfg.display().to_string(),
    ]
    .iter()
    .map(OsString::from)
    .collect()
}

/// ZooKeeper's jar, with slf4j-simple when installed (its logs then reach the server
/// log).
fn classpath() -> String {
    let mut cp = JAR.to_string();
    if std::path::Path::new(SLF4J).is_file() {
        cp.push(':');
        cp.push_str(SLF4J);
    }
    cp
}

/// The client, quorum and election ports inside each test host (each host has its
/// own ports).
const HOST_CLIENT_PORT: u16 = 2181;
const HOST_QUORUM_PORT: u16 = 2888;
const HOST_ELECTION_PORT: u16 = 3888;

/// A ZooKeeper ensemble (three servers by default, each `QuorumPeerMain`), every
/// server on a test host of its own ([`crate::net::Host`], a network namespace; the
/// hosts reach each other through the test's namespace), where a server can be
/// [`cut`](HostedServers::cut) off (blackholed: no FIN, no RST) and
/// [`restore`](HostedServers::restore)d.
///
/// `tickTime=500` (sessions from 1 s to 60 s), `syncLimit=4` (a follower that hears
/// nothing from the leader for 2 s leaves it, and so does the leader without a quorum
/// of followers), `initLimit=10`. Clients are given [`connect_string`](Self::connect_string)
/// (every server). Which server a session is on: [`session_server`](Self::session_server)
/// (the `cons` command of each server that is not cut); the leader:
/// [`leader`](Self::leader).
///
/// Clean-up: the servers are killed (`SIGKILL`) and waited for when the ensemble drops,
/// panics included, then their hosts are removed; a host's removal kills whatever is
/// still inside its namespace, and the namespaces (and servers) of a test process that
/// was killed are removed by the next test process that creates a host.
///
/// Its servers ([`len`](HostedServers::len), [`member`](HostedServers::member),
/// [`cut`](HostedServers::cut), [`restore`](HostedServers::restore): back in the quorum
/// as leader or follower) are [`HostedServers`]; a server cut off is not asked by
/// [`leader`](Self::leader) and friends.
#[derive(Debug)]
pub struct ZkEnsemble {
    servers: HostedServers,
}

impl ZkEnsemble {
    /// Starts an `n`-server ensemble (1..=7; 3 for a real quorum) with each server on a
    /// test host of its own, and waits until every server serves (`srvr` reports it as
    /// leader or follower). Needs what the test network needs (see
    /// [`crate::net::skip_reason`]), Java and Debian's `zookeeper` package.
    pub fn start_on_hosts(n: usize) -> Result<ZkEnsemble> {
        HostedServers::check_size(n, "a ZooKeeper test ensemble", "servers")?;
        require_binary("java", INSTALL)?;
        require_file(JAR, INSTALL)?;
        let hosts = HostedServers::new_hosts(n)?;
        let dir = tempfile::Builder::new()
            .prefix("meshline-zk-ensemble-")
            .tempdir()
            .map_err(io_err("create a temp dir for the zookeeper ensemble"))?;
        let servers: String = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| {
                format!(
                    "server.{}={}:{HOST_QUORUM_PORT}:{HOST_ELECTION_PORT}\n",
                    i + 1,
                    h.ip()
                )
            })
            .collect();
        let cp = classpath();
        let dir_path = dir.path().to_path_buf();
        let servers = HostedServers::on_hosts(hosts, dir, "zookeeper server", |i, host| {
            let mdir = dir_path.join(format!("zk{}", i + 1));
            let data = mdir.join("data");
            std::fs::create_dir_all(&data).map_err(io_err(format!("create {}", data.display())))?;
            std::fs::write(data.join("myid"), format!("{}\n", i + 1))
                .map_err(io_err("write myid"))?;
            let cfg = mdir.join("zoo.cfg");
            std::fs::write(
                &cfg,
                format!(
                    "tickTime=500\ninitLimit=10\nsyncLimit=4\n\
                     minSessionTimeout=1000\nmaxSessionTimeout=60000\n\
                     dataDir={}\nclientPort={HOST_CLIENT_PORT}\nclientPortAddress={}\n\
                     maxClientCnxns=0\nadmin.enableServer=false\n\
                     4lw.commands.whitelist=ruok,srvr,stat,mntr,conf,cons\n{servers}",
                    data.display(),
                    host.ip()
                ),
            )
            .map_err(io_err("write zoo.cfg"))?;
            let mut command = vec![OsString::from("java")];
            command.extend(java_args(
                &cp,
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                &cfg,
            ));
            let addr = SocketAddr::new(host.ip(), HOST_CLIENT_PORT);
            let probe = Arc::new(move || match mode_at(addr)? {
                Some(_) => Ok(()),
                None => Err("not serving yet (no quorum)".to_string()),
            });
            Ok((mdir, command, probe as Probe))
        })?;
        let mut ensemble = ZkEnsemble { servers };
        // Every server must run before a quorum can form.
        for m in &mut ensemble.servers.servers {
            m.spawn()?;
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        for m in &mut ensemble.servers.servers {
            m.wait_ready(deadline)?;
        }
        Ok(ensemble)
    }

    /// `ip1:2181,ip2:2181,...`: every server, in server order (ZooKeeper's connect
    /// string).
    pub fn connect_string(&self) -> String {
        self.servers.host_addrs(HOST_CLIENT_PORT)
    }

    /// Server `i`'s client address.
    pub fn addr(&self, i: usize) -> SocketAddr {
        self.servers.host_addr(i, HOST_CLIENT_PORT)
    }

    /// Server `i`'s test host.
    pub fn host(&self, i: usize) -> &crate::net::Host {
        &self.servers.hosts[i]
    }

    /// Sends the four-letter command `cmd` (`srvr`, `cons`, `mntr`...) to server `i`
    /// and returns its answer (within about 2 s).
    pub fn four_letter(&self, i: usize, cmd: &str) -> Result<String> {
        tcp_exchange_at(self.addr(i), cmd.as_bytes(), 1 << 20).map_err(Error::Other)
    }

    /// Server `i`'s role (`leader`, `follower`), or `None` while it does not serve
    /// (no quorum).
    pub fn mode(&self, i: usize) -> Result<Option<String>> {
        mode_at(self.addr(i)).map_err(Error::Other)
    }

    /// The index of the leader, asking the servers that are not cut off; waits (up to
    /// [`READY_TIMEOUT`]) while an election is in progress.
    pub fn leader(&self) -> Result<usize> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            for i in 0..self.len() {
                if !self.servers.cut[i] && self.mode(i).ok().flatten().as_deref() == Some("leader")
                {
                    return Ok(i);
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::Other(format!(
                    "no zookeeper leader within {READY_TIMEOUT:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server that session `session_id` is connected to now, asking each server
    /// that is not cut off for its connections (`cons`); `None` when none has it.
    pub fn session_server(&self, session_id: i64) -> Option<usize> {
        let wanted = format!("sid=0x{session_id:x}");
        (0..self.len()).find(|&i| {
            !self.servers.cut[i]
                && self.four_letter(i, "cons").is_ok_and(|cons| {
                    cons.lines()
                        .any(|l| l.split([',', '(', ')']).any(|field| field.trim() == wanted))
                })
        })
    }
}

crate::process::derefs_to!(ZkEnsemble, servers: HostedServers);

/// The `Mode:` line of `srvr` at `addr` (`leader`, `follower`, `standalone`), `None`
/// when the server answers that it does not serve.
fn mode_at(addr: SocketAddr) -> std::result::Result<Option<String>, String> {
    let answer = tcp_exchange_at(addr, b"srvr", 8192)?;
    if let Some(mode) = answer
        .lines()
        .find_map(|l| l.strip_prefix("Mode:").map(|m| m.trim().to_string()))
    {
        return Ok(Some(mode));
    }
    if answer.contains("not currently serving") {
        return Ok(None);
    }
    Err(format!("srvr answered {answer:?}"))
}
