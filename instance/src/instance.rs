//! One server as a registry describes it, and the address forms Seata uses.
//!
//! Seata (Java) writes addresses with `InetAddress.getHostAddress()`, which gives IPv6 in
//! the *unbracketed, uncompressed* form (`2000:0:0:0:1:2345:6789:abcd:8091`); its parser
//! strips `[...]` and splits at the **last** `:`. We accept all of `ip:port`,
//! `[v6]:port`, `v6:port` and DNS names, normalise IP hosts so that two spellings of one
//! address compare equal, and can render Java's forms where a registry layout needs them.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use serde::Serialize;

use crate::AddressError;

/// The identity of an instance: its normalised host and port.
///
/// Two [`Instance`]s with the same key are the same server, whatever their weight or
/// metadata say; stats and connections are keyed by this.
///
/// The host is a shared string: cloning a key or an instance (a backend keeping its
/// member list and publishing it again with one change, a stats registry remembering
/// an identity) copies a pointer, and dropping a snapshot whose instances live on in
/// the next one frees no strings. It compares, orders and hashes as the `str` it holds
/// (as a `String` did).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct InstanceKey {
    /// Host without brackets: a normalised IP address or a DNS name (lower-cased).
    #[serde(serialize_with = "serialize_host")]
    pub host: Arc<str>,
    /// TCP port, never 0.
    pub port: u16,
}

fn serialize_host<S: serde::Serializer>(host: &Arc<str>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(host)
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
    pub fn new(host: &str, port: u16) -> Result<Self, AddressError> {
        Instance::build(host, port, &format!("{host}:{port}"))
    }

    fn build(host: &str, port: u16, text: &str) -> Result<Self, AddressError> {
        if port == 0 {
            return Err(AddressError::new(text, "port 0 is not a usable port"));
        }
        let host = normalise_host(host).map_err(|reason| AddressError::new(text, reason))?;
        Ok(Instance {
            key: InstanceKey {
                host: host.into(),
                port,
            },
            weight: 1,
            zone: None,
            metadata: BTreeMap::new(),
        })
    }

    /// Parses `ip:port`, `[v6]:port`, Java's unbracketed `v6:port` (split at the last
    /// `:`) or `dns-name:port`. Surrounding white space is ignored.
    pub fn parse(text: &str) -> Result<Self, AddressError> {
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
            None => self.key.host.to_string(),
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
    type Err = AddressError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Instance::parse(s)
    }
}

/// An instance at a socket address (weight 1). `TryFrom`, not `From`: port 0 is a
/// valid `SocketAddr` but not a usable instance, and is refused like everywhere else.
impl TryFrom<std::net::SocketAddr> for Instance {
    type Error = AddressError;
    fn try_from(addr: std::net::SocketAddr) -> Result<Self, Self::Error> {
        Instance::new(&addr.ip().to_string(), addr.port())
    }
}

/// `instances` sorted by identity (the order of [`InstanceKey`]'s `Ord`), the first
/// entry of each identity kept, as one shared slice; and how many duplicates were
/// dropped.
///
/// The same result as a stable `sort_by` on the key and a `dedup_by` on the key, at a
/// fraction of the cost for large lists (a registry snapshot of 10 000 members): the
/// order comes from [`crate::identity_order`] (integer ranks, radix-sorted).
pub fn sorted_unique(instances: Vec<Instance>) -> (Arc<[Instance]>, usize) {
    let n = instances.len();
    let order = crate::identity_order(n, |i| &instances[i].key);
    // Keep the first of each identity; the rest are dropped below.
    let mut keep = vec![false; n];
    let mut kept: Vec<usize> = Vec::with_capacity(n);
    let mut last: Option<usize> = None;
    for &i in &order {
        let duplicate = last.is_some_and(|l| instances[l].key == instances[i].key);
        if !duplicate {
            keep[i] = true;
            kept.push(i);
            last = Some(i);
        }
    }
    drop(order);
    let dropped = n - kept.len();
    // Move the kept instances out in sorted order straight into the shared slice (one
    // allocation, no intermediate vector), then drop the duplicates and free the
    // list's buffer without dropping what was moved.
    let mut list = std::mem::ManuallyDrop::new(instances);
    let (base, capacity) = (list.as_mut_ptr(), list.capacity());
    // SAFETY: every index in `kept` is below `n` and appears once, so each kept
    // instance is read (moved) exactly once; the buffer is never read again for it.
    let sorted: Arc<[Instance]> = kept
        .iter()
        .map(|&i| unsafe { base.add(i).read() })
        .collect();
    for (i, &k) in keep.iter().enumerate() {
        if !k {
            // SAFETY: a duplicate was not moved out above; it is dropped once here.
            unsafe { base.add(i).drop_in_place() };
        }
    }
    // SAFETY: the buffer came from this `Vec` (pointer and capacity unchanged); length 0
    // so that freeing it drops no element (each was moved out or dropped above).
    drop(unsafe { Vec::from_raw_parts(base, 0, capacity) });
    (sorted, dropped)
}

/// Splits `text` into host and port following Seata's rules (brackets optional, last
/// `:` separates the port). The host is returned raw (not yet validated).
fn split_host_port(text: &str) -> Result<(&str, u16), AddressError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(AddressError::new(text, "empty address"));
    }
    let (host, port_text) = if let Some(rest) = t.strip_prefix('[') {
        let close = rest
            .find(']')
            .ok_or_else(|| AddressError::new(text, "`[` without a closing `]`"))?;
        let host = &rest[..close];
        let after = &rest[close + 1..];
        let port = after
            .strip_prefix(':')
            .ok_or_else(|| AddressError::new(text, "expected `:port` after `]`"))?;
        (host, port)
    } else {
        let colon = t
            .rfind(':')
            .ok_or_else(|| AddressError::new(text, "missing `:port`"))?;
        (&t[..colon], &t[colon + 1..])
    };
    if host.is_empty() {
        return Err(AddressError::new(text, "empty host"));
    }
    let port: u16 = port_text.parse().map_err(|_| {
        AddressError::new(
            text,
            format!("port `{port_text}` is not a number in 1..=65535"),
        )
    })?;
    if port == 0 {
        return Err(AddressError::new(text, "port 0 is not a usable port"));
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
    if let Ok(v4) = h.parse::<Ipv4Addr>() {
        // Rust's IPv4 parser takes only the canonical text (four decimal octets, no
        // leading zeros), so the text is already what `to_string` would render: no
        // formatting, the most common registry entry's main cost.
        debug_assert_eq!(v4.to_string(), h);
        return Ok(h.to_string());
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
mod tests;
