//! One server as a registry describes it, and the address forms Seata uses.
//!
//! Seata (Java) writes addresses with `InetAddress.getHostAddress()`, which gives IPv6 in
//! the *unbracketed, uncompressed* form (`2000:0:0:0:1:2345:6789:abcd:8091`); its parser
//! strips `[...]` and splits at the **last** `:`. We accept all of `ip:port`,
//! `[v6]:port`, `v6:port` and DNS names, normalise IP hosts so that two spellings of one
//! address compare equal, and can render Java's forms where a registry layout needs them.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use serde::Serialize;

use crate::RegistryError;

/// The identity of an instance: its normalised host and port.
///
/// Two [`Instance`]s with the same key are the same server, whatever their weight or
/// metadata say; stats and connections are keyed by this.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct InstanceKey {
    /// Host without brackets: a normalised IP address or a DNS name (lower-cased).
    pub host: String,
    /// TCP port, never 0.
    pub port: u16,
}

impl fmt::Display for InstanceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// One server that a registry lists as a member of a cluster.
///
/// Built by [`Instance::parse`] (or [`FromStr`]) or [`Instance::new`]. The host is stored
/// normalised (IPs in Rust's canonical text, DNS names lower-cased, no brackets, no
/// `%scope`), so equality of [`Instance::key`] means "same server".
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Instance {
    #[serde(flatten)]
    key: InstanceKey,
    weight: u32,
    zone: Option<String>,
    metadata: BTreeMap<String, String>,
}

impl Instance {
    /// An instance at `host:port` with weight 1, no zone and no metadata.
    ///
    /// `host` may be an IPv4/IPv6 address (brackets allowed) or a DNS name.
    pub fn new(host: &str, port: u16) -> Result<Self, RegistryError> {
        Instance::build(host, port, &format!("{host}:{port}"))
    }

    fn build(host: &str, port: u16, text: &str) -> Result<Self, RegistryError> {
        if port == 0 {
            return Err(RegistryError::invalid_address(
                text,
                "port 0 is not a usable port",
            ));
        }
        let host =
            normalise_host(host).map_err(|reason| RegistryError::invalid_address(text, reason))?;
        Ok(Instance {
            key: InstanceKey { host, port },
            weight: 1,
            zone: None,
            metadata: BTreeMap::new(),
        })
    }

    /// Parses `ip:port`, `[v6]:port`, Java's unbracketed `v6:port` (split at the last
    /// `:`) or `dns-name:port`. Surrounding white space is ignored.
    pub fn parse(text: &str) -> Result<Self, RegistryError> {
        let (host, port) = split_host_port(text)?;
        Instance::build(host, port, text)
    }

    /// The identity of this instance (host and port).
    pub fn key(&self) -> &InstanceKey {
        &self.key
    }

    /// The normalised host (no brackets).
    pub fn host(&self) -> &str {
        &self.key.host
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.key.port
    }

    /// Relative weight for weighted balancers; 0 means "send no traffic".
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// Zone / region label, when the registry gave one.
    pub fn zone(&self) -> Option<&str> {
        self.zone.as_deref()
    }

