//! Seata-Java's `ConsistentHashLoadBalance` ring, bit for bit.
//!
//! Java puts `hash(invoker.toString() + i)` for `i < virtualNodes` into a
//! `TreeMap<Long, T>` (a later put wins on a collision), then takes the ceiling entry of
//! `hash(xid)`, wrapping to the first. `invoker.toString()` is
//! `InetSocketAddress.toString()` (`/127.0.0.1:8091`, `/[2000:0:0:0:1:2345:6789:abcd]:8092`
//! on JDK 14+); `hash` is SHA-256 of key‖key, first 8 bytes as a signed long. Java
//! rebuilds the ring on every call; we build it once per membership change.
//! Weights are ignored, as in Java.

use crate::hash::java_hash;
use crate::picker::{Members, scan_from};

/// Seata's default `client.loadBalance.virtualNodes`.
pub const SEATA_DEFAULT_VIRTUAL_NODES: u32 = 10;

pub(crate) struct JavaRing {
    hashes: Box<[i64]>,
    nodes: Box<[u32]>,
}

/// Most points a Java ring holds (a `virtualNodes` typo must not exhaust memory).
const MAX_JAVA_POINTS: u64 = 1 << 22;

impl JavaRing {
    pub(crate) fn build(members: &Members, virtual_nodes: u32) -> JavaRing {
        let n = members.endpoints.len().max(1) as u64;
        let virtual_nodes = if u64::from(virtual_nodes) * n > MAX_JAVA_POINTS {
            let capped = (MAX_JAVA_POINTS / n).max(1) as u32;
            tracing::warn!(
                virtual_nodes,
                endpoints = n,
                capped,
                "virtualNodes x endpoints exceeds 4M ring points; capping (keys no longer map as Seata-Java does)"
            );
            capped
        } else {
            virtual_nodes
        };
        let mut points: Vec<(i64, u32, usize)> = Vec::new();
        let mut seq = 0usize;
        for (i, ep) in members.endpoints.iter().enumerate() {
            let base = ep.instance().java_inet_socket_string();
            for v in 0..virtual_nodes {
                points.push((java_hash(format!("{base}{v}").as_bytes()), i as u32, seq));
                seq += 1;
            }
        }
        // TreeMap.put: the last put of a hash wins. Sort by (hash, put order) and keep
        // the last of each run.
        points.sort_unstable_by_key(|&(h, _, s)| (h, s));
        let mut hashes = Vec::with_capacity(points.len());
        let mut nodes = Vec::with_capacity(points.len());
        for (k, &(h, node, _)) in points.iter().enumerate() {
            if points.get(k + 1).is_some_and(|next| next.0 == h) {
                continue;
            }
            hashes.push(h);
            nodes.push(node);
        }
        JavaRing {
            hashes: hashes.into_boxed_slice(),
            nodes: nodes.into_boxed_slice(),
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.hashes.len()
    }

    /// `ceilingEntry(h)`, else `firstEntry()`: the position.
    #[inline]
    pub(crate) fn position(&self, h: i64) -> usize {
        let i = self.hashes.partition_point(|&x| x < h);
        if i == self.hashes.len() { 0 } else { i }
    }

    /// Walks from the ceiling of `h` and returns the first endpoint `ok` accepts.
    #[inline]
    pub(crate) fn walk(&self, h: i64, mut ok: impl FnMut(usize) -> bool) -> Option<usize> {
        if self.len() == 0 {
            return None;
        }
        scan_from(self.position(h), self.len(), |pos| {
            ok(self.nodes[pos] as usize)
        })
        .map(|pos| self.nodes[pos] as usize)
    }
}
