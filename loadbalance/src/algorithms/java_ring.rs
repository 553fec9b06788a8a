//! Seata-Java's `ConsistentHashLoadBalance` ring, bit for bit.
//!
//! Java puts `hash(invoker.toString() + i)` for `i < virtualNodes` into a
//! `TreeMap<Long, T>` (a later put wins on a collision), then takes the ceiling entry of
//! `hash(xid)`, wrapping to the first. `invoker.toString()` is
//! `InetSocketAddress.toString()` (`/127.0.0.1:8091`, `/[2000:0:0:0:1:2345:6789:abcd]:8092`
//! on JDK 14+); `hash` is SHA-256 of key‖key, first 8 bytes as a signed long. Java
//! rebuilds the ring on every call; we build it once per membership change.
//! Weights are ignored, as in Java.

use crate::MembershipChange;
use crate::hash::{java_hash, sha256_head};
use crate::picker::{Members, scan_from};

/// Seata's default `client.loadBalance.virtualNodes`.
pub const SEATA_DEFAULT_VIRTUAL_NODES: u32 = 10;

pub(crate) struct JavaRing {
    hashes: Box<[i64]>,
    nodes: Box<[u32]>,
    /// Points per endpoint (Seata's `virtualNodes`, after the cap on the ring's size).
    virtual_nodes: u32,
    /// A put replaced an earlier one of the same hash (a 64-bit collision): which point
    /// stays depends on put order, so the ring is built afresh rather than updated.
    collided: bool,
}

/// Most points a Java ring holds (a `virtualNodes` typo must not exhaust memory).
const MAX_JAVA_POINTS: u64 = 1 << 22;

/// Points per endpoint for `n` endpoints: `virtual_nodes`, capped so that the ring
/// holds at most [`MAX_JAVA_POINTS`]; whether it was capped.
fn points_per_endpoint(n: usize, virtual_nodes: u32) -> (u32, bool) {
    let n = n.max(1) as u64;
    if u64::from(virtual_nodes) * n > MAX_JAVA_POINTS {
        ((MAX_JAVA_POINTS / n).max(1) as u32, true)
    } else {
        (virtual_nodes, false)
    }
}

/// Writes Java's `InetSocketAddress.toString()` of `ep` into `text`: by hand for an
/// IPv4 literal (`/` host `:` port; an address Rust parses as IPv4 is already in
/// Java's dotted form, since leading zeros are refused), else
/// [`Instance::java_inet_socket_string`](meshline_instance::Instance::java_inet_socket_string).
/// Formatting through the machinery cost as much as a fifth of a 10 000-endpoint
/// build.
fn java_base(ep: &crate::Endpoint, text: &mut Vec<u8>) {
    text.clear();
    let inst = ep.instance();
    let host = inst.host();
    if host.parse::<std::net::Ipv4Addr>().is_ok() {
        text.push(b'/');
        text.extend_from_slice(host.as_bytes());
        text.push(b':');
        push_decimal(text, u32::from(inst.port()));
    } else {
        text.extend_from_slice(inst.java_inet_socket_string().as_bytes());
    }
}

/// Appends `v` in decimal.
fn push_decimal(text: &mut Vec<u8>, mut v: u32) {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    text.extend_from_slice(&digits[at..]);
}

/// `hash(base + v)`: Java's point hash of the `v`-th virtual node of the endpoint
/// whose `InetSocketAddress.toString()` is `text[..base]`; `text` keeps the base.
fn point_hash(text: &mut Vec<u8>, base: usize, v: u32) -> i64 {
    text.truncate(base);
    push_decimal(text, v);
    java_hash(text)
}

/// Calls `f(v, hash(base + v))` for every virtual node `v < virtual_nodes` of the
/// endpoint whose `InetSocketAddress.toString()` is `text[..base]`.
///
/// Virtual nodes 0 to 9 have messages of one length, `base d base d`: the padded
/// message is laid out once per endpoint and only the two digits change from one
/// point to the next (copying and padding each point's text cost as much as a
/// third of its compression). Later nodes, and bases too long for two blocks, take
/// [`point_hash`].
fn point_hashes(text: &mut Vec<u8>, base: usize, virtual_nodes: u32, mut f: impl FnMut(u32, i64)) {
    let key = base + 1;
    let len = 2 * key;
    let blocks = (len + 9).div_ceil(64);
    let short = virtual_nodes.min(10);
    let mut done = 0;
    if blocks <= 2 {
        let mut buf = [[0u8; 64]; 2];
        let flat = buf.as_flattened_mut();
        flat[..base].copy_from_slice(&text[..base]);
        flat[key..key + base].copy_from_slice(&text[..base]);
        flat[len] = 0x80;
        flat[blocks * 64 - 8..blocks * 64].copy_from_slice(&(len as u64 * 8).to_be_bytes());
        // Where the two digits go, as (block, byte).
        let (first, second) = ((key - 1) / 64, (len - 1) / 64);
        for v in 0..short {
            let digit = b'0' + v as u8;
            buf[first][(key - 1) % 64] = digit;
            buf[second][(len - 1) % 64] = digit;
            f(v, sha256_head(&buf[..blocks]));
        }
        done = short;
    }
    for v in done..virtual_nodes {
        f(v, point_hash(text, base, v));
    }
}

