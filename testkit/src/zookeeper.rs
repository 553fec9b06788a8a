//! ZooKeeper 3.x standalone (`java -cp /usr/share/java/zookeeper.jar`).

use std::ffi::OsString;
use std::sync::Arc;

use tempfile::TempDir;

use crate::process::{
    ServerProcess, require_binary, require_file, start_with_port_retry, tcp_exchange,
};
use crate::{Result, io_err};

const INSTALL: &str = "apt-get install -y zookeeper";
const JAR: &str = "/usr/share/java/zookeeper.jar";
const SLF4J: &str = "/usr/share/java/slf4j-simple.jar";

/// A standalone ZooKeeper on a free port, with `tickTime=500` so that session timeouts
/// from 1 s to 60 s are accepted (tests use short sessions).
///
/// [`pause`](Self::pause) (`SIGSTOP`) past a client's session timeout, then
/// [`resume`](Self::resume), expires that client's session: on resume the server's
/// session tracker finds the session overdue and closes it, deleting its ephemerals.
pub struct ZooKeeper {
    process: ServerProcess,
    port: u16,
    /// The secureClientPort, when started with [`ZooKeeper::start_tls`].
    secure_port: Option<u16>,
    _dir: TempDir,
}

impl std::fmt::Debug for ZooKeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeper")
            .field("connect_string", &self.connect_string())
            .field("process", &self.process)
            .finish()
    }
}

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
                let mut cp = JAR.to_string();
                if std::path::Path::new(SLF4J).is_file() {
                    cp.push(':');
                    cp.push_str(SLF4J);
                }
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
                let args: Vec<OsString> = [
                    "-Xmx256m",
                    "-XX:+UseSerialGC",
                    "-XX:TieredStopAtLevel=1",
                    "-cp",
                    &cp,
                    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                    "-Dzookeeper.jmx.log4j.disable=true",
                    "org.apache.zookeeper.server.ZooKeeperServerMain",
                    &cfg.display().to_string(),
                ]
                .iter()
                .map(OsString::from)
                .collect();
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

    /// The process, for [`ServerProcess::kill`], [`ServerProcess::restart`] and friends.
    pub fn process(&mut self) -> &mut ServerProcess {
        &mut self.process
    }

    /// `SIGKILL`s the server and waits for it.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts the server again on the same port and data dir (sessions and ephemeral
    /// nodes survive in its snapshot / txn log); waits until it serves.
    pub fn restart(&mut self) -> Result<()> {
        self.process.restart()
    }

    /// `SIGSTOP`: the server keeps its socket but answers nothing.
    pub fn pause(&mut self) -> Result<()> {
        self.process.pause()
    }

    /// `SIGCONT` after [`pause`](Self::pause).
    pub fn resume(&mut self) -> Result<()> {
        self.process.resume()
    }
}