    /// Free-form metadata from the registry.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// Sets the weight.
    pub fn with_weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }

    /// Sets the zone.
    pub fn with_zone(mut self, zone: impl Into<String>) -> Self {
        self.zone = Some(zone.into());
        self
    }

    /// Adds one metadata entry.
    pub fn with_metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// The host as an IP address, when it is one (not a DNS name).
    pub fn ip(&self) -> Option<IpAddr> {
        self.key.host.parse().ok()
    }

    /// The socket address, when the host is an IP address.
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        self.ip().map(|ip| SocketAddr::new(ip, self.key.port))
    }

    /// Java's `NetUtil.toStringAddress` form, used in Seata's registry keys and values:
    /// `ip:port`, IPv6 unbracketed and uncompressed (`2000:0:0:0:1:2345:6789:abcd:8091`).
    pub fn to_java_string(&self) -> String {
        format!("{}:{}", self.java_host(), self.key.port)
    }

    /// Java's `InetAddress.getHostAddress()` of the host (IPv6 uncompressed, no
    /// brackets); DNS names as they are.
    pub fn java_host(&self) -> String {
        match self.ip() {
            Some(IpAddr::V6(v6)) => java_ipv6(&v6),
            Some(IpAddr::V4(v4)) => v4.to_string(),
            None => self.key.host.clone(),
        }
    }

    /// Java 14+ `InetSocketAddress.toString()` of this address: `/127.0.0.1:8091`,
    /// `/[2000:0:0:0:1:2345:6789:abcd]:8092`, and for an unresolved DNS name
    /// `name/<unresolved>:port`. Seata's ConsistentHash balancer hashes this text.
    pub fn java_inet_socket_string(&self) -> String {
        match self.ip() {
            Some(IpAddr::V6(v6)) => format!("/[{}]:{}", java_ipv6(&v6), self.key.port),
            Some(IpAddr::V4(v4)) => format!("/{}:{}", v4, self.key.port),
            None => format!("{}/<unresolved>:{}", self.key.host, self.key.port),
        }
    }
}

impl fmt::Display for Instance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.key.fmt(f)
    }
}

impl FromStr for Instance {
    type Err = RegistryError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Instance::parse(s)
    }
}

/// An instance at a socket address (weight 1). `TryFrom`, not `From`: port 0 is a
/// valid `SocketAddr` but not a usable instance, and is refused like everywhere else.
impl TryFrom<std::net::SocketAddr> for Instance {
    type Error = RegistryError;
    fn try_from(addr: std::net::SocketAddr) -> Result<Self, Self::Error> {
        Instance::new(&addr.ip().to_string(), addr.port())
    }
}

/// Splits `text` into host and port following Seata's rules (brackets optional, last
/// `:` separates the port). The host is returned raw (not yet validated).
pub(crate) fn split_host_port(text: &str) -> Result<(&str, u16), RegistryError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(RegistryError::invalid_address(text, "empty address"));
    }
    let (host, port_text) = if let Some(rest) = t.strip_prefix('[') {
        let close = rest
            .find(']')
            .ok_or_else(|| RegistryError::invalid_address(text, "`[` without a closing `]`"))?;
        let host = &rest[..close];
        let after = &rest[close + 1..];
        let port = after
            .strip_prefix(':')
            .ok_or_else(|| RegistryError::invalid_address(text, "expected `:port` after `]`"))?;
        (host, port)
    } else {
        let colon = t
            .rfind(':')
            .ok_or_else(|| RegistryError::invalid_address(text, "missing `:port`"))?;
        (&t[..colon], &t[colon + 1..])
    };
    if host.is_empty() {
        return Err(RegistryError::invalid_address(text, "empty host"));
    }
    let port: u16 = port_text.parse().map_err(|_| {
        RegistryError::invalid_address(
            text,
            format!("port `{port_text}` is not a number in 1..=65535"),
        )
    })?;
    if port == 0 {
        return Err(RegistryError::invalid_address(
            text,
            "port 0 is not a usable port",
        ));
    }
    Ok((host, port))
}

/// Validates and normalises a host: IPs to canonical text (IPv6 without brackets and
/// `%scope`), DNS names lower-cased.
fn normalise_host(host: &str) -> Result<String, String> {
    let h = host.trim();
    let h = h
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(h);
    if h.is_empty() {
        return Err("empty host".into());
    }
    if h.contains(':') {
        // Only an IPv6 address may contain ':'; Java drops a `%scope` suffix.
        let bare = h.split('%').next().unwrap_or(h);
        return bare
            .parse::<Ipv6Addr>()
            .map(|ip| match ip.to_ipv4_mapped() {
                Some(v4) => v4.to_string(),
                None => ip.to_string(),
            })
            .map_err(|_| format!("`{h}` is not a valid IPv6 address"));
    }
    if let Ok(ip) = h.parse::<IpAddr>() {
        return Ok(ip.to_string());
    }
    if h.len() > 253 {
        return Err("host name longer than 253 characters".into());
    }
    for label in h.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!(
                "`{h}` is not a valid host name (empty or over-long label)"
            ));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!("`{h}` is not a valid IP address or host name"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!(
                "`{h}` is not a valid host name (label starts or ends with `-`)"
            ));
        }
    }
    if h.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(format!("`{h}` is not a valid IPv4 address"));
    }
    Ok(h.to_ascii_lowercase())
}

