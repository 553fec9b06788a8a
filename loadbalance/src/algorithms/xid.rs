//! Seata's `XID` balancer: send a transaction's requests to the TC that began it.
//!
//! A Seata XID is `ip:port:transactionId`, the IP in Java's `getHostAddress()` form
//! (IPv6 unbracketed and uncompressed: `2000:0:0:0:1:2345:6789:abcd:8091:123`). XA
//! phase two must reach the original TC, so this matters for correctness, not only
//! for locality.
//!
//! As Seata-Java does, we take the address before the last `:`, split its port at the
//! last `:` again, and compare **socket addresses** (not strings), so any spelling of an
//! IPv6 address matches. seata-go compares strings and never matches IPv6; we do not
//! copy that. Endpoints registered by DNS name match an XID naming the same host.
//! When the XID is absent, malformed, names no endpoint of the list (the list holds the
//! connected endpoints) or names an excluded one, the pick falls back to
//! [`crate::RandomLoadBalance`]'s choice. A named endpoint is chosen even with weight 0:
//! a draining TC must still finish its own transactions.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crate::hash::key_hash;
use crate::picker::{EmptyPicker, Members};
use crate::{Endpoint, LoadBalance, MembershipChange, PickRequest, Picker, RandomLoadBalance};

/// Route by the TC address inside a Seata XID, else random (Seata name `XID`).
#[derive(Debug, Default, Clone, Copy)]
pub struct XidLoadBalance;

impl XidLoadBalance {
    /// The balancer.
    pub fn new() -> Self {
        XidLoadBalance
    }
}

/// The TC address named by a Seata XID (`ip:port:txid`, IPv6 bracketed or not).
///
/// `None` for anything else (no `:`, a non-numeric port, a bad IP). IPv4-mapped IPv6
/// addresses are returned as IPv4, as Java's `InetAddress` does.
pub fn parse_xid_address(xid: &str) -> Option<SocketAddr> {
    let (host, port) = split_xid(xid)?;
    let ip: IpAddr = host.parse().ok()?;
    Some(SocketAddr::new(canonical(ip), port))
}

