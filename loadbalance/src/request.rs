//! What a caller tells the picker about one request.

use std::net::IpAddr;

use meshline_instance::InstanceKey;

use crate::Endpoint;

/// Endpoints a retry must avoid: a borrowed slice, never a set, so building a request
/// allocates nothing.
///
/// Indices refer to the endpoint list of the picker that served the first attempt
/// ([`crate::Picked::index`]); they are only meaningful while membership has not
/// changed. Keys are stable across membership changes and are what a retry loop should
/// normally use.
#[derive(Debug, Clone, Copy, Default)]
pub enum Exclusions<'a> {
    /// Nothing excluded.
    #[default]
    None,
    /// Positions in the picker's endpoint list.
    Indices(&'a [usize]),
    /// Endpoint identities.
    Keys(&'a [InstanceKey]),
}

/// `From` a slice, an array and a `Vec` of `$item` (what a retry loop has at hand) as
/// the `$variant` exclusions: the same three conversions for indices and for keys.
macro_rules! exclusions_from {
    ($item:ty => $variant:ident) => {
        impl<'a> From<&'a [$item]> for Exclusions<'a> {
            fn from(v: &'a [$item]) -> Self {
                Exclusions::$variant(v)
            }
        }

        impl<'a, const N: usize> From<&'a [$item; N]> for Exclusions<'a> {
            fn from(v: &'a [$item; N]) -> Self {
                Exclusions::$variant(v)
            }
        }

        impl<'a> From<&'a Vec<$item>> for Exclusions<'a> {
            fn from(v: &'a Vec<$item>) -> Self {
                Exclusions::$variant(v)
            }
        }
    };
}

exclusions_from!(usize => Indices);
exclusions_from!(InstanceKey => Keys);

impl Exclusions<'_> {
    /// Whether nothing is excluded.
    #[inline]
    pub fn is_empty(&self) -> bool {
        match self {
            Exclusions::None => true,
            Exclusions::Indices(s) => s.is_empty(),
            Exclusions::Keys(s) => s.is_empty(),
        }
    }

    /// Whether the endpoint at `index` (which is `endpoint`) is excluded.
    #[inline]
    pub fn contains(&self, index: usize, endpoint: &Endpoint) -> bool {
        match self {
            Exclusions::None => false,
            Exclusions::Indices(s) => s.contains(&index),
            Exclusions::Keys(s) => s.iter().any(|k| k == endpoint.key()),
        }
    }
}

/// The routing facts of one request. Cheap to build (no allocation), `Copy`.
///
/// Which field an algorithm reads:
/// - `XID` reads [`xid`](Self::xid) (`ip:port:txid`);
/// - consistent hashing reads the [`hash`](Self::with_hash), else the
///   [`key`](Self::with_key) bytes, else the xid (Seata's routing key), and picks at
///   random when there is none (as Seata does for a blank key); the Java-compatible ring
///   reads a [prepared Java hash](Self::with_java_hash), else hashes the key bytes, else
///   the xid;
/// - jump hashing reads the numeric hash first;
/// - the source-address game balancer reads [`source`](Self::with_source);
/// - zone preference reads [`zone`](Self::with_zone);
/// - every algorithm honours [`excluding`](Self::excluding).
#[derive(Debug, Clone, Copy, Default)]
pub struct PickRequest<'a> {
    xid: Option<&'a str>,
    key: Option<&'a [u8]>,
    hash: Option<u64>,
    java_hash: Option<i64>,
    source: Option<IpAddr>,
    zone: Option<&'a str>,
    exclude: Exclusions<'a>,
}

impl<'a> PickRequest<'a> {
    /// A request with nothing but a Seata XID (or any Seata routing key, such as a
    /// GlobalBegin's transaction name).
    pub fn xid(xid: &'a str) -> Self {
        PickRequest {
            xid: Some(xid),
            ..PickRequest::default()
        }
    }

    /// Sets the Seata XID.
    pub fn with_xid(mut self, xid: &'a str) -> Self {
        self.xid = Some(xid);
        self
    }

    /// Sets the hash key bytes (an account id, a session id, a cache key...).
    pub fn with_key(mut self, key: &'a [u8]) -> Self {
        self.key = Some(key);
        self
    }

    /// Sets a numeric key (a role id, a shard number...). Consistent hashing mixes it
    /// first, so sequential ids spread evenly; jump hashing uses it as is.
    pub fn with_hash(mut self, hash: u64) -> Self {
        self.hash = Some(hash);
        self
    }

