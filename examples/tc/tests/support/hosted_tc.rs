//! A TC (the example `Coordinator`, in the test process) serving on a host of its own: a
//! network namespace that can be cut, or put behind a fault proxy.

use std::time::Duration;

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
    /// The coordinator (its store can be made to fail).
    pub tc: Coordinator,
}

impl HostedTc {
    /// A TC with default options on a new host.
    pub fn start() -> HostedTc {
        let host = Host::new().expect("test host");
        HostedTc::serve_on(host, 0)
    }

    /// A TC on `host`, listening on `port` (0: any).
    fn serve_on(host: Host, port: u16) -> HostedTc {
        let listener = host.bind_tcp(port).expect("bind in the host");
        let (server, tc) = Coordinator::serve_std(
            listener,
            host.ip(),
            TcOptions::default(),
            ServerConfig::default(),
        )
        .expect("serve");
        HostedTc { host, server, tc }
    }

    /// `n` TCs, each on its own host.
    pub fn start_many(n: usize) -> Vec<HostedTc> {
        (0..n).map(|_| HostedTc::start()).collect()
    }

    /// Stops the TC (its connections closed, its sessions gone, as a process restart
    /// does), waits `down`, and starts a new one at the same address.
    pub async fn restart(self, down: Duration) -> HostedTc {
        let HostedTc { host, server, tc } = self;
        let port = server.local_addr().port();
        server.shutdown(Duration::ZERO).await;
        drop(tc);
        tokio::time::sleep(down).await;
        HostedTc::serve_on(host, port)
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
