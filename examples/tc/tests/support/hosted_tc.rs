//! A TC (the example `Coordinator`, in the test process) serving on a host of its own: a
//! network namespace that can be cut, or put behind a fault proxy.

use meshline::Instance;
use meshline::rpc::{Server, ServerConfig};
use meshline_example_tc::{Coordinator, TcOptions};
use meshline_testkit::net::Host;

/// One TC on its own host. Dropping it stops the server and removes the namespace.
pub struct HostedTc {
    /// The host it lives on (cut, restore).
    pub host: Host,
    /// Its server (where it listens).
    pub server: Server,
    _tc: Coordinator,
}

impl HostedTc {
    /// A TC with default options on a new host.
    pub fn start() -> HostedTc {
        let host = Host::new().expect("test host");
        let listener = host.bind_tcp(0).expect("bind in the host");
        let (server, tc) = Coordinator::serve_std(
            listener,
            host.ip(),
            TcOptions::default(),
            ServerConfig::default(),
        )
        .expect("serve");
        HostedTc {
            host,
            server,
            _tc: tc,
        }
    }

    /// `n` TCs, each on its own host.
    pub fn start_many(n: usize) -> Vec<HostedTc> {
        (0..n).map(|_| HostedTc::start()).collect()
    }

    /// Its registry instance (the host's address and the server's port).
    pub fn instance(&self) -> Instance {
        Instance::new(&self.host.ip().to_string(), self.server.local_addr().port()).unwrap()
    }

    /// Where it listens.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.server.local_addr()
    }
}