    /// Sets the routing key's Seata-Java ring hash, computed once with
    /// [`crate::hash::java_hash`] (for example when a transaction begins) and reused for
    /// each of its calls.
    ///
    /// Java compatibility makes `ConsistentHashJava` hash every key with SHA-256 over
    /// the key twice: two 64-byte blocks for a typical XID, about 110 ns, while the ring
    /// lookup itself takes about 10 ns. A Seata transaction makes several calls with one
    /// XID (branch registers, reports, commit), so hashing it once per transaction
    /// instead of once per call removes nearly all of the pick's cost. The value must
    /// be `java_hash` of the key this request would otherwise be hashed by (the key
    /// bytes, else the xid); other balancers ignore it.
    pub fn with_java_hash(mut self, hash: i64) -> Self {
        self.java_hash = Some(hash);
        self
    }

    /// Sets the caller's source address (for source-address affinity).
    pub fn with_source(mut self, source: IpAddr) -> Self {
        self.source = Some(source);
        self
    }

    /// Sets the caller's zone (for zone preference).
    pub fn with_zone(mut self, zone: &'a str) -> Self {
        self.zone = Some(zone);
        self
    }

    /// Excludes endpoints, by index (`&[usize]`) or identity (`&[InstanceKey]`):
    /// typically those a retry already tried.
    pub fn excluding(mut self, exclude: impl Into<Exclusions<'a>>) -> Self {
        self.exclude = exclude.into();
        self
    }

    /// The XID, if set.
    #[inline]
    pub fn xid_str(&self) -> Option<&'a str> {
        self.xid
    }

    /// The key bytes, if set.
    #[inline]
    pub fn key(&self) -> Option<&'a [u8]> {
        self.key
    }

    /// The numeric key, if set.
    #[inline]
    pub fn hash(&self) -> Option<u64> {
        self.hash
    }

    /// The prepared Seata-Java ring hash, if set.
    #[inline]
    pub fn java_hash(&self) -> Option<i64> {
        self.java_hash
    }

    /// The source address, if set.
    #[inline]
    pub fn source(&self) -> Option<IpAddr> {
        self.source
    }

    /// The caller's zone, if set.
    #[inline]
    pub fn zone(&self) -> Option<&'a str> {
        self.zone
    }

    /// The exclusions.
    #[inline]
    pub fn exclusions(&self) -> Exclusions<'a> {
        self.exclude
    }

    /// Whether the endpoint at `index` is excluded.
    #[inline]
    pub fn is_excluded(&self, index: usize, endpoint: &Endpoint) -> bool {
        self.exclude.contains(index, endpoint)
    }

    /// The text a Seata-compatible ring hashes: the key bytes, else the xid.
    #[inline]
    pub(crate) fn routing_text(&self) -> Option<&'a [u8]> {
        match (self.key, self.xid) {
            (Some(k), _) if !k.is_empty() => Some(k),
            (_, Some(x)) if !is_blank(x) => Some(x.as_bytes()),
            _ => None,
        }
    }

    /// A 64-bit routing hash: the numeric key (mixed), else XXH3 of the key bytes, else
    /// of the xid. `None` when the request carries no key.
    #[inline]
    pub(crate) fn routing_hash(&self) -> Option<u64> {
        if let Some(h) = self.hash {
            return Some(crate::hash::mix64(h));
        }
        self.routing_text().map(crate::hash::key_hash)
    }
}

/// Whether `s` is empty or only whitespace (Seata's blank key). An XID starts with its
/// server's address, so the first byte nearly always answers.
#[inline]
fn is_blank(s: &str) -> bool {
    match s.as_bytes().first() {
        // A printable ASCII byte is a character that is not whitespace.
        Some(&b) if b > b' ' && b < 0x7f => false,
        _ => s.trim().is_empty(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn blank_is_whitespace_only() {
        for (s, blank) in [
            ("", true),
            (" ", true),
            ("\t\n \u{3000}", true),
            ("\u{b}", true),
            ("x", false),
            (" x ", false),
            ("\u{3000}x", false),
            ("10.0.0.1:8091:1", false),
            ("\u{7f}", false),
            ("é", false),
        ] {
            assert_eq!(super::is_blank(s), blank, "{s:?}");
            assert_eq!(super::is_blank(s), s.trim().is_empty(), "{s:?}");
        }
    }
}
