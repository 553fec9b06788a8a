//! The position of each endpoint identity in a snapshot: an open-addressing table of
//! indices, filled from the hash every [`Endpoint`] carries.
//!
//! A `HashMap<InstanceKey, usize>` rebuilt on every membership change cloned and hashed
//! every identity (10 000 string allocations and hashes for a large cluster); this table
//! stores only `hash << 32 | index + 1` per slot and compares keys on a 32-bit hash
//! match, so building it is one pass of integer stores.

use meshline_registry_core::InstanceKey;

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
        // At most two-thirds full: short probe runs, a small table to fill.
        let capacity = (endpoints.len() + endpoints.len() / 2 + 1).next_power_of_two();
        let mask = capacity - 1;
        let mut slots = vec![0u64; capacity].into_boxed_slice();
        for (i, e) in endpoints.iter().enumerate() {
            let h = e.key_hash();
            let tag = h >> 32 << 32;
            let mut s = h as usize & mask;
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

    /// The position of `key` in `endpoints` (the slice this index was built from).
    pub(crate) fn get(&self, endpoints: &[Endpoint], key: &InstanceKey) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let h = hash_key(key);
        let tag = h >> 32 << 32;
        let mut s = h as usize & self.mask;
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
    use meshline_registry_core::Instance;

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
