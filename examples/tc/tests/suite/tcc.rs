//! TCC end to end against the in-memory TC: a try registers its branch with Seata's
//! BusinessActionContext, and the TC's phase two reaches the action's confirm (on
//! commit) or cancel (on rollback) with the try's parameters back; a try outside a
//! transaction, and one whose branch the TC refuses, never run.

use crate::tx_world;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use meshline::rpc::message::{BranchType, TransactionExceptionCode};
use meshline::rpc::rm::{ResourceManager, async_trait};
use meshline::rpc::tcc::{ActionParams, BusinessActionContext, TccAction, TccActions, TccError};
use meshline::rpc::tm::TransactionManager;
use meshline::rpc::{TransactionError, tx};
use tokio::sync::Notify;
use tx_world::*;

/// An action that records its confirms and cancels (`commit xid branch amount`).
#[derive(Clone, Default)]
struct Debit {
    seen: Arc<Mutex<Vec<String>>>,
    changed: Arc<Notify>,
}

impl Debit {
    fn record(&self, what: &str, ctx: &BusinessActionContext) {
        self.seen.lock().unwrap().push(format!(
            "{what} {} {} {}",
            ctx.xid(),
            ctx.branch_id(),
            ctx.get_i64("amount").unwrap_or(-1)
        ));
        self.changed.notify_waiters();
    }

    async fn wait(&self, n: usize) -> Vec<String> {
        let limit = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let notified = self.changed.notified();
            let seen = self.seen.lock().unwrap().clone();
            if seen.len() >= n {
                return seen;
            }
            if tokio::time::timeout_at(limit, notified).await.is_err() {
                panic!("{n} phase-two calls wanted, saw {seen:?}");
            }
        }
    }
}

#[async_trait]
impl TccAction for Debit {
    fn name(&self) -> &str {
        "debit"
    }

    async fn commit(&self, ctx: &BusinessActionContext) -> Result<(), String> {
        assert_eq!(ctx.get_str("actionName"), Some("debit"));
        assert_eq!(ctx.get_str("sys::commit"), Some("commit"));
        self.record("commit", ctx);
        Ok(())
    }

    async fn rollback(&self, ctx: &BusinessActionContext) -> Result<(), String> {
        self.record("rollback", ctx);
        Ok(())
    }
}

async fn setup() -> (Vec<Tc>, TransactionManager, ResourceManager, Debit) {
    let (hub, tcs) = world(1).await;
    let tm = tm(&hub, 1).await;
    let debit = Debit::default();
    let actions = TccActions::new().with(debit.clone());
    let rm = ResourceManager::builder()
        .watch(hub.subscribe("c"), "c")
        .transaction_service_group(GROUP)
        .application_id("account")
        .resource("debit")
        .handler(actions)
        .load_balance_name("XID")
        .connected(1)
        .await;
    (tcs, tm, rm, debit)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_transaction_confirms_the_try_with_its_context() {
    let (_tcs, tm, rm, debit) = setup().await;
    let (xid, branch) = tm
        .transactional("transfer")
        .run(|t| async {
            let xid = t.unwrap().xid().to_string();
            let ctx = rm
                .tcc_prepare(
                    &debit,
                    ActionParams::new().param("amount", 5),
                    |ctx| async move {
                        // The branch type is bound while the try runs.
                        assert_eq!(tx::current().unwrap().branch_type(), Some(BranchType::TCC));
                        Ok::<_, String>(ctx)
                    },
                )
                .await
                .map_err(|e| e.to_string())?;
            assert_eq!(ctx.xid(), xid);
            assert_eq!(
                tx::current().unwrap().branch_type(),
                None,
                "unbound after the try"
            );
            Ok::<_, String>((xid, ctx.branch_id()))
        })
        .await
        .unwrap();
    assert_eq!(debit.wait(1).await, [format!("commit {xid} {branch} 5")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_try_is_cancelled_with_its_context() {
    let (_tcs, tm, rm, debit) = setup().await;
    let r = tm
        .transactional("transfer")
        .run(|_| async {
            match rm
                .tcc_prepare(&debit, ActionParams::new().param("amount", 7), |_| async {
                    Err::<(), _>("insufficient funds")
                })
                .await
            {
                Err(TccError::Try { error, ctx }) => {
                    Err::<(), _>((error, ctx.xid().to_string(), ctx.branch_id()))
                }
                other => panic!("the try's own error: {other:?}"),
            }
        })
        .await;
    let (error, xid, branch) = r.unwrap_err().into_business().unwrap();
    assert_eq!(error, "insufficient funds");
    assert_eq!(debit.wait(1).await, [format!("rollback {xid} {branch} 7")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_without_a_transaction_or_a_branch_never_runs() {
    let (tcs, tm, rm, debit) = setup().await;
    let ran = Arc::new(Mutex::new(0));
    let r = rm
        .tcc_prepare(&debit, ActionParams::new(), |_| async {
            *ran.lock().unwrap() += 1;
            Ok::<_, ()>(())
        })
        .await;
    assert!(matches!(r, Err(TccError::NoTransaction)), "{r:?}");
    let global = tm.begin("t", Duration::from_secs(30)).await.unwrap();
    tcs[0].tc.fail_store(true);
    let r = tx::with_xid(global.xid(), None, async {
        rm.tcc_prepare(&debit, ActionParams::new(), |_| async {
            *ran.lock().unwrap() += 1;
            Ok::<_, ()>(())
        })
        .await
    })
    .await;
    match r {
        Err(TccError::Register(TransactionError::Refused { exception, .. })) => {
            assert_eq!(exception, TransactionExceptionCode::FailedStore)
        }
        other => panic!("the register refused: {other:?}"),
    }
    assert_eq!(*ran.lock().unwrap(), 0);
}
