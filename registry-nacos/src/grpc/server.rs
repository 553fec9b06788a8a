//! One Nacos server of `serverAddr`, as the client dials it.

/// One Nacos server: its address, HTTP port (the login) and gRPC port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Server {
    pub(crate) host: String,
    pub(crate) http_port: u16,
    pub(crate) grpc_port: u16,
    pub(crate) tls: bool,
}

impl Server {
    /// `host:port` (`[v6]:port`) for `port`.
    pub(crate) fn authority(&self, port: u16) -> String {
        if self.host.contains(':') {
            format!("[{}]:{port}", self.host)
        } else {
            format!("{}:{port}", self.host)
        }
    }
}

impl std::fmt::Display for Server {
    /// The gRPC address.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.authority(self.grpc_port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_host_is_bracketed_in_addresses() {
        let s = |host: &str| Server {
            host: host.into(),
            http_port: 8848,
            grpc_port: 9848,
            tls: false,
        };
        assert_eq!(s("10.0.0.1").to_string(), "10.0.0.1:9848");
        assert_eq!(s("::1").to_string(), "[::1]:9848");
        assert_eq!(s("::1").authority(8848), "[::1]:8848");
        assert_eq!(s("nacos.local").authority(8848), "nacos.local:8848");
    }
}
