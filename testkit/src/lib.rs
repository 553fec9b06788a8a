//! # meshline-testkit
//!
//! Dev-only helpers that start **real** registry servers for meshline's tests: etcd
//! (single node or a 3-member cluster), ZooKeeper and Redis, each as a child process of
//! the test on free `127.0.0.1` ports with its own temp dir.
//!
//! - Start: pick free ports, spawn the server with its stdout/stderr going to
//!   `<tempdir>/server.log`, then poll a server-specific readiness probe (etcd `/health`,
//!   ZooKeeper `srvr`, Redis `PING`) for up to [`READY_TIMEOUT`]. If the server exits
//!   early because a port was taken in the meantime, new ports are picked and the start
//!   is retried. If it never comes up, the error carries the tail of its log.
//! - Faults: [`ServerProcess::kill`] is `SIGKILL` (no graceful shutdown),
//!   [`ServerProcess::restart`] starts it again on the same ports and data dir,
//!   [`ServerProcess::pause`] / [`ServerProcess::resume`] are `SIGSTOP` / `SIGCONT`
//!   (to force ZooKeeper session expiry), and [`EtcdCluster::leader`] finds the leader
//!   to kill.
//! - Drop kills the process and waits for it, then removes the temp dir.
//!
//! A missing server binary is an error whose message says how to install it
//! (`scripts/install-test-deps.sh`, or the `apt-get install` line): tests fail loudly,
//! they are never skipped.
//!
//! The API is synchronous (std processes and sockets). From an async test use a
//! multi-thread runtime (`#[tokio::test(flavor = "multi_thread")]`) so the code under
//! test keeps running while a restart blocks, or wrap the call in `spawn_blocking`.
//!
//! [`net`] builds test networks: hosts in their own network namespaces, links cut
//! without a reset, and a fault proxy (delay, jitter, loss, bandwidth, blackhole).
//!
//! [`steal`] samples the CPU a virtual machine's host takes, so a test bounding a
//! throughput ratio can tell a window the host spoiled from one the code failed.
//!
//! [`conformance`] holds the behaviours every registry backend must show (round trip,
//! drop, crash expiry, outage and resync, garbage, empty protection, and the faults:
//! an unreachable server, a refused removal, secrets, `nearby`), run by each backend's
//! test file through [`conformance_tests!`]; [`watch`] the assertions they share, and
//! [`config_of`] their configs.
//!
//! For the registries no real server exists for here (Consul, Eureka), it has
//! protocol-faithful **in-process doubles**, [`ConsulDouble`] and [`EurekaDouble`]: HTTP
//! servers on their own thread and runtime, with `stop` / `restart` on the same port
//! (restart loses all state, like a server without persistence). They also run
//! standalone as the `consul-double` and `eureka-double` binaries (`--port N`; the bound
//! address is printed on stdout) for clients from other ecosystems.

#![warn(missing_docs)]

mod configs;
pub mod conformance;
mod console_auth;
mod consul_double;
pub mod convergence;
mod db_server;
mod etcd;
mod eureka_double;
pub mod figures;
mod hosted;
mod http_double;
mod mariadb;
mod namingserver_double;
pub mod net;
mod ports;
mod postgres;
mod process;
mod raft_double;
mod redis;
mod rnacos;
mod seata_files;
pub mod steal;
mod tls;
mod wait;
pub mod watch;
mod zookeeper;

use std::time::Duration;

pub use configs::config_of;
pub use consul_double::{ConsulDouble, ConsulDoubleOptions};
pub use etcd::{Etcd, EtcdCluster};
pub use eureka_double::{EurekaDouble, EurekaDoubleOptions};
pub use hosted::HostedServers;
pub use mariadb::MariaDb;
pub use namingserver_double::{NamingserverDouble, NamingserverDoubleOptions};
pub use postgres::Postgres;
pub use process::ServerProcess;
pub use raft_double::{RaftDouble, RaftDoubleOptions};
pub use redis::Redis;
pub use rnacos::{Rnacos, RnacosCluster};
pub use seata_files::{SEATA_CLIENT_FILES, seata_file, seata_shipped, seata_shipped_settings};
pub use tls::{TestPki, Trust, refusal as tls_refusal, round_trip as tls_round_trip};
pub use wait::{delay_as_asked, until};
pub use zookeeper::{ZkEnsemble, ZooKeeper};

