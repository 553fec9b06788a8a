//! The bank's money: one SQLite file with an `account` table, and its TCC action, each
//! phase behind the fence.
//!
//! A transfer leg moves `amount` for `account`: negative debits (the try freezes it,
//! the confirm takes it, the cancel gives it back), positive credits (the try notes it
//! as incoming, the confirm makes it balance, the cancel drops it). Money is right when
//! nothing is frozen or incoming and the balances add up.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use meshline::rpc::rm::{ResourceManager, async_trait};
use meshline::rpc::tcc::{ActionParams, BusinessActionContext, TccAction, TccError};
use meshline_tcc_fence::{Fenced, TccFence};
use sqlx::{Sqlite, SqlitePool, Transaction};

/// Faults to inject, for the example's scenarios.
#[derive(Debug, Default)]
pub struct Faults {
    /// The try's work waits this long after its branch is registered (a slow
    /// service: the transaction may be rolled back meanwhile).
    pub try_delay: Option<Duration>,
    /// This many confirms do their work and then answer an error (the answer lost):
    /// the TC sends them again.
    pub lose_confirm_answers: AtomicU32,
}

/// The account table and the action.
pub struct Ledger {
    fence: TccFence<Sqlite>,
    action: String,
    faults: Faults,
}

impl Ledger {
    /// Opens (or creates) the tables, with `seeds` accounts created if missing.
    pub async fn open(
        pool: SqlitePool,
        action: String,
        seeds: &[(String, i64)],
        faults: Faults,
    ) -> Result<Arc<Ledger>, sqlx::Error> {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS account (id TEXT PRIMARY KEY, balance BIGINT NOT NULL, \
             frozen BIGINT NOT NULL DEFAULT 0, incoming BIGINT NOT NULL DEFAULT 0)",
        )
        .execute(&pool)
        .await?;
        for (id, balance) in seeds {
            sqlx::query("INSERT OR IGNORE INTO account (id, balance) VALUES (?, ?)")
                .bind(id)
                .bind(balance)
                .execute(&pool)
                .await?;
        }
        let fence = TccFence::new(pool);
        fence.create_table().await?;
        Ok(Arc::new(Ledger {
            fence,
            action,
            faults,
        }))
    }

    /// The try of one leg in the current transaction: registers the branch, then
    /// (after the injected delay, if any) freezes or notes the amount behind the
    /// fence. Returns the branch id.
    pub async fn try_leg(
        self: &Arc<Self>,
        rm: &ResourceManager,
        account: &str,
        amount: i64,
    ) -> Result<i64, String> {
        let params = ActionParams::new()
            .param("account", account)
            .param("amount", amount);
        let me = self.clone();
        let name = account.to_string();
        let account = account.to_string();
        let r = rm
            .tcc_prepare(self.as_ref(), params, |ctx| async move {
                if let Some(d) = me.faults.try_delay {
                    tokio::time::sleep(d).await;
                }
                me.fence
                    .prepare(&ctx, move |tx| {
                        Box::pin(async move { try_sql(tx, &account, amount).await })
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<_, String>(ctx.branch_id())
            })
            .await;
        let r = match r {
            Ok(branch) => Ok(branch),
            Err(TccError::Try { error, .. }) => Err(error),
            Err(e) => Err(e.to_string()),
        };
        match &r {
            Ok(branch) => println!("try {branch} {name} ran"),
            Err(e) => println!("try {name} refused: {e}"),
        }
        r
    }
}

/// The confirm's SQL for a debit leg (the frozen amount is taken) and for a credit leg
/// (the incoming amount becomes balance).
const CONFIRM_SQL: (&str, &str) = (
    "UPDATE account SET frozen = frozen - ?1 WHERE id = ?2",
    "UPDATE account SET incoming = incoming - ?1, balance = balance + ?1 WHERE id = ?2",
);

/// The cancel's SQL for a debit leg (the frozen amount goes back to balance) and for a
/// credit leg (the incoming amount is dropped).
const CANCEL_SQL: (&str, &str) = (
    "UPDATE account SET frozen = frozen - ?1, balance = balance + ?1 WHERE id = ?2",
    "UPDATE account SET incoming = incoming - ?1 WHERE id = ?2",
);

impl Ledger {
    /// Phase two of the leg `ctx` names, behind the fence: the confirm when `commit`,
    /// else the cancel, running `debit_sql` for a debit leg and `credit_sql` for a
    /// credit one. Returns the leg's account and what the fence did.
    async fn phase_two(
        &self,
        ctx: &BusinessActionContext,
        commit: bool,
        (debit_sql, credit_sql): (&'static str, &'static str),
    ) -> Result<(String, Fenced<u64>), String> {
        let (account, amount) = leg(ctx)?;
        let sql = if amount < 0 { debit_sql } else { credit_sql };
        let a = account.clone();
        let done = if commit {
            self.fence
                .commit(ctx, move |tx| {
                    Box::pin(async move { exec(tx, sql, &a, amount.abs()).await })
                })
                .await
        } else {
            self.fence
                .rollback(ctx, move |tx| {
                    Box::pin(async move { exec(tx, sql, &a, amount.abs()).await })
                })
                .await
        };
        Ok((account, done.map_err(|e| e.to_string())?))
    }
}

async fn exec(
    tx: &mut Transaction<'static, Sqlite>,
    sql: &str,
    account: &str,
    a: i64,
) -> Result<u64, String> {
    sqlx::query(sql)
        .bind(a)
        .bind(account)
        .execute(&mut **tx)
        .await
        .map(|r| r.rows_affected())
        .map_err(|e| e.to_string())
}

async fn try_sql(
    tx: &mut Transaction<'static, Sqlite>,
    account: &str,
    amount: i64,
) -> Result<(), String> {
    let n = if amount < 0 {
        exec(
            tx,
            "UPDATE account SET balance = balance - ?1, frozen = frozen + ?1 WHERE id = ?2 AND balance >= ?1",
            account,
            -amount,
        )
        .await?
    } else {
        exec(
            tx,
            "UPDATE account SET incoming = incoming + ?1 WHERE id = ?2",
            account,
            amount,
        )
        .await?
    };
    if n == 1 {
        Ok(())
    } else {
        Err(format!("no account {account} that can move {amount}"))
    }
}

/// The account and amount the try recorded.
fn leg(ctx: &BusinessActionContext) -> Result<(String, i64), String> {
    let account = ctx.get_str("account").ok_or("no account in the context")?;
    let amount = ctx.get_i64("amount").ok_or("no amount in the context")?;
    Ok((account.to_string(), amount))
}

#[async_trait]
impl TccAction for Ledger {
    fn name(&self) -> &str {
        &self.action
    }

    fn use_fence(&self) -> bool {
        true
    }

    async fn commit(&self, ctx: &BusinessActionContext) -> Result<(), String> {
        let (account, done) = self.phase_two(ctx, true, CONFIRM_SQL).await?;
        tracing::info!(xid = ctx.xid(), branch = ctx.branch_id(), ?done, "confirm");
        println!("confirm {} {} {}", ctx.branch_id(), account, fenced(&done));
        let lose = &self.faults.lose_confirm_answers;
        if lose.load(Ordering::SeqCst) > 0 {
            lose.fetch_sub(1, Ordering::SeqCst);
            return Err("the confirm's answer is lost (injected)".into());
        }
        Ok(())
    }

    async fn rollback(&self, ctx: &BusinessActionContext) -> Result<(), String> {
        let (account, done) = self.phase_two(ctx, false, CANCEL_SQL).await?;
        println!("cancel {} {} {}", ctx.branch_id(), account, fenced(&done));
        Ok(())
    }
}

fn fenced<T>(f: &Fenced<T>) -> &'static str {
    match f {
        Fenced::Ran(_) => "ran",
        Fenced::AlreadyDone => "already-done",
        Fenced::EmptyRollback => "empty-rollback",
    }
}
