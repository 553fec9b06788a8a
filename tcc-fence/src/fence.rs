//! [`TccFence`]: Seata's `TCCFenceHandler` rules over one table, each phase's fence row
//! and the work in one local transaction.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use meshline_rpc_client::tcc::BusinessActionContext;
use sqlx::{Pool, Transaction};

use crate::store::{FenceDb, Statements};
use crate::{FenceError, FenceStatus};

/// A phase's work: given the local transaction (which also holds the fence row), a
/// boxed future of its result. The shape of sqlx's own `Connection::transaction`: the
/// future borrows the transaction and is `Send`, so a fenced phase can run in a
/// spawned task or an `async_trait` method.
pub type Work<'t, T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 't>>;

/// Seata's default table (`DEFAULT_COMMON_FENCE_LOG_TABLE_NAME`).
pub const DEFAULT_TABLE: &str = "tcc_fence_log";

/// Seata's default `FenceLogCleanPeriod`: one day.
pub const DEFAULT_CLEAN_PERIOD: Duration = Duration::from_secs(24 * 3600);

/// What a fenced confirm or cancel did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fenced<T> {
    /// The work ran (and committed with the row): its value.
    Ran(T),
    /// The branch was already where this phase two takes it (a confirm or cancel the
    /// TC sent again): the work did not run again.
    AlreadyDone,
    /// A cancel with no try before it (an empty rollback): nothing to undo, the work
    /// did not run, and the row recorded `Suspended` so a late try is refused.
    EmptyRollback,
}

/// A table name that cannot be one (the name is written into the SQL).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a table name (letters, digits and `_`, optionally `schema.`, at most 64 each)"
)]
pub struct InvalidTable(pub String);

/// Seata's TCC fence over one `tcc_fence_log` table on a sqlx pool: give each phase of
/// a TCC action its work as an async closure over the local transaction, and the
/// fence decides whether it runs, its row changing in the same transaction:
///
/// | phase | fence row before | the work | row after |
/// |---|---|---|---|
/// | try ([`prepare`](Self::prepare)) | none | runs | `Tried` |
/// | try | any (a cancel came first) | refused: [`FenceError::Suspended`] | unchanged |
/// | confirm ([`commit`](Self::commit)) | `Tried` | runs | `Committed` |
/// | confirm | `Committed` | not again: [`Fenced::AlreadyDone`] | unchanged |
/// | confirm | `Rollbacked` / `Suspended` | refused: [`FenceError::Unexpected`] | unchanged |
/// | confirm | none | refused: [`FenceError::NoTry`] | none |
/// | cancel ([`rollback`](Self::rollback)) | `Tried` | runs | `Rollbacked` |
/// | cancel | `Rollbacked` / `Suspended` | not again: [`Fenced::AlreadyDone`] | unchanged |
/// | cancel | none (empty rollback) | not run: [`Fenced::EmptyRollback`] | `Suspended` |
/// | cancel | `Committed` | refused: [`FenceError::Unexpected`] | unchanged |
///
/// When the work fails, its local transaction rolls back with the row change, and
/// the TC's retry finds the branch as it was. Two phase twos of one branch at once
/// (a retry overtaking a slow first attempt) meet on the row: the conditional update
/// lets one through.
pub struct TccFence<DB: FenceDb> {
    pool: Pool<DB>,
    table: String,
    sql: Arc<Statements>,
}

impl<DB: FenceDb> Clone for TccFence<DB> {
    fn clone(&self) -> Self {
        TccFence {
            pool: self.pool.clone(),
            table: self.table.clone(),
            sql: self.sql.clone(),
        }
    }
}

impl<DB: FenceDb> std::fmt::Debug for TccFence<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TccFence")
            .field("table", &self.table)
            .finish()
    }
}

fn valid_table(name: &str) -> bool {
    let part = |p: &str| {
        (1..=64).contains(&p.len())
            && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !p.as_bytes()[0].is_ascii_digit()
    };
    match name.split_once('.') {
        Some((schema, table)) => part(schema) && part(table),
        None => part(name),
    }
}

