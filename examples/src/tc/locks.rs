//! Global row locks, as Seata's in-memory locker keeps them.
//!
//! An AT branch registers the rows it changed as `table:pk1,pk2;table2:pk` (its lock
//! key). Each row of a resource is held by at most one global transaction; a branch of
//! the same transaction may take a row its transaction already holds (re-entrant), and
//! a row held by another transaction makes the registration fail with
//! `LockKeyConflict`, leaving nothing of that branch locked. Parsing follows Seata's
//! `collectRowLocks`: it stops at a group without `:`, and skips blank keys.

use std::sync::Arc;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;

/// One locked row: resource, table, primary key. Shared between the table and the
/// branch that holds it (one allocation per row).
pub type RowKey = Arc<str>;

fn row(resource: &str, table: &str, pk: &str) -> RowKey {
    Arc::from(format!("{resource}^^^{table}^^^{pk}"))
}

/// The rows a lock key names on `resource`.
pub fn rows(resource: &str, lock_key: &str) -> Vec<RowKey> {
    let mut out = Vec::new();
    for group in lock_key.split(';') {
        let Some((table, pks)) = group.split_once(':') else {
            break;
        };
        let table = table.trim();
        if table.is_empty() || pks.trim().is_empty() {
            break;
        }
        for pk in pks.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            out.push(row(resource, table, pk));
        }
    }
    out
}

/// Which transaction (by transaction id) holds each row.
#[derive(Debug, Default)]
pub struct LockTable {
    held: DashMap<RowKey, i64, foldhash::fast::RandomState>,
}

impl LockTable {
    /// Locks `rows` for transaction `tx`. On a conflict nothing this call took is kept,
    /// and the row is returned.
    pub fn acquire(&self, tx: i64, rows: &[RowKey]) -> Result<Vec<RowKey>, RowKey> {
        let mut taken: Vec<RowKey> = Vec::with_capacity(rows.len());
        for r in rows {
            match self.held.entry(r.clone()) {
                Entry::Vacant(v) => {
                    v.insert(tx);
                    taken.push(r.clone());
                }
                Entry::Occupied(o) if *o.get() == tx => {}
                Entry::Occupied(_) => {
                    for t in &taken {
                        self.held.remove_if(t, |_, h| *h == tx);
                    }
                    return Err(r.clone());
                }
            }
        }
        Ok(taken)
    }

    /// True when no transaction but `tx` holds any of `rows`.
    pub fn lockable(&self, tx: i64, rows: &[RowKey]) -> bool {
        rows.iter()
            .all(|r| self.held.get(r).is_none_or(|h| *h == tx))
    }

    /// Releases `rows` held by `tx`.
    pub fn release(&self, tx: i64, rows: &[RowKey]) {
        for r in rows {
            self.held.remove_if(r, |_, h| *h == tx);
        }
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_keys_parse_as_seata_does() {
        let rows = |r: &str, k: &str| {
            super::rows(r, k)
                .iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            rows("db", "t:1,2;u:9"),
            vec!["db^^^t^^^1", "db^^^t^^^2", "db^^^u^^^9"]
        );
        assert_eq!(rows("db", "t:1, ,2"), vec!["db^^^t^^^1", "db^^^t^^^2"]);
        assert_eq!(
            rows("db", "t:1;bad;u:2"),
            vec!["db^^^t^^^1"],
            "stops at a group without `:`"
        );
        assert!(rows("db", "").is_empty());
    }

    #[test]
    fn conflicts_keep_nothing_and_same_transaction_reenters() {
        let l = LockTable::default();
        assert_eq!(l.acquire(1, &rows("db", "t:1,2")).unwrap().len(), 2);
        assert_eq!(
            l.acquire(1, &rows("db", "t:2,3")).unwrap(),
            rows("db", "t:3")
        );
        assert_eq!(
            l.acquire(2, &rows("db", "t:4,1")),
            Err(Arc::from("db^^^t^^^1"))
        );
        assert!(l.lockable(2, &rows("db", "t:5")));
        assert!(
            !l.lockable(2, &rows("db", "t:4,1")),
            "t:4 was given back, t:1 is held"
        );
        assert_eq!(l.len(), 3);
        l.release(1, &rows("db", "t:1,2,3"));
        assert_eq!(l.len(), 0);
    }
}