/// A hash as an unsigned key of the same order.
#[inline]
fn order_key(h: i64) -> u64 {
    (h as u64) ^ (1 << 63)
}

impl JavaRing {
    pub(crate) fn build(members: &Members, virtual_nodes: u32) -> JavaRing {
        let n = members.endpoints.len();
        let (virtual_nodes, capped) = points_per_endpoint(n, virtual_nodes);
        if capped {
            tracing::warn!(
                virtual_nodes,
                endpoints = n,
                "virtualNodes x endpoints exceeds 4M ring points; capping (keys no longer map as Seata-Java does)"
            );
        }
        // (order key, endpoint) in put order: endpoint by endpoint, virtual node by
        // virtual node.
        let total = n * virtual_nodes as usize;
        let mut points: Vec<(u64, u32)> = Vec::with_capacity(total);
        let mut text = Vec::with_capacity(64);
        for (i, ep) in members.endpoints.iter().enumerate() {
            java_base(ep, &mut text);
            let base = text.len();
            point_hashes(&mut text, base, virtual_nodes, |_, h| {
                points.push((order_key(h), i as u32));
            });
        }
        let points = sort_stable(points);
        // TreeMap.put: the last put of a hash wins. The sort is stable, so each run of
        // equal hashes is in put order: keep its last point.
        let mut hashes = Vec::with_capacity(points.len());
        let mut nodes = Vec::with_capacity(points.len());
        let mut collided = false;
        for (k, &(key, node)) in points.iter().enumerate() {
            if points.get(k + 1).is_some_and(|next| next.0 == key) {
                collided = true;
                continue;
            }
            hashes.push(order_key(key as i64) as i64);
            nodes.push(node);
        }
        JavaRing {
            hashes: hashes.into_boxed_slice(),
            nodes: nodes.into_boxed_slice(),
            virtual_nodes,
            collided,
        }
    }