impl<DB: FenceDb> TccFence<DB> {
    /// The fence on `pool`'s [`DEFAULT_TABLE`].
    pub fn new(pool: Pool<DB>) -> Self {
        TccFence::with_table(pool, DEFAULT_TABLE).expect("the default table name is valid")
    }

    /// The fence on `table` (Seata's `logTableName`).
    pub fn with_table(pool: Pool<DB>, table: &str) -> Result<Self, InvalidTable> {
        if !valid_table(table) {
            return Err(InvalidTable(table.to_string()));
        }
        Ok(TccFence {
            pool,
            table: table.to_string(),
            sql: Arc::new(DB::statements(table)),
        })
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// Creates the table (and its indexes) if missing: Seata's DDL for the database.
    pub async fn create_table(&self) -> Result<(), sqlx::Error> {
        for statement in &self.sql.create {
            DB::execute(&self.pool, statement, None).await?;
        }
        Ok(())
    }

    /// The try: records the branch `Tried` and runs `work`, in one local transaction;
    /// refused ([`FenceError::Suspended`]) when the branch's cancel came first.
    pub async fn prepare<T, E>(
        &self,
        ctx: &BusinessActionContext,
        work: impl for<'t> FnOnce(&'t mut Transaction<'static, DB>) -> Work<'t, T, E>,
    ) -> Result<T, FenceError<E>> {
        let (xid, branch) = (ctx.xid(), ctx.branch_id());
        let mut tx = self.pool.begin().await?;
        let inserted = DB::insert(
            &mut tx,
            &self.sql.insert,
            xid,
            branch,
            ctx.action_name(),
            FenceStatus::Tried.code(),
        )
        .await;
        match inserted {
            Ok(_) => {}
            Err(e) if unique_violation(&e) => {
                tracing::warn!(%xid, branch, "a try after its branch's rollback: refused (anti-suspension)");
                return Err(FenceError::Suspended {
                    xid: xid.to_string(),
                    branch_id: branch,
                });
            }
            Err(e) => return Err(e.into()),
        }
        let value = work(&mut tx).await.map_err(FenceError::Work)?;
        tx.commit().await?;
        Ok(value)
    }

    /// The confirm: moves the branch `Tried` → `Committed` and runs `work`, in one
    /// local transaction (see the table above for every other case).
    pub async fn commit<T, E>(
        &self,
        ctx: &BusinessActionContext,
        work: impl for<'t> FnOnce(&'t mut Transaction<'static, DB>) -> Work<'t, T, E>,
    ) -> Result<Fenced<T>, FenceError<E>> {
        self.phase_two(ctx, FenceStatus::Committed, work).await
    }

    /// The cancel: moves the branch `Tried` → `Rollbacked` and runs `work`; with no
    /// try, records `Suspended` and runs nothing (see the table above).
    pub async fn rollback<T, E>(
        &self,
        ctx: &BusinessActionContext,
        work: impl for<'t> FnOnce(&'t mut Transaction<'static, DB>) -> Work<'t, T, E>,
    ) -> Result<Fenced<T>, FenceError<E>> {
        self.phase_two(ctx, FenceStatus::Rollbacked, work).await
    }

    async fn phase_two<T, E>(
        &self,
        ctx: &BusinessActionContext,
        to: FenceStatus,
        work: impl for<'t> FnOnce(&'t mut Transaction<'static, DB>) -> Work<'t, T, E>,
    ) -> Result<Fenced<T>, FenceError<E>> {
        let (xid, branch) = (ctx.xid(), ctx.branch_id());
        let mut tx = self.pool.begin().await?;
        // The update first: it takes the row (or the database's write lock) before
        // anything is read, so two attempts of one phase two cannot both pass.
        let moved = DB::update(
            &mut tx,
            &self.sql.update,
            to.code(),
            xid,
            branch,
            FenceStatus::Tried.code(),
        )
        .await?;
        if moved == 1 {
            let value = work(&mut tx).await.map_err(FenceError::Work)?;
            tx.commit().await?;
            return Ok(Fenced::Ran(value));
        }
        let status = match DB::status(&mut tx, &self.sql.status, xid, branch).await? {
            None => None,
            Some(code) => Some(FenceStatus::from_code(code).ok_or(FenceError::BadStatus {
                xid: xid.to_string(),
                branch_id: branch,
                code,
            })?),
        };
        let unexpected = |status| FenceError::Unexpected {
            xid: xid.to_string(),
            branch_id: branch,
            status,
        };
        use FenceStatus::*;
        match (to, status) {
            (Committed, Some(Committed)) | (Rollbacked, Some(Rollbacked | Suspended)) => {
                tracing::debug!(%xid, branch, ?to, "phase two again: already done, not run again");
                Ok(Fenced::AlreadyDone)
            }
            (Rollbacked, None) => {
                DB::insert(
                    &mut tx,
                    &self.sql.insert,
                    xid,
                    branch,
                    ctx.action_name(),
                    Suspended.code(),
                )
                .await?;
                tx.commit().await?;
                tracing::info!(%xid, branch, "empty rollback: no try ran; recorded so a late one is refused");
                Ok(Fenced::EmptyRollback)
            }
            (_, None) => Err(FenceError::NoTry {
                xid: xid.to_string(),
                branch_id: branch,
            }),
            (_, Some(s)) => {
                tracing::warn!(%xid, branch, status = ?s, ?to, "phase two does not apply to the branch's status");
                Err(unexpected(s))
            }
        }
    }

    /// The branch's row status, if it has one.
    pub async fn status(
        &self,
        xid: &str,
        branch_id: i64,
    ) -> Result<Option<FenceStatus>, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let code = DB::status(&mut tx, &self.sql.status, xid, branch_id).await?;
        tx.commit().await?;
        Ok(code.and_then(FenceStatus::from_code))
    }

