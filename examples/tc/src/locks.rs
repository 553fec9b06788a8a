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

/// The rows a lock key names on `resource`, read as Seata's
/// `AbstractLockManager.collectRowLocks` reads them: groups split at `;`, the table
/// before the group's first `:`, primary keys split at `,`; names are kept as written
/// (`t: 1` and `t:1` are different rows, as in Seata), blank keys skipped, and the
/// reading stops at a group without `:` or without keys.
pub fn rows(resource: &str, lock_key: &str) -> Vec<RowKey> {
    let mut out = Vec::new();
    for group in lock_key.split(';') {
        let Some((table, pks)) = group.split_once(':') else {
            break;
        };
        if pks.trim().is_empty() {
            break;
        }
        for pk in pks.split(',').filter(|p| !p.trim().is_empty()) {
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
    /// and the row is returned with the transaction that holds it.
    pub fn acquire(&self, tx: i64, rows: &[RowKey]) -> Result<Vec<RowKey>, (RowKey, i64)> {
        let mut taken: Vec<RowKey> = Vec::with_capacity(rows.len());
        for r in rows {
            // The entry guard holds its shard's lock: decide under it, clean up after
            // it is dropped (a row taken earlier may live in the same shard).
            let holder = match self.held.entry(r.clone()) {
                Entry::Vacant(v) => {
                    v.insert(tx);
                    taken.push(r.clone());
                    None
                }
                Entry::Occupied(o) => (*o.get() != tx).then(|| *o.get()),
            };
            if let Some(holder) = holder {
                for t in &taken {
                    self.held.remove_if(t, |_, h| *h == tx);
                }
                return Err((r.clone(), holder));
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
        // As written: Seata trims nothing.
        assert_eq!(rows("db", "t: 1"), vec!["db^^^t^^^ 1"]);
        assert_eq!(rows("db", " t:1"), vec!["db^^^ t^^^1"]);
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
            Err((Arc::from("db^^^t^^^1"), 1))
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

    /// The clean-up after a conflict runs once the conflicting row's entry has dropped
    /// its shard's lock: run under it, a row taken earlier in the same shard would
    /// deadlock the TC (hashing decides the shards, so only some runs would show it).
    /// With 200 rows taken before the conflict, some share its shard every time.
    #[test]
    fn a_conflict_after_many_rows_cleans_up_without_deadlocking() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let l = LockTable::default();
            l.acquire(1, &rows("db", "t:conflict")).unwrap();
            let mut keys: Vec<String> = (0..200).map(|i| i.to_string()).collect();
            keys.push("conflict".into());
            let key = format!("t:{}", keys.join(","));
            let r = l.acquire(2, &rows("db", &key));
            let _ = tx.send((r.is_err(), l.len()));
        });
        let (refused, held) = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("acquire deadlocked");
        assert!(refused);
        assert_eq!(held, 1, "only the first transaction's row stays locked");
    }
}
