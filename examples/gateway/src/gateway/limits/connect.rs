//! Connection limits: per client IP (allow-listed addresses apart), then gateway-wide,
//! checked in the accept loop; the refusal slots that bound how many refused
//! connections are told why.

use std::net::IpAddr;

use governor::clock::Clock;
use tokio::sync::OwnedSemaphorePermit;

use super::{LimitKind, Limited, Limits, canonical, ip_key};

impl<C: Clock> Limits<C> {
    /// Counts a new connection from `ip`: per IP (or allow-listed IP), then
    /// gateway-wide.
    pub fn check_connect(&self, ip: IpAddr) -> Result<(), Limited> {
        let ip = canonical(ip);
        let (per_ip, kind) = if !self.allow.is_empty() && self.allow.contains(ip) {
            (&self.allowed_ip, LimitKind::AllowedIp)
        } else {
            (&self.ip, LimitKind::Ip)
        };
        if let Some(l) = per_ip
            && !l.allow(&ip_key(ip))
        {
            return Err(self.refuse(kind, l.rate(), None));
        }
        if let Some(g) = &self.global
            && !g.allow()
        {
            return Err(self.refuse(LimitKind::Global, g.rate(), None));
        }
        Ok(())
    }

    /// Client addresses (IPv6: /64s) the per-IP limiters hold now.
    pub fn tracked_ips(&self) -> usize {
        [&self.ip, &self.allowed_ip]
            .into_iter()
            .flatten()
            .map(|l| l.tracked())
            .sum()
    }

    /// Connection checks for addresses that did not fit under `max-tracked`.
    pub fn untracked_ips(&self) -> u64 {
        [&self.ip, &self.allowed_ip]
            .into_iter()
            .flatten()
            .map(|l| l.untracked())
            .sum()
    }

    /// A slot to tell a refused connection why, if one is free.
    pub(crate) fn refusal_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.refusing.clone().try_acquire_owned().ok()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::test_limits as limits;
    use super::*;
    use crate::gateway::limits::Rate;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn per_ip_then_global_and_the_allow_list() {
        let (l, clock) = limits(|s| {
            s.ip_connects = Rate::per_sec(1).burst(3);
            s.allow = "192.0.2.0/24".parse().unwrap();
            s.allowed_ip_connects = Rate::per_sec(1).burst(10);
            s.global_connects = Rate::per_sec(100).burst(20);
        });
        let a = ip("198.51.100.1");
        let refused: Vec<_> = (0..5).filter_map(|_| l.check_connect(a).err()).collect();
        assert_eq!(refused.len(), 2);
        assert_eq!(refused[0].kind, LimitKind::Ip);
        assert_eq!(
            refused[0].to_string(),
            "per-IP connection limit (1/s, burst 3)"
        );
        // The same client through a dual-stack listener is the same key.
        assert!(l.check_connect(ip("::ffff:198.51.100.1")).is_err());
        // Another address has its own bucket.
        assert!(l.check_connect(ip("198.51.100.2")).is_ok());
        // An allow-listed NAT gets its higher limit.
        let nat = ip("192.0.2.77");
        assert_eq!((0..12).filter(|_| l.check_connect(nat).is_ok()).count(), 10);
        assert_eq!(l.check_connect(nat).unwrap_err().kind, LimitKind::AllowedIp);
        assert_eq!(l.refused(LimitKind::Ip), 3);
        // 3 + 1 + 10 counted gateway-wide so far (refusals per IP are not); the global
        // burst of 20 ends 6 connections from fresh addresses later.
        let fresh = (0..10)
            .map(|i| l.check_connect(ip(&format!("203.0.113.{i}"))))
            .filter(|r| r.is_ok())
            .count();
        assert_eq!(fresh, 6);
        assert_eq!(l.refused(LimitKind::Global), 4);
        clock.advance(Duration::from_secs(1));
        assert!(l.check_connect(ip("203.0.113.99")).is_ok());
    }

    #[test]
    fn ipv6_clients_share_their_slash_64() {
        let (l, _) = limits(|s| s.ip_connects = Rate::per_sec(1).burst(2));
        assert!(l.check_connect(ip("2001:db8:1:2::1")).is_ok());
        assert!(l.check_connect(ip("2001:db8:1:2::2")).is_ok());
        assert!(l.check_connect(ip("2001:db8:1:2:ffff::3")).is_err());
        assert!(l.check_connect(ip("2001:db8:1:3::1")).is_ok());
        assert_eq!(l.tracked_ips(), 2);
    }

    #[test]
    fn a_flood_from_many_addresses_is_bounded_in_memory() {
        let (l, clock) = limits(|s| {
            s.ip_connects = Rate::per_sec(20).burst(40);
            s.max_tracked = 5_000;
        });
        // 200,000 distinct addresses in one instant.
        for i in 0..200_000u32 {
            let _ = l.check_connect(IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i)));
        }
        assert_eq!(l.tracked_ips(), 5_000);
        assert_eq!(l.untracked_ips(), 195_000);
        // Once their buckets refill, the sweep forgets them.
        clock.advance(Duration::from_secs(3));
        l.sweep();
        assert_eq!(l.tracked_ips(), 0);
    }
}