    /// Deletes the rows of ended branches (`Committed`, `Rollbacked`, `Suspended`) not
    /// touched for `older_than`, as Seata's clean task does; returns how many. A
    /// `Suspended` row older than that no longer refuses a late try: Seata's trade-off,
    /// the TC having long given up on the transaction.
    pub async fn clean(&self, older_than: Duration) -> Result<u64, sqlx::Error> {
        let seconds = older_than.as_secs().min(i64::MAX as u64) as i64;
        DB::execute(&self.pool, &self.sql.clean, Some(seconds)).await
    }

    /// Runs [`clean`](Self::clean) every `period` for rows older than `period`
    /// (Seata's `FenceLogCleanPeriod`, one day by default: [`DEFAULT_CLEAN_PERIOD`]),
    /// until the returned task is aborted. A failed clean is logged and tried again at
    /// the next period.
    pub fn spawn_cleaner(&self, period: Duration) -> tokio::task::JoinHandle<()>
    where
        DB: 'static,
    {
        let fence = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period.max(Duration::from_secs(1)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                match fence.clean(period).await {
                    Ok(n) => {
                        tracing::debug!(table = %fence.table, deleted = n, "fence log cleaned")
                    }
                    Err(e) => {
                        tracing::warn!(table = %fence.table, error = %e, "fence log clean failed; next period")
                    }
                }
            }
        })
    }
}

fn unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.kind() == sqlx::error::ErrorKind::UniqueViolation)
}

#[cfg(test)]
mod tests {
    #[test]
    fn table_names_are_identifiers() {
        for ok in ["tcc_fence_log", "public.tcc_fence_log", "T1", "a_b"] {
            assert!(super::valid_table(ok), "{ok}");
        }
        for bad in [
            "",
            "1t",
            "t;drop table x",
            "a.b.c",
            "t-1",
            "`t`",
            &"x".repeat(65),
        ] {
            assert!(!super::valid_table(bad), "{bad}");
        }
    }
}