/// `(host, port)` of `ip:port:txid`; host without brackets.
fn split_xid(xid: &str) -> Option<(&str, u16)> {
    let addr = &xid[..xid.rfind(':')?];
    let colon = addr.rfind(':')?;
    let port: u16 = addr[colon + 1..].parse().ok()?;
    let host = &addr[..colon];
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() || port == 0 {
        return None;
    }
    Some((host, port))
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// A socket address as one sortable integer pair.
#[inline]
fn addr_key(sa: SocketAddr) -> (u128, u16) {
    let ip = match sa.ip() {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    };
    (ip, sa.port())
}

impl LoadBalance for XidLoadBalance {
    fn name(&self) -> &str {
        "XID"
    }

    fn routes_by_xid(&self) -> bool {
        true
    }

    /// Picks by the XID's address (else at random), never by load.
    fn reads_in_flight(&self) -> bool {
        false
    }

    fn build(&self, endpoints: &[Endpoint]) -> Arc<dyn Picker> {
        xid_picker(endpoints, RandomLoadBalance.build(endpoints))
    }

    fn rebuild(&self, change: &MembershipChange<'_>) -> Arc<dyn Picker> {
        xid_repicker(change, RandomLoadBalance.rebuild(change))
    }
}

/// The XID balancer's picker over `endpoints`, with `fallback` for requests whose XID is
/// absent, malformed, names no endpoint or names an excluded one.
pub(crate) fn xid_picker(endpoints: &[Endpoint], fallback: Arc<dyn Picker>) -> Arc<dyn Picker> {
    if endpoints.is_empty() {
        return Arc::new(EmptyPicker);
    }
    let mut by_addr: Vec<((u128, u16), u32)> = Vec::with_capacity(endpoints.len());
    let mut by_name: Vec<(Box<str>, u16, u32)> = Vec::new();
    for (i, ep) in endpoints.iter().enumerate() {
        match ep.instance().socket_addr() {
            Some(sa) => by_addr.push((addr_key(sa), i as u32)),
            None => by_name.push((ep.instance().host().into(), ep.instance().port(), i as u32)),
        }
    }
    by_addr.sort_unstable();
    let forms = endpoints.iter().map(forms_of).collect();
    Arc::new(XidPicker {
        by_text: TextIndex::new(forms),
        members: Members::new(endpoints),
        by_addr: by_addr.into_boxed_slice(),
        by_name: by_name.into_boxed_slice(),
        fallback,
    })
}

/// [`xid_picker`] for a membership change: the previous picker's tables updated for
/// the endpoints that joined and left (each remaining endpoint's texts are shared,
/// its addresses renumbered), so one endpoint joining 10 000 parses and formats one
/// address. Builds afresh when the previous picker is not an XID picker.
pub(crate) fn xid_repicker(
    change: &MembershipChange<'_>,
    fallback: Arc<dyn Picker>,
) -> Arc<dyn Picker> {
    let endpoints = change.endpoints();
    if endpoints.is_empty() {
        return Arc::new(EmptyPicker);
    }
    let Some(previous) = change
        .previous()
        .picker()
        .as_any()
        .and_then(|p| p.downcast_ref::<XidPicker>())
        .filter(|p| p.by_text.forms.len() == change.previous().len())
    else {
        return xid_picker(endpoints, fallback);
    };
    // Where each previous endpoint is now (`u32::MAX`: gone).
    let mut new_of_old = vec![u32::MAX; previous.by_text.forms.len()];
    for (i, slot) in (0..endpoints.len()).filter_map(|i| Some((i, change.previous_index(i)?))) {
        new_of_old[slot] = i as u32;
    }
    let renumber = |&(key, j): &((u128, u16), u32)| {
        let i = new_of_old[j as usize];
        (i != u32::MAX).then_some((key, i))
    };
    // Remaining addresses keep their order unless renumbering reorders equal
    // addresses (a repeated address): then sort.
    let mut by_addr: Vec<((u128, u16), u32)> =
        previous.by_addr.iter().filter_map(renumber).collect();
    let mut by_name: Vec<(Box<str>, u16, u32)> = previous
        .by_name
        .iter()
        .filter_map(|(host, port, j)| {
            let i = new_of_old[*j as usize];
            (i != u32::MAX).then(|| (host.clone(), *port, i))
        })
        .collect();
    let mut arriving: Vec<((u128, u16), u32)> = Vec::new();
    for i in change.joined() {
        let inst = endpoints[i].instance();
        match inst.socket_addr() {
            Some(sa) => arriving.push((addr_key(sa), i as u32)),
            None => by_name.push((inst.host().into(), inst.port(), i as u32)),
        }
    }
    if !arriving.is_empty() || !by_addr.is_sorted() {
        arriving.sort_unstable();
        by_addr = merge_sorted(by_addr, arriving);
        if !by_addr.is_sorted() {
            by_addr.sort_unstable();
        }
    }
    // Name lookups take the first match in list order.
    by_name.sort_unstable_by_key(|e| e.2);
    let forms = (0..endpoints.len())
        .map(|i| match change.previous_index(i) {
            Some(j) => previous.by_text.forms[j].clone(),
            None => forms_of(&endpoints[i]),
        })
        .collect();
    Arc::new(XidPicker {
        by_text: TextIndex::new(forms),
        members: Members::shared(endpoints.clone()),
        by_addr: by_addr.into_boxed_slice(),
        by_name: by_name.into_boxed_slice(),
        fallback,
    })
}

/// The fallback picker inside `picker`, if it is an XID picker (what an algorithm
/// wrapped by [`crate::XidFirstLoadBalance`] built last).
pub(crate) fn xid_fallback(picker: &dyn Picker) -> Option<&Arc<dyn Picker>> {
    picker
        .as_any()
        .and_then(|p| p.downcast_ref::<XidPicker>())
        .map(|p| &p.fallback)
}

/// The merge of two sorted lists (sorted if both are).
fn merge_sorted<T: Ord + Copy>(a: Vec<T>, b: Vec<T>) -> Vec<T> {
    if b.is_empty() {
        return a;
    }
    let mut out = Vec::with_capacity(a.len() + b.len());
    let mut b = b.into_iter().peekable();
    for x in a {
        while let Some(&y) = b.peek()
            && y < x
        {
            out.push(y);
            b.next();
        }
        out.push(x);
    }
    out.extend(b);
    out
}

/// An endpoint's spellings in XIDs, each with its XXH3: Java's `ip:port` (IPv6
/// unbracketed and uncompressed) and the identity text, once if they are one.
type Forms = Arc<[(u64, Box<[u8]>)]>;

fn forms_of(ep: &Endpoint) -> Forms {
    let inst = ep.instance();
    let mut forms = vec![inst.to_java_string(), inst.to_string()];
    forms.dedup();
    forms
        .into_iter()
        .map(|form| {
            (
                key_hash(form.as_bytes()),
                form.into_bytes().into_boxed_slice(),
            )
        })
        .collect()
}

/// Exact-text lookup of the address part of an XID, for the spellings TCs write
/// (Java's `ip:port` with IPv6 unbracketed and uncompressed, and `[v6]:port`): a
/// hash probe instead of parsing an IP address. Any other spelling falls through to
/// the socket-address comparison.
struct TextIndex {
    /// Open addressing, power-of-two size: (XXH3 of the text, endpoint index + 1 (0 =
    /// empty), which of the endpoint's forms).
    slots: Box<[(u64, u32, u32)]>,
    /// Each endpoint's forms, shared with the index of the next membership while the
    /// endpoint stays.
    forms: Box<[Forms]>,
}

impl TextIndex {
    fn new(forms: Box<[Forms]>) -> TextIndex {
        let entries: usize = forms.iter().map(|f| f.len()).sum();
        let size = (entries * 2).next_power_of_two().max(2);
        let mut slots = vec![(0u64, 0u32, 0u32); size];
        for (i, endpoint_forms) in forms.iter().enumerate() {
            for (f, &(h, _)) in endpoint_forms.iter().enumerate() {
                let mut pos = h as usize & (size - 1);
                while slots[pos].1 != 0 {
                    pos = (pos + 1) & (size - 1);
                }
                slots[pos] = (h, i as u32 + 1, f as u32);
            }
        }
        TextIndex {
            slots: slots.into_boxed_slice(),
            forms,
        }
    }

    #[inline]
    fn get(&self, text: &[u8]) -> Option<usize> {
        let h = key_hash(text);
        let mask = self.slots.len() - 1;
        let mut pos = h as usize & mask;
        loop {
            let (sh, si, f) = self.slots[pos];
            if si == 0 {
                return None;
            }
            if sh == h && *self.forms[si as usize - 1][f as usize].1 == *text {
                return Some(si as usize - 1);
            }
            pos = (pos + 1) & mask;
        }
    }
}

struct XidPicker {
    by_text: TextIndex,
    members: Members,
    by_addr: Box<[((u128, u16), u32)]>,
    by_name: Box<[(Box<str>, u16, u32)]>,
    fallback: Arc<dyn Picker>,
}

impl XidPicker {
    #[inline]
    fn find(&self, xid: &str) -> Option<usize> {
        let addr = &xid[..xid.rfind(':')?];
        if let Some(i) = self.by_text.get(addr.as_bytes()) {
            return Some(i);
        }
        let (host, port) = split_xid(xid)?;
        match host.parse::<IpAddr>() {
            Ok(ip) => {
                let key = addr_key(SocketAddr::new(canonical(ip), port));
                self.by_addr
                    .binary_search_by(|(k, _)| k.cmp(&key))
                    .ok()
                    .map(|pos| self.by_addr[pos].1 as usize)
            }
            Err(_) => self
                .by_name
                .iter()
                .find(|(h, p, _)| *p == port && h.eq_ignore_ascii_case(host))
                .map(|&(_, _, i)| i as usize),
        }
    }
}

impl Picker for XidPicker {
    #[inline]
    fn pick(&self, req: &PickRequest<'_>) -> Option<usize> {
        if let Some(i) = req.xid_str().and_then(|x| self.find(x))
            && !req.is_excluded(i, &self.members.endpoints[i])
        {
            return Some(i);
        }
        self.fallback.pick(req)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_seata_xids() {
        assert_eq!(
            parse_xid_address("127.0.0.1:8091:123456"),
            Some("127.0.0.1:8091".parse().unwrap())
        );
        assert_eq!(
            parse_xid_address("2000:0000:0000:0000:0001:2345:6789:abcd:8092:123456"),
            Some("[2000::1:2345:6789:abcd]:8092".parse().unwrap())
        );
        assert_eq!(
            parse_xid_address("[::1]:8091:7"),
            Some("[::1]:8091".parse().unwrap())
        );
        assert_eq!(
            parse_xid_address("::ffff:10.0.0.1:8091:7"),
            Some("10.0.0.1:8091".parse().unwrap())
        );
        for bad in [
            "",
            "XID",
            ":",
            "127.0.0.1:8091",
            "127.0.0.1:x:1",
            "1.2.3:80:1",
            "[::1:80:1",
            "127.0.0.1:0:1",
            "127.0.0.1:65536:1",
            "my tx: name",
        ] {
            assert_eq!(parse_xid_address(bad), None, "{bad}");
        }
    }
}