/// How long a server may take to answer its readiness probe. Generous, because the
/// tests run on loaded 2-core CI machines next to a cargo build.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How many times a start is retried with fresh ports when the server could not bind.
pub const PORT_ATTEMPTS: usize = 5;

/// How many starts that panicked (and so were refused) are tried again with a fresh
/// server, on top of [`PORT_ATTEMPTS`].
pub const PANIC_ATTEMPTS: usize = 30;

/// Why a test server could not be started or controlled.
#[derive(Debug)]
pub enum Error {
    /// The server binary is not installed; the message says how to install it.
    MissingBinary {
        /// The binary or file that was looked for.
        what: String,
        /// The command that installs it.
        install: String,
    },
    /// The server did not come up (or exited); includes the tail of its log.
    NotReady {
        /// Which server.
        name: String,
        /// What went wrong.
        reason: String,
        /// The last lines of the server's log.
        log_tail: String,
    },
    /// An I/O error while preparing or controlling the server.
    Io {
        /// What we were doing.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// Any other failure (a bad answer from the server, a signal that failed...).
    Other(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::MissingBinary { what, install } => write!(
                f,
                "{what} is not installed; install the test servers with `scripts/install-test-deps.sh` \
                 (or `{install}`)"
            ),
            Error::NotReady {
                name,
                reason,
                log_tail,
            } => write!(
                f,
                "{name} did not come up: {reason}\n--- last lines of its log ---\n{log_tail}"
            ),
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::Other(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A `127.0.0.1` port nothing listens on, for tests of unreachable servers: a connection
/// to it is refused at once.
///
/// The port stays bound, without listening, until the test process ends: a connection
/// is refused, and no other test (or server it starts on a free port) can take the port
/// meanwhile. A port merely released could be handed out again at once, and a test
/// expecting "connection refused" then reached another test's server.
pub fn closed_port() -> Result<u16> {
    closed_port_with(&[])
}

/// [`closed_port`] whose ports at each of `offsets` above it refuse too: for clients
/// that derive a second port from the one they are given (a Nacos 2 client talks gRPC
/// at the HTTP port + 1000), so that neither reaches a server another test started.
pub fn closed_port_with(offsets: &[u16]) -> Result<u16> {
    let refuses = |port: u16| {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        matches!(
            std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
        )
    };
    for _ in 0..PORT_ATTEMPTS {
        let Ok(first) = hold(0) else { continue };
        let port = first
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .map(|a| a.port());
        let Some(port) = port else { continue };
        let mut held = vec![first];
        let derived: Option<Vec<socket2::Socket>> = offsets
            .iter()
            .map(|&o| port.checked_add(o).and_then(|p| hold(p).ok()))
            .collect();
        let Some(derived) = derived else { continue };
        held.extend(derived);
        let mut ports = std::iter::once(port).chain(offsets.iter().map(|&o| port + o));
        if ports.all(refuses) {
            HELD.lock().unwrap_or_else(|p| p.into_inner()).extend(held);
            return Ok(port);
        }
    }
    Err(Error::Other(
        "no closed loopback port found: every probed port accepted a connection".into(),
    ))
}

/// The sockets that keep [`closed_port`]'s ports bound until the process ends.
static HELD: std::sync::Mutex<Vec<socket2::Socket>> = std::sync::Mutex::new(Vec::new());

/// A TCP socket bound to `127.0.0.1:port` (0: any free port) that does not listen, so a
/// connection to it is refused; without SO_REUSEADDR, so nothing else binds the port.
fn hold(port: u16) -> std::io::Result<socket2::Socket> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    socket.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into())?;
    Ok(socket)
}

pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

#[cfg(test)]
mod closed_port_tests {
    /// The port refuses connections, and stays out of reach: neither a listener nor
    /// the OS's free-port allocation can take it while the test process runs.
    #[test]
    fn a_closed_port_refuses_and_stays_held() {
        let port = super::closed_port_with(&[1000]).unwrap();
        for p in [port, port + 1000] {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], p));
            let e = std::net::TcpStream::connect(addr).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{p}");
            let e = std::net::TcpListener::bind(addr).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{p}");
        }
    }
}
