//! The iteration order of a `java.util.HashMap<String, _>`: what fixes the order of the
//! keys in the JSON Seata Java writes for a TCC branch (fastjson writes a `HashMap` in
//! its iteration order), so that meshline writes the same bytes.
//!
//! A `HashMap`'s order is a function of its keys' `String.hashCode`, its table size and
//! the order of insertion: entries are visited bucket by bucket (bucket =
//! `(h ^ (h >>> 16)) & (size - 1)`), and within a bucket in insertion order (new
//! entries go to the tail; a resize splits each bucket keeping the order). The table
//! doubles when the entry count passes three quarters of it, or when one bucket
//! reaches 9 entries while the table is under 64 (Java resizes instead of making the
//! bucket a tree). A bucket made a tree (9 colliding keys in a table of 64 or more)
//! orders differently; keys of a TCC action's context never come near that, and this
//! module keeps the list order for it.

/// Java's `String.hashCode`: over UTF-16 code units, `h = 31 * h + c`, wrapping.
pub(crate) fn string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// `HashMap.hash`: the high half folded into the low half.
fn spread(key: &str) -> u32 {
    let h = string_hash(key) as u32;
    h ^ (h >> 16)
}

/// A `HashMap<String, V>` made with `new HashMap<>(initial_capacity)`, keeping Java's
/// iteration order.
#[derive(Debug, Clone)]
pub(crate) struct JavaHashMap<V> {
    buckets: Vec<Vec<(String, V)>>,
    len: usize,
}

impl<V> JavaHashMap<V> {
    /// `new HashMap<>(initial_capacity)`: the table (allocated at the first put) is the
    /// next power of two.
    pub fn with_capacity(initial_capacity: usize) -> Self {
        let size = initial_capacity.max(1).next_power_of_two();
        JavaHashMap {
            buckets: (0..size).map(|_| Vec::new()).collect(),
            len: 0,
        }
    }

    /// Java's `threshold`: three quarters of the table, rounded down.
    fn threshold(&self) -> usize {
        self.buckets.len() * 3 / 4
    }

    fn resize(&mut self) {
        let size = self.buckets.len() * 2;
        let old = std::mem::replace(&mut self.buckets, (0..size).map(|_| Vec::new()).collect());
        // Old buckets in order, each entry in order: what Java's lo/hi split keeps.
        for (k, v) in old.into_iter().flatten() {
            let i = spread(&k) as usize & (size - 1);
            self.buckets[i].push((k, v));
        }
    }

    /// `put(key, value)`: a key already there keeps its place.
    pub fn put(&mut self, key: &str, value: V) {
        let i = spread(key) as usize & (self.buckets.len() - 1);
        if let Some(slot) = self.buckets[i].iter_mut().find(|(k, _)| k == key) {
            slot.1 = value;
            return;
        }
        self.buckets[i].push((key.to_string(), value));
        // treeifyBin on a small table: a resize instead.
        if self.buckets[i].len() >= 9 && self.buckets.len() < 64 {
            self.resize();
        }
        self.len += 1;
        if self.len > self.threshold() {
            self.resize();
        }
    }

    /// The entries in Java's iteration order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.buckets.iter().flatten().map(|(k, v)| (k.as_str(), v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_hashes_are_javas() {
        // "...".hashCode() as Java 17 computes it.
        assert_eq!(string_hash(""), 0);
        assert_eq!(string_hash("a"), 97);
        assert_eq!(string_hash("actionName"), 1_851_679_201);
        assert_eq!(string_hash("sys::commit"), 681_402_948);
        assert_eq!(string_hash("host-name"), -763_629_680);
        assert_eq!(string_hash("\u{00e9}t\u{00e9}"), 227_742);
        // A character outside the BMP counts as its two UTF-16 halves.
        assert_eq!(string_hash("\u{1F600}"), 1_772_899);
    }

    /// Key orders Java 17's `HashMap` gives for the same puts (a TCC action context
    /// with no parameters, with five, and with twenty: three resizes on the way).
    #[test]
    fn iteration_order_is_javas() {
        let keys = |m: &JavaHashMap<()>| m.iter().map(|(k, _)| k.to_string()).collect::<Vec<_>>();
        let mut small = JavaHashMap::with_capacity(8);
        for k in ["action-start-time", "sys::prepare"] {
            small.put(k, ());
        }
        let mut business = JavaHashMap::with_capacity(4);
        for k in ["sys::commit", "sys::rollback", "actionName", "useTCCFence"] {
            business.put(k, ());
        }
        for k in keys(&business) {
            small.put(&k, ());
        }
        small.put("host-name", ());
        assert_eq!(
            keys(&small),
            [
                "action-start-time",
                "useTCCFence",
                "sys::prepare",
                "sys::rollback",
                "sys::commit",
                "host-name",
                "actionName"
            ]
        );
        let mut five = JavaHashMap::with_capacity(8);
        for k in [
            "from",
            "to",
            "amount",
            "currency",
            "orderId",
            "action-start-time",
            "sys::prepare",
        ] {
            five.put(k, ());
        }
        for k in keys(&business) {
            five.put(&k, ());
        }
        five.put("host-name", ());
        assert_eq!(
            keys(&five).join(" "),
            "amount action-start-time useTCCFence sys::prepare orderId sys::rollback sys::commit \
             from currency to host-name actionName"
        );
        let mut big = JavaHashMap::with_capacity(8);
        for i in 0..20 {
            big.put(&format!("p{i}"), ());
        }
        for k in ["action-start-time", "sys::prepare"] {
            big.put(k, ());
        }
        for k in keys(&business) {
            big.put(&k, ());
        }
        big.put("host-name", ());
        let want = "p0 p1 p2 p3 p4 p5 p6 p7 p8 sys::rollback p9 p10 p12 p11 p14 p13 p16 p15 p18 p17 p19 \
                    sys::commit useTCCFence host-name action-start-time sys::prepare actionName";
        assert_eq!(keys(&big).join(" "), want);
    }
}