    /// This ring updated for a membership change: the points of the endpoints that
    /// left are dropped, the others' renumbered, and the joining endpoints' points
    /// (the only ones hashed) merged in. `None` when the change is not one to merge
    /// (then build afresh): a large change, a different cap on the points per
    /// endpoint, or a hash collision (where Java's put order decides).
    pub(crate) fn update(
        &self,
        members: &Members,
        virtual_nodes: u32,
        change: &MembershipChange<'_>,
    ) -> Option<JavaRing> {
        let n = members.endpoints.len();
        let (virtual_nodes, _) = points_per_endpoint(n, virtual_nodes);
        let (joined, left) = (change.joined(), change.left());
        if self.collided
            || virtual_nodes != self.virtual_nodes
            || n != change.endpoints().len()
            || joined.len() > n / 8 + 16
            || left.len() > n / 8 + 16
        {
            return None;
        }
        // Where each previous endpoint is now (`u32::MAX`: gone).
        let mut new_of_old = vec![u32::MAX; change.previous().len()];
        for i in 0..n {
            if let Some(j) = change.previous_index(i) {
                *new_of_old.get_mut(j)? = i as u32;
            }
        }
        let mut text = Vec::with_capacity(64);
        let mut arriving: Vec<(i64, u32)> =
            Vec::with_capacity(joined.len() * virtual_nodes as usize);
        for i in joined {
            java_base(&members.endpoints[i], &mut text);
            let base = text.len();
            point_hashes(&mut text, base, virtual_nodes, |_, h| {
                arriving.push((h, i as u32));
            });
        }
        arriving.sort_unstable();
        let room = self.hashes.len() + arriving.len();
        let mut hashes: Vec<i64> = Vec::with_capacity(room);
        let mut nodes: Vec<u32> = Vec::with_capacity(room);
        // Pushes a point in ring order; `false` on a repeated hash.
        let mut push = |h: i64, node: u32| {
            if hashes.last() == Some(&h) {
                return false;
            }
            hashes.push(h);
            nodes.push(node);
            true
        };
        let mut a = arriving.iter().peekable();
        for (&h, &old) in self.hashes.iter().zip(self.nodes.iter()) {
            let node = *new_of_old.get(old as usize)?;
            if node == u32::MAX {
                continue;
            }
            while let Some(&&(ah, an)) = a.peek()
                && ah <= h
            {
                if !push(ah, an) {
                    return None;
                }
                a.next();
            }
            if !push(h, node) {
                return None;
            }
        }
        for &(ah, an) in a {
            if !push(ah, an) {
                return None;
            }
        }
        Some(JavaRing {
            hashes: hashes.into_boxed_slice(),
            nodes: nodes.into_boxed_slice(),
            virtual_nodes,
            collided: false,
        })
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

/// `points` sorted by key, equal keys in their given order: a counting sort on the top
/// bits (about one point per bucket) and one insertion-sort pass that moves a point
/// only past greater keys. Ring hashes are uniform, so this is linear, where a
/// comparison sort of 100 000 points spent as long as the 100 000 SHA-256s.
fn sort_stable(points: Vec<(u64, u32)>) -> Vec<(u64, u32)> {
    let total = points.len();
    if total < 2 {
        return points;
    }
    let bits = (usize::BITS - total.leading_zeros()).clamp(1, 24);
    let shift = 64 - bits;
    let mut starts = vec![0u32; (1usize << bits) + 1];
    for &(key, _) in &points {
        starts[(key >> shift) as usize + 1] += 1;
    }
    let mut sum = 0u32;
    for slot in starts.iter_mut() {
        sum += *slot;
        *slot = sum;
    }
    let mut sorted = vec![(0u64, 0u32); total];
    for &point in &points {
        let slot = &mut starts[(point.0 >> shift) as usize];
        sorted[*slot as usize] = point;
        *slot += 1;
    }
    for k in 1..sorted.len() {
        let v = sorted[k];
        let mut j = k;
        while j > 0 && sorted[j - 1].0 > v.0 {
            sorted[j] = sorted[j - 1];
            j -= 1;
        }
        sorted[j] = v;
    }
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Endpoint;
    use meshline_instance::Instance;

    /// The previous build: every point's text formatted, a comparison sort by (hash,
    /// put order), the last put of each hash kept.
    fn reference(members: &Members, virtual_nodes: u32) -> Vec<(i64, u32)> {
        let mut points: Vec<(i64, u32, usize)> = Vec::new();
        for (i, ep) in members.endpoints.iter().enumerate() {
            let base = ep.instance().java_inet_socket_string();
            for v in 0..virtual_nodes {
                let seq = points.len();
                points.push((java_hash(format!("{base}{v}").as_bytes()), i as u32, seq));
            }
        }
        points.sort_unstable_by_key(|&(h, _, s)| (h, s));
        let mut out: Vec<(i64, u32)> = Vec::new();
        for (k, &(h, node, _)) in points.iter().enumerate() {
            if points.get(k + 1).is_none_or(|next| next.0 != h) {
                out.push((h, node));
            }
        }
        out
    }

    #[test]
    fn the_ring_is_the_reference_ring() {
        for (n, vn) in [(1usize, 1u32), (3, 10), (40, 10), (300, 7), (2000, 10)] {
            let eps: Vec<Endpoint> = (0..n)
                .map(|i| {
                    Endpoint::new(
                        Instance::parse(&format!("10.3.{}.{}:{}", i / 200, i % 200, 8091 + i % 3))
                            .unwrap(),
                    )
                })
                .collect();
            let m = Members::new(&eps);
            let ring = JavaRing::build(&m, vn);
            let got: Vec<(i64, u32)> = ring
                .hashes
                .iter()
                .copied()
                .zip(ring.nodes.iter().copied())
                .collect();
            assert_eq!(got, reference(&m, vn), "n={n} vn={vn}");
            assert!(!ring.collided);
        }
    }

    /// Every point's hash is `java_hash` of its text, for bases of every length
    /// around the one- and two-block limits and virtual nodes past 9.
    #[test]
    fn point_hashes_are_java_hashes_of_the_point_texts() {
        for base_len in 1..70 {
            let base: Vec<u8> = (0..base_len).map(|i| b'a' + (i % 26) as u8).collect();
            let mut text = base.clone();
            let mut seen = 0;
            point_hashes(&mut text, base_len, 23, |v, h| {
                let mut want = base.clone();
                want.extend_from_slice(v.to_string().as_bytes());
                assert_eq!(h, java_hash(&want), "base {base_len} node {v}");
                assert_eq!(v, seen);
                seen += 1;
            });
            assert_eq!(seen, 23);
        }
    }

    #[test]
    fn the_base_text_is_javas() {
        let mut text = Vec::new();
        for a in [
            "10.0.0.1:1",
            "127.0.0.1:8091",
            "255.255.255.255:65535",
            "[2000::1:2345:6789:abcd]:8092",
            "[::1]:80",
            "tc-1.example.com:8091",
        ] {
            let ep = Endpoint::new(Instance::parse(a).unwrap());
            java_base(&ep, &mut text);
            assert_eq!(
                text,
                ep.instance().java_inet_socket_string().as_bytes(),
                "{a}"
            );
        }
    }

    /// Equal keys keep their order (Java's last put wins on a collision).
    #[test]
    fn the_sort_is_stable_on_equal_keys() {
        let mut rng = fastrand::Rng::with_seed(3);
        let points: Vec<(u64, u32)> = (0..5000u32)
            .map(|i| (rng.u64(..40) << 58 | rng.u64(..4), i))
            .collect();
        let mut want = points.clone();
        want.sort_by_key(|p| p.0);
        assert_eq!(sort_stable(points), want);
    }
}