/// `Inet6Address.getHostAddress()`: eight groups, lowercase hex, no leading zeros, no
/// `::` compression.
fn java_ipv6(ip: &Ipv6Addr) -> String {
    let s = ip.segments();
    format!(
        "{:x}:{:x}:{:x}:{:x}:{:x}:{:x}:{:x}:{:x}",
        s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_a_socket_address() {
        let v4: std::net::SocketAddr = "10.0.0.1:8091".parse().unwrap();
        assert_eq!(Instance::try_from(v4).unwrap().to_string(), "10.0.0.1:8091");
        let v6: std::net::SocketAddr = "[::1]:8091".parse().unwrap();
        let i = Instance::try_from(v6).unwrap();
        assert_eq!(i.host(), "::1");
        assert_eq!(i.port(), 8091);
        let zero: std::net::SocketAddr = "10.0.0.1:0".parse().unwrap();
        assert!(Instance::try_from(zero).is_err());
    }

    #[test]
    fn ipv4() {
        let i = Instance::parse("127.0.0.1:8091").unwrap();
        assert_eq!(i.host(), "127.0.0.1");
        assert_eq!(i.port(), 8091);
        assert_eq!(i.to_string(), "127.0.0.1:8091");
        assert_eq!(i.to_java_string(), "127.0.0.1:8091");
        assert_eq!(i.java_inet_socket_string(), "/127.0.0.1:8091");
        assert_eq!(i.socket_addr(), Some("127.0.0.1:8091".parse().unwrap()));
    }

    #[test]
    fn seata_ipv6_vectors() {
        // seata-compat.md 1.3: etcd key/value with zero-padded unbracketed IPv6.
        let a = Instance::parse("2000:0000:0000:0000:0001:2345:6789:abcd:8091").unwrap();
        assert_eq!(a.port(), 8091);
        assert_eq!(a.ip(), Some("2000::1:2345:6789:abcd".parse().unwrap()));
        // Java's form, and the bracketed form, are the same instance.
        let b = Instance::parse("2000:0:0:0:1:2345:6789:abcd:8091").unwrap();
        let c = Instance::parse("[2000::1:2345:6789:abcd]:8091").unwrap();
        assert_eq!(a.key(), b.key());
        assert_eq!(a.key(), c.key());
        assert_eq!(a.to_java_string(), "2000:0:0:0:1:2345:6789:abcd:8091");
        assert_eq!(a.to_string(), "[2000::1:2345:6789:abcd]:8091");
        assert_eq!(
            Instance::parse("2000:0:0:0:1:2345:6789:abcd:8092")
                .unwrap()
                .java_inet_socket_string(),
            "/[2000:0:0:0:1:2345:6789:abcd]:8092"
        );
        // Scope ids are dropped as Java does.
        let s = Instance::parse("[fe80::1%eth0]:9000").unwrap();
        assert_eq!(s.host(), "fe80::1");
        // Round trip through Display.
        assert_eq!(Instance::parse(&a.to_string()).unwrap().key(), a.key());
    }

    #[test]
    fn dns_names() {
        let i = Instance::parse("TC-1.Example.com:8091").unwrap();
        assert_eq!(i.host(), "tc-1.example.com");
        assert_eq!(i.ip(), None);
        assert_eq!(
            i.java_inet_socket_string(),
            "tc-1.example.com/<unresolved>:8091"
        );
        assert!(Instance::parse("localhost:1").is_ok());
    }

    #[test]
    fn bad_addresses_are_errors_naming_the_text() {
        for bad in [
            "",
            "   ",
            "127.0.0.1",
            "127.0.0.1:",
            "127.0.0.1:0",
            "127.0.0.1:65536",
            "127.0.0.1:-1",
            "127.0.0.1:80x",
            ":8091",
            "[::1:8091",
            "[::1]8091",
            "[]:80",
            "1:2:3:8091",
            "999.1.1.1:80",
            "bad host:80",
            "-bad.example:80",
            "a..b:80",
            "ho$t:80",
            "[zz::1]:80",
        ] {
            let err = Instance::parse(bad).expect_err(bad);
            let msg = err.to_string();
            assert!(
                msg.contains(&format!("`{bad}`")) || bad.trim().is_empty(),
                "{msg}"
            );
        }
    }

    /// IPv6 addresses with runs of zero groups (most groups are 0), so their text has
    /// the `::`-compressed forms a uniform `u128` almost never gives.
    fn ipv6_with_zero_runs() -> impl proptest::strategy::Strategy<Value = Ipv6Addr> {
        use proptest::prelude::*;
        proptest::collection::vec(prop_oneof![3 => Just(0u16), 2 => any::<u16>()], 8)
            .prop_map(|g| Ipv6Addr::new(g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]))
    }

    /// Any IPv4 address, any IPv6 address, or an IPv6 address with zero runs.
    fn any_ip() -> impl proptest::strategy::Strategy<Value = IpAddr> {
        use proptest::prelude::*;
        prop_oneof![
            any::<std::net::Ipv4Addr>().prop_map(IpAddr::V4),
            any::<Ipv6Addr>().prop_map(IpAddr::V6),
            ipv6_with_zero_runs().prop_map(IpAddr::V6),
        ]
    }

    #[test]
    fn the_ipv6_generator_makes_compressed_forms() {
        use proptest::strategy::{Strategy, ValueTree};
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let texts: Vec<String> = (0..200)
            .map(|_| {
                ipv6_with_zero_runs()
                    .new_tree(&mut runner)
                    .unwrap()
                    .current()
                    .to_string()
            })
            .collect();
        let compressed = texts.iter().filter(|t| t.contains("::")).count();
        assert!(
            compressed >= 100,
            "{compressed} of 200 have `::`: {texts:?}"
        );
        assert!(texts.iter().any(|t| t.starts_with("::")), "{texts:?}");
        assert!(texts.iter().any(|t| t.ends_with("::")), "{texts:?}");
        assert!(
            texts.iter().any(|t| !t.contains("::")),
            "no uncompressed form: {texts:?}"
        );
    }

    proptest::proptest! {
        /// Every spelling of an IPv6 address with zero runs (compressed, Java's full
        /// form, zero-padded, bracketed or not) is one identity, shown compressed.
        #[test]
        fn compressed_ipv6_spellings_are_one_instance(ip in ipv6_with_zero_runs(), port in 1u16..) {
            if ip.to_ipv4_mapped().is_none() {
                let g = ip.segments();
                let java = g.iter().map(|x| format!("{x:x}")).collect::<Vec<_>>().join(":");
                let padded = g.iter().map(|x| format!("{x:04x}")).collect::<Vec<_>>().join(":");
                let want = Instance::parse(&format!("[{ip}]:{port}")).unwrap();
                proptest::prop_assert_eq!(want.ip(), Some(IpAddr::V6(ip)));
                proptest::prop_assert_eq!(want.to_string(), format!("[{ip}]:{port}"));
                proptest::prop_assert_eq!(want.to_java_string(), format!("{java}:{port}"));
                for text in [format!("{java}:{port}"), format!("{padded}:{port}"), format!("[{java}]:{port}")] {
                    let i = Instance::parse(&text).unwrap();
                    proptest::prop_assert_eq!(i.key(), want.key(), "{}", text);
                }
            }
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,64}") {
            let _ = Instance::parse(&s);
        }

        #[test]
        fn socket_addrs_round_trip(ip in any_ip(), port in 1u16..) {
            let sa = SocketAddr::new(ip, port);
            let i = Instance::parse(&sa.to_string()).unwrap();
            let canon = match ip { IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip), _ => ip };
            proptest::prop_assert_eq!(i.ip(), Some(canon));
            let j = Instance::parse(&i.to_java_string()).unwrap();
            proptest::prop_assert_eq!(i.key(), j.key());
        }
    }
}
