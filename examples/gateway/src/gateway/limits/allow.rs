//! Addresses: the allow-list of known proxies and NATs (CIDR blocks, IPv4 and IPv6), and
//! the key a client address is rate-limited under.
//!
//! An IPv4 client reaching a dual-stack listener shows up as `::ffff:a.b.c.d`; every
//! check first turns such an address back into IPv4, so `203.0.113.0/24` matches it and
//! it shares its bucket with the same client over IPv4.
//!
//! Why IPv6 clients are limited per /64: one subscriber is routinely handed a whole
//! /64, so a per-/128 limit is no limit at all (2^64 fresh addresses); a /64 is what one
//! home, phone or server gets.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IPv4-mapped IPv6 address as IPv4; any other address as it is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// The key a client address is counted under: the IPv4 address, or the IPv6 /64.
pub fn ip_key(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask128(64))),
        v4 => v4,
    }
}

fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

/// A block of addresses: `10.0.0.0/8`, `2001:db8::/32`; a bare address is a block of
/// one (`/32` or `/128`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

/// Why a text is not a CIDR block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not an address or CIDR block ({why}; e.g. 203.0.113.0/24 or 2001:db8::/48)")]
pub struct CidrError {
    text: String,
    why: &'static str,
}

impl Cidr {
    /// The block's first address.
    pub fn network(&self) -> IpAddr {
        self.net
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// True when `ip` is in the block (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                u32::from(ip) & mask32(self.prefix) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                u128::from(ip) & mask128(self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    /// Parses `addr` or `addr/prefix`. Host bits after the prefix are cleared
    /// (`10.1.2.3/8` is `10.0.0.0/8`), as routers read such a block.
    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let text = s.trim();
        let fail = |why| CidrError {
            text: text.to_string(),
            why,
        };
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        // `[v6]` as in URLs is accepted too.
        let addr = addr
            .strip_prefix('[')
            .and_then(|a| a.strip_suffix(']'))
            .unwrap_or(addr);
        let ip: IpAddr = addr.parse().map_err(|_| fail("not an IP address"))?;
        // A v4-mapped block is the IPv4 block it maps.
        let (ip, max, shift) = match ip {
            IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => (canonical(ip), 32u8, 96u8),
            IpAddr::V4(_) => (ip, 32, 0),
            IpAddr::V6(_) => (ip, 128, 0),
        };
        let prefix = match prefix {
            None => max,
            Some(p) => {
                let p: u8 = p
                    .trim()
                    .parse()
                    .map_err(|_| fail("the prefix is not a number"))?;
                let p = p
                    .checked_sub(shift)
                    .ok_or(fail("prefix too short for ::ffff:"))?;
                if p > max {
                    return Err(fail(if max == 32 {
                        "an IPv4 prefix is at most 32"
                    } else {
                        "an IPv6 prefix is at most 128"
                    }));
                }
                p
            }
        };
        let net = match ip {
            IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask32(prefix))),
            IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask128(prefix))),
        };
        Ok(Cidr { net, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

/// Known proxies and NATs (`limits.allow`): a comma- or space-separated list of
/// addresses and CIDR blocks. Their clients get the higher allow-listed per-IP limit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList(Vec<Cidr>);

impl AllowList {
    /// The blocks.
    pub fn blocks(&self) -> &[Cidr] {
        &self.0
    }

    /// True when no block is listed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True when `ip` is in one of the blocks.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|c| c.contains(ip))
    }
}

impl FromStr for AllowList {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<AllowList, CidrError> {
        s.split(|c: char| c == ',' || c.is_whitespace())
            .filter(|t| !t.is_empty())
            .map(str::parse)
            .collect::<Result<Vec<_>, _>>()
            .map(AllowList)
    }
}

impl fmt::Display for AllowList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_blocks() {
        let c: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(c.contains(ip("10.255.1.2")));
        assert!(!c.contains(ip("11.0.0.1")));
        assert!(!c.contains(ip("::1")));
        // Host bits are cleared; a bare address is a /32.
        assert_eq!("10.1.2.3/8".parse::<Cidr>().unwrap(), c);
        let one: Cidr = " 203.0.113.7 ".parse().unwrap();
        assert_eq!(one.to_string(), "203.0.113.7/32");
        assert!(one.contains(ip("203.0.113.7")));
        assert!(!one.contains(ip("203.0.113.8")));
        // /0 is everything of its family.
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("1.2.3.4")) && !all.contains(ip("2001:db8::1")));
    }

    #[test]
    fn ipv6_blocks() {
        let c: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(c.contains(ip("2001:db8:ffff::1")));
        assert!(!c.contains(ip("2001:db9::1")));
        assert!(!c.contains(ip("10.0.0.1")));
        assert_eq!("[2001:db8::1]/128".parse::<Cidr>().unwrap().prefix(), 128);
        assert_eq!(
            "2001:db8::1".parse::<Cidr>().unwrap().to_string(),
            "2001:db8::1/128"
        );
        assert_eq!(
            "2001:db8:1:2:3:4:5:6/64"
                .parse::<Cidr>()
                .unwrap()
                .to_string(),
            "2001:db8:1:2::/64"
        );
    }

    #[test]
    fn mapped_ipv4_is_ipv4() {
        let c: Cidr = "192.0.2.0/24".parse().unwrap();
        assert!(c.contains(ip("::ffff:192.0.2.9")));
        // A block written in mapped form is the IPv4 block.
        let m: Cidr = "::ffff:192.0.2.0/120".parse().unwrap();
        assert_eq!(m, c);
        assert!(m.contains(ip("192.0.2.200")));
    }

    #[test]
    fn bad_blocks_say_what_is_wrong() {
        for (text, want) in [
            ("10.0.0.0/33", "at most 32"),
            ("2001:db8::/129", "at most 128"),
            ("10.0.0/8", "not an IP address"),
            ("example.com", "not an IP address"),
            ("10.0.0.0/x", "not a number"),
            ("::ffff:1.2.3.4/64", "too short"),
        ] {
            let e = text.parse::<Cidr>().unwrap_err().to_string();
            assert!(e.contains(want) && e.contains(text), "{text}: {e}");
        }
    }

    #[test]
    fn allow_lists() {
        let a: AllowList = "10.0.0.0/8, 203.0.113.7  2001:db8::/48,".parse().unwrap();
        assert_eq!(a.blocks().len(), 3);
        assert!(a.contains(ip("10.9.9.9")));
        assert!(a.contains(ip("::ffff:203.0.113.7")));
        assert!(a.contains(ip("2001:db8:0:1::5")));
        assert!(!a.contains(ip("2001:db8:1::5")));
        assert!(!a.contains(ip("127.0.0.1")));
        assert_eq!(a.to_string(), "10.0.0.0/8, 203.0.113.7/32, 2001:db8::/48");
        assert!("".parse::<AllowList>().unwrap().is_empty());
        assert!("10.0.0.0/8,nope".parse::<AllowList>().is_err());
    }

    #[test]
    fn keys_are_ipv4_addresses_and_ipv6_slash_64s() {
        assert_eq!(ip_key(ip("192.0.2.1")), ip("192.0.2.1"));
        assert_eq!(ip_key(ip("::ffff:192.0.2.1")), ip("192.0.2.1"));
        assert_eq!(ip_key(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(
            ip_key(ip("2001:db8:1:2:aaaa::1")),
            ip_key(ip("2001:db8:1:2:bbbb::9"))
        );
        assert_ne!(ip_key(ip("2001:db8:1:2::1")), ip_key(ip("2001:db8:1:3::1")));
    }
}
