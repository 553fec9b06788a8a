//! The position of each endpoint identity in a snapshot: an open-addressing table of
//! indices, filled from the hash every [`Endpoint`] carries.
//!
//! A `HashMap<InstanceKey, usize>` rebuilt on every membership change cloned and hashed
//! every identity (10 000 string allocations and hashes for a large cluster); this table
//! stores only `hash << 32 | index + 1` per slot and compares keys on a 32-bit hash
//! match, so building it is one pass of integer stores. A slot's home is taken from the
//! same 32 bits it stores, so an index can be carried over to the next membership
//! ([`KeyIndex::carry`]) from its slots alone, without reading an endpoint.

use meshline_instance::InstanceKey;

use crate::Endpoint;
use crate::endpoint::hash_key;

/// Index of each identity in one endpoint slice.
pub(crate) struct KeyIndex {
    /// `hash >> 32 << 32 | (index + 1)`; 0 is an empty slot.
    slots: Box<[u64]>,
    mask: usize,
}

impl KeyIndex {
    /// The index of `endpoints`. A repeated identity maps to its last position (as a
    /// map collected from the list would).
    pub(crate) fn build(endpoints: &[Endpoint]) -> KeyIndex {
        if endpoints.is_empty() {
            return KeyIndex {
                slots: Box::new([]),
                mask: 0,
            };
        }
        let (mut slots, mask) = KeyIndex::empty(endpoints.len());
        for (i, e) in endpoints.iter().enumerate() {
            let h = e.key_hash();
            let tag = h >> 32 << 32;
            let mut s = (h >> 32) as usize & mask;
            loop {
                let slot = slots[s];
                if slot == 0 {
                    slots[s] = tag | (i as u64 + 1);
                    break;
                }
                if slot >> 32 << 32 == tag && endpoints[(slot as u32 - 1) as usize].key() == e.key()
                {
                    slots[s] = tag | (i as u64 + 1);
                    break;
                }
                s = (s + 1) & mask;
            }
        }
        KeyIndex { slots, mask }
    }

    /// An index that finds nothing (for a snapshot no pick or lookup reads: the
    /// previous membership as a wrapped algorithm sees it, [`crate::Snapshot::unindexed`]).
    pub(crate) fn none() -> KeyIndex {
        KeyIndex {
            slots: Box::new([]),
            mask: 0,
        }
    }

    /// Zeroed slots for `n` identities: at most two-thirds full (short probe runs, a
    /// small table to fill).
    fn empty(n: usize) -> (Box<[u64]>, usize) {
        let capacity = (n + n / 2 + 1).next_power_of_two();
        (vec![0u64; capacity].into_boxed_slice(), capacity - 1)
    }

    /// The index of a membership of `len` distinct identities made from the one this
    /// index was built for: previous endpoint `j` is now at `new_of_old[j]` (or gone:
    /// `JOINED`), and `joined` (positions in `endpoints`, the new membership) are the
    /// others. Integer work over the slots, plus one insertion per joined endpoint.
    pub(crate) fn carry(
        &self,
        new_of_old: &[u32],
        endpoints: &[Endpoint],
        joined: &[u32],
    ) -> KeyIndex {
        if endpoints.is_empty() {
            return KeyIndex::build(endpoints);
        }
        let (mut slots, mask) = KeyIndex::empty(endpoints.len());
        // Identities are distinct: each entry goes to the first free slot from its home.
        let mut put = |tag: u64, i: u32| {
            let mut s = (tag >> 32) as usize & mask;
            while slots[s] != 0 {
                s = (s + 1) & mask;
            }
            slots[s] = tag | (u64::from(i) + 1);
        };
        for &slot in self.slots.iter().filter(|&&slot| slot != 0) {
            let i = new_of_old[(slot as u32 - 1) as usize];
            if i != crate::change::JOINED {
                put(slot >> 32 << 32, i);
            }
        }
        for &i in joined {
            put(endpoints[i as usize].key_hash() >> 32 << 32, i);
        }
        KeyIndex { slots, mask }
    }

    /// The position of `key` in `endpoints` (the slice this index was built from).
    pub(crate) fn get(&self, endpoints: &[Endpoint], key: &InstanceKey) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let h = hash_key(key);
        let tag = h >> 32 << 32;
        let mut s = (h >> 32) as usize & self.mask;
        loop {
            let slot = self.slots[s];
            if slot == 0 {
                return None;
            }
            let i = (slot as u32 - 1) as usize;
            if slot >> 32 << 32 == tag && endpoints[i].key() == key {
                return Some(i);
            }
            s = (s + 1) & self.mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshline_instance::Instance;

    #[test]
    fn finds_every_member_and_nothing_else() {
        for n in [0usize, 1, 2, 7, 100, 1000] {
            let eps: Vec<Endpoint> = (0..n)
                .map(|i| {
                    Endpoint::new(
                        Instance::parse(&format!("10.5.{}.{}:{}", i / 250, i % 250, 80 + i % 3))
                            .unwrap(),
                    )
                })
                .collect();
            let index = KeyIndex::build(&eps);
            for (i, e) in eps.iter().enumerate() {
                assert_eq!(index.get(&eps, e.key()), Some(i));
            }
            let absent = Instance::parse("192.168.0.1:1").unwrap();
            assert_eq!(index.get(&eps, absent.key()), None);
        }
    }

    #[test]
    fn a_carried_index_finds_every_member() {
        use crate::change::JOINED;
        let ep = |i: usize| {
            Endpoint::new(Instance::parse(&format!("10.6.{}.{}:80", i / 250, i % 250)).unwrap())
        };
        let old: Vec<Endpoint> = (0..1000).map(ep).collect();
        let index = KeyIndex::build(&old);
        // Every third leaves; 700 join, interleaved.
        let mut new = Vec::new();
        let mut new_of_old = vec![JOINED; old.len()];
        let mut joined = Vec::new();
        for (j, e) in old.iter().enumerate() {
            if j % 3 != 0 {
                new_of_old[j] = new.len() as u32;
                new.push(e.clone());
            }
            if j % 10 < 7 {
                joined.push(new.len() as u32);
                new.push(ep(1000 + j));
            }
        }
        let carried = index.carry(&new_of_old, &new, &joined);
        for (i, e) in new.iter().enumerate() {
            assert_eq!(carried.get(&new, e.key()), Some(i));
        }
        assert_eq!(carried.get(&new, old[0].key()), None);
    }

    #[test]
    fn a_repeated_identity_maps_to_its_last_position() {
        let a = Instance::parse("10.0.0.1:80").unwrap();
        let b = Instance::parse("10.0.0.2:80").unwrap();
        let eps = vec![
            Endpoint::new(a.clone()),
            Endpoint::new(b.clone()),
            Endpoint::new(a.clone().with_weight(3)),
        ];
        let index = KeyIndex::build(&eps);
        assert_eq!(index.get(&eps, a.key()), Some(2));
        assert_eq!(index.get(&eps, b.key()), Some(1));
    }
}
