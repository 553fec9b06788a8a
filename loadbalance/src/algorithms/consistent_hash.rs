//! Seata's `ConsistentHashLoadBalance`, in two hash modes.
//!
//! - [`HashMode::Fast`] (the default): a ketama-style ring with 160 points per weight
//!   unit, XXH3 keys and an O(1) lookup (see the `ring` module). Weighted. Use it when
//!   every client of the cluster is a meshline client.
//! - [`HashMode::Java`]: Seata-Java's ring exactly (SHA-256, `"/ip:port" + i`, 10
//!   virtual nodes by default), so a Rust client sends an XID to the TC a Java client
//!   would. Use it in a mixed Java/Rust fleet.
//!
//! The ring is built once per membership change (Java rebuilds it on every call). The
//! routing key is the request's hash / key / XID ([`PickRequest`]); with no key the pick
//! is random, as Seata's is for a blank XID. An excluded endpoint is skipped by walking
//! the ring to the next endpoint, which is also where the key moves if that endpoint
//! leaves for good.

use std::sync::Arc;

use crate::algorithms::java_ring::{JavaRing, SEATA_DEFAULT_VIRTUAL_NODES};
use crate::algorithms::ring::{DEFAULT_POINTS_PER_WEIGHT, Ring};
use crate::picker::{EmptyPicker, Members};
use crate::{Endpoint, LoadBalance, PickRequest, Picker, hash};

/// How [`ConsistentHashLoadBalance`] hashes keys and places endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashMode {
    /// XXH3 keys, `points_per_weight` points per weight unit (default 160), O(1) lookup.
    Fast {
        /// Ring points per unit of (normalised) weight.
        points_per_weight: u32,
    },
    /// Seata-Java compatible: SHA-256, `virtual_nodes` points per endpoint (default 10),
    /// weights ignored.
    Java {
        /// Seata's `client.loadBalance.virtualNodes`.
        virtual_nodes: u32,
    },
}

impl Default for HashMode {
    fn default() -> Self {
        HashMode::Fast {
            points_per_weight: DEFAULT_POINTS_PER_WEIGHT,
        }
    }
}

impl HashMode {
    /// Seata-Java's ring with its default 10 virtual nodes.
    pub fn java() -> Self {
        HashMode::Java {
            virtual_nodes: SEATA_DEFAULT_VIRTUAL_NODES,
        }
    }
}

/// Consistent hashing on the request's routing key (Seata name
/// `ConsistentHashLoadBalance`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ConsistentHashLoadBalance {
    mode: HashMode,
}

impl ConsistentHashLoadBalance {
    /// The fast ring (160 points per weight unit).
    pub fn new() -> Self {
        ConsistentHashLoadBalance::default()
    }

    /// Seata-Java's ring with `virtual_nodes` points per endpoint (Seata default 10;
    /// 0 is read as 1).
    pub fn java(virtual_nodes: u32) -> Self {
        ConsistentHashLoadBalance {
            mode: HashMode::Java {
                virtual_nodes: virtual_nodes.max(1),
            },
        }
    }

    /// A balancer with the given mode.
    pub fn with_mode(mode: HashMode) -> Self {
        ConsistentHashLoadBalance { mode }
    }

    /// The mode.
    pub fn mode(&self) -> HashMode {
        self.mode
    }
}

impl LoadBalance for ConsistentHashLoadBalance {
    fn name(&self) -> &str {
        "ConsistentHashLoadBalance"
    }

    fn build(&self, endpoints: &[Endpoint]) -> Arc<dyn Picker> {
        if endpoints.is_empty() {
            return Arc::new(EmptyPicker);
        }
        let members = Members::new(endpoints);
        match self.mode {
            HashMode::Fast { points_per_weight } => Arc::new(RingPicker {
                ring: Ring::build(&members, points_per_weight),
                members,
                key: RingKey::Request,
            }),
            HashMode::Java { virtual_nodes } => Arc::new(JavaRingPicker {
                ring: JavaRing::build(&members, virtual_nodes.max(1)),
                members,
            }),
        }
    }
}

/// Which request field a fast-ring picker hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RingKey {
    /// [`PickRequest::routing_hash`]: hash, else key, else xid.
    Request,
    /// The source IP address, else as `Request`.
    Source,
}

pub(crate) struct RingPicker {
    pub(crate) ring: Ring,
    pub(crate) members: Members,
    pub(crate) key: RingKey,
}

impl RingPicker {
    #[inline]
    fn point(&self, req: &PickRequest<'_>) -> u64 {
        let h = match (self.key, req.source()) {
            (RingKey::Source, Some(std::net::IpAddr::V4(v4))) => {
                Some(hash::mix64(u64::from(u32::from(v4))))
            }
            (RingKey::Source, Some(std::net::IpAddr::V6(v6))) => Some(hash::key_hash(&v6.octets())),
            _ => req.routing_hash(),
        };
        h.unwrap_or_else(|| fastrand::u64(..))
    }
}

impl Picker for RingPicker {
    #[inline]
    fn pick(&self, req: &PickRequest<'_>) -> Option<usize> {
        let h = self.point(req);
        if req.exclusions().is_empty() {
            return Some(self.ring.node(h));
        }
        self.ring.walk(h, |i| self.members.eligible(i, req))
    }
}

struct JavaRingPicker {
    ring: JavaRing,
    members: Members,
}

impl Picker for JavaRingPicker {
    #[inline]
    fn pick(&self, req: &PickRequest<'_>) -> Option<usize> {
        let h = match (req.java_hash(), req.routing_text()) {
            (Some(prepared), _) => prepared,
            (None, Some(text)) => hash::java_hash(text),
            // Seata hashes a random long's text for a blank key: a random point.
            (None, None) => fastrand::i64(..),
        };
        self.ring
            .walk(h, |i| !req.is_excluded(i, &self.members.endpoints[i]))
    }
}
