//! The KV table's data: the keys, each with its indexes, and the table's own index.

use std::collections::BTreeMap;

/// One stored key.
#[derive(Debug, Clone)]
pub(crate) struct KvEntry {
    pub(super) value: Vec<u8>,
    pub(super) flags: u64,
    pub(super) create_index: u64,
    pub(super) modify_index: u64,
}

/// The keys and the KV table's index.
#[derive(Debug, Default)]
pub(crate) struct KvStore {
    pub(super) entries: BTreeMap<String, KvEntry>,
    /// The index of the last write to the table (deletes included).
    pub(super) table_index: u64,
}

impl KvStore {
    /// The index a read of `key` answers with.
    pub(super) fn index_of(&self, key: &str) -> u64 {
        match self.entries.get(key) {
            Some(e) => e.modify_index,
            None => self.table_index.max(1),
        }
    }
}
