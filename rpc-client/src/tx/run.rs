//! [`Transactional`]: a block of async code run inside a global transaction, with
//! Seata's propagation, commit and rollback rules, and hooks (its
//! `TransactionalTemplate.execute`).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use super::context::{self, Current, Frame, Role};
use super::error::{Ended, TxError};
use super::hooks::{Moment, TransactionHook, trigger};
use super::propagation::Propagation;
use crate::message::GlobalStatus;
use crate::tm::{GlobalTransaction, TransactionManager};
use crate::tx_error::TransactionError;

/// A transactional block's settings: the transaction's name and timeout, the
/// propagation, the hooks. Made by [`TransactionManager::transactional`]; cheap to
/// clone, reusable for any number of runs.
///
/// ```no_run
/// # async fn f(tm: meshline_rpc_client::tm::TransactionManager) {
/// use meshline_rpc_client::tx::{self, Propagation, TxError};
///
/// let order = tm.transactional("create-order");
/// let r: Result<u64, TxError<String>> = order
///     .run(|tx| async move {
///         let xid = tx.expect("REQUIRED begins one").xid().to_string();
///         // ... call the services: they read tx::current_xid() (or the layers do) ...
///         Ok(42)
///     })
///     .await;
/// # }
/// ```
#[derive(Clone)]
pub struct Transactional {
    tm: TransactionManager,
    name: String,
    timeout: Duration,
    propagation: Propagation,
    hooks: Vec<Arc<dyn TransactionHook>>,
}

impl std::fmt::Debug for Transactional {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transactional")
            .field("name", &self.name)
            .field("timeout", &self.timeout)
            .field("propagation", &self.propagation)
            .field("hooks", &self.hooks.len())
            .finish_non_exhaustive()
    }
}

impl TransactionManager {
    /// A transactional block named `name` (the global transaction's name at the TC):
    /// `Required`, the TM's default timeout (`client.tm.defaultGlobalTransactionTimeout`),
    /// no hooks. Seata's `@GlobalTransactional(name = ...)`.
    pub fn transactional(&self, name: impl Into<String>) -> Transactional {
        Transactional {
            tm: self.clone(),
            name: name.into(),
            timeout: self.options().default_timeout,
            propagation: Propagation::Required,
            hooks: Vec::new(),
        }
    }
}

impl Transactional {
    /// What the block does about the transaction it finds ([`Propagation`]).
    pub fn propagation(mut self, propagation: Propagation) -> Self {
        self.propagation = propagation;
        self
    }

    /// The timeout of a transaction the block begins: the TC rolls it back after it,
    /// and a block that outlives it is rolled back instead of committed.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// A hook called around every transaction this block begins.
    pub fn hook(mut self, hook: impl TransactionHook) -> Self {
        self.hooks.push(Arc::new(hook));
        self
    }

    /// The transaction's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `block` as Seata's `TransactionalTemplate` runs a `@GlobalTransactional`
    /// method: by the [`Propagation`], it joins the current transaction, begins one
    /// (the block then sees it as [`tx::current()`](super::current)), or runs with
    /// none (`None` to the block).
    ///
    /// A transaction the block **began** is ended here: committed when the block
    /// returns `Ok` (rolled back instead when it outlived its timeout), rolled back
    /// when it returns `Err`, when it panics (the panic then continues) and when this
    /// future is dropped before the end (the rollback is then sent from a task of its
    /// own). A transaction the block **joined** is left to the block that began it: an
    /// `Err` goes up as [`Ended::LeftToLauncher`], and a `Required` block that fails
    /// inside another rolls the outer one back when the error reaches it.
    ///
    /// Every `Err` rolls back; [`run_with`](Self::run_with) takes a rule.
    pub async fn run<T, E, F, Fut>(&self, block: F) -> Result<T, TxError<E>>
    where
        F: FnOnce(Option<Current>) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.run_with(|_: &E| true, block).await
    }

    /// [`run`](Self::run) with a rollback rule (Seata's `rollbackFor` /
    /// `noRollbackFor`): an `Err` for which `rollback_on` is `false` commits the
    /// transaction, and is returned as [`TxError::Failed`] with
    /// [`Ended::Committed`].
    ///
    /// ```no_run
    /// # async fn f(t: meshline_rpc_client::tx::Transactional) {
    /// #[derive(Debug)]
    /// enum OrderError { OutOfStock, Db(String) }
    /// // An order refused for stock is a business answer: what was done stays done.
    /// let r = t
    ///     .run_with(|e: &OrderError| !matches!(e, OrderError::OutOfStock), |_| async {
    ///         Err::<(), _>(OrderError::OutOfStock)
    ///     })
    ///     .await;
    /// # }
    /// ```
    pub async fn run_with<T, E, R, F, Fut>(&self, rollback_on: R, block: F) -> Result<T, TxError<E>>
    where
        R: Fn(&E) -> bool,
        F: FnOnce(Option<Current>) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let current = context::current();
        let outside = |error| TxError::Failed {
            error,
            ended: Ended::NoTransaction,
        };
        let joined = |error| TxError::Failed {
            error,
            ended: Ended::LeftToLauncher,
        };
        match (self.propagation, current) {
            (Propagation::NotSupported, _) => context::without(block(None)).await.map_err(outside),
            (Propagation::RequiresNew, _) | (Propagation::Required, None) => {
                self.launch(rollback_on, block).await
            }
            (Propagation::Supports | Propagation::Never, None) => {
                block(None).await.map_err(outside)
            }
            (Propagation::Never, Some(c)) => Err(TxError::Existing {
                xid: c.xid().to_string(),
            }),
            (Propagation::Mandatory, None) => Err(TxError::NoTransaction),
            (Propagation::Required | Propagation::Supports | Propagation::Mandatory, Some(c)) => {
                tracing::debug!(xid = c.xid(), name = %self.name, "joining the current global transaction");
                block(Some(c)).await.map_err(joined)
            }
        }
    }

    /// Begins a transaction, runs the block with it current (the one current before,
    /// if any, suspended until the end) and ends it.
    async fn launch<T, E, R, F, Fut>(&self, rollback_on: R, block: F) -> Result<T, TxError<E>>
    where
        R: Fn(&E) -> bool,
        F: FnOnce(Option<Current>) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        trigger(&self.hooks, Moment::BeforeBegin, None);
        let tx = match self.tm.begin(&self.name, self.timeout).await {
            Ok(tx) => tx,
            Err(e) => {
                trigger(&self.hooks, Moment::AfterCompletion, None);
                return Err(TxError::Begin(e));
            }
        };
        let frame = Frame::new(
            tx.xid().to_string(),
            None,
            Role::Launcher,
            self.hooks.clone(),
        );
        trigger(&frame.hooks(), Moment::AfterBegin, Some(tx.xid()));
        // Armed until the transaction is ended here: dropped before that (the caller
        // gave up on this future), it rolls back.
        let guard = RollbackOnDrop {
            tx: Some(tx.clone()),
            frame: frame.clone(),
        };
        let current = Current {
            frame: frame.clone(),
        };
        let ended = context::scoped(Some(frame.clone()), async move {
            let outcome = AssertUnwindSafe(async move { block(Some(current)).await })
                .catch_unwind()
                .await;
            let ended = match outcome {
                Ok(Ok(value)) => commit(&tx, &frame).await.map(|_| value).map_err(|e| {
                    TxError::CommitFailed {
                        error: None,
                        commit: e,
                    }
                }),
                Ok(Err(error)) if rollback_on(&error) => match rollback(&tx, &frame).await {
                    Ok(status) => Err(TxError::Failed {
                        error,
                        ended: Ended::RolledBack(status),
                    }),
                    Err(e) => Err(TxError::RollbackFailed { error, rollback: e }),
                },
                Ok(Err(error)) => match commit(&tx, &frame).await {
                    Ok(status) => Err(TxError::Failed {
                        error,
                        ended: Ended::Committed(status),
                    }),
                    Err(e) => Err(TxError::CommitFailed {
                        error: Some(error),
                        commit: e,
                    }),
                },
                Err(panic) => {
                    tracing::warn!(xid = tx.xid(), "the transactional block panicked; rolling back");
                    if let Err(e) = rollback(&tx, &frame).await {
                        tracing::warn!(xid = tx.xid(), error = %e, "rollback after a panic failed; the TC rolls back at the timeout");
                    }
                    trigger(&frame.hooks(), Moment::AfterCompletion, Some(tx.xid()));
                    return Err(panic);
                }
            };
            trigger(&frame.hooks(), Moment::AfterCompletion, Some(tx.xid()));
            Ok(ended)
        })
        .await;
        // Ended here either way (a panic was rolled back above): nothing for the guard.
        guard.disarm();
        ended.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

/// The commit of a transaction this block began, with its hooks; past the timeout, a
/// rollback instead (its hooks too) and the `TransactionTimeout` error.
async fn commit(tx: &GlobalTransaction, frame: &Frame) -> Result<GlobalStatus, TransactionError> {
    if tx.past_timeout() {
        trigger(&frame.hooks(), Moment::BeforeRollback, Some(tx.xid()));
        let e = tx.rollback_timed_out().await;
        if answered(&e) {
            trigger(&frame.hooks(), Moment::AfterRollback, Some(tx.xid()));
        }
        return Err(e);
    }
    trigger(&frame.hooks(), Moment::BeforeCommit, Some(tx.xid()));
    let r = tx.commit().await;
    if r.is_ok() {
        trigger(&frame.hooks(), Moment::AfterCommit, Some(tx.xid()));
    }
    r
}

/// The rollback of a transaction this block began, with its hooks.
async fn rollback(tx: &GlobalTransaction, frame: &Frame) -> Result<GlobalStatus, TransactionError> {
    trigger(&frame.hooks(), Moment::BeforeRollback, Some(tx.xid()));
    let r = tx.rollback().await;
    if r.as_ref().err().is_none_or(answered) {
        trigger(&frame.hooks(), Moment::AfterRollback, Some(tx.xid()));
    }
    r
}

/// Whether the TC answered (a status that is not the one asked for), as opposed to a
/// refusal or no answer: Seata's `afterRollback` runs whenever the TC answered.
fn answered(e: &TransactionError) -> bool {
    matches!(e, TransactionError::Outcome { .. })
}

/// Rolls back a transaction whose block was dropped before it ended it.
struct RollbackOnDrop {
    tx: Option<GlobalTransaction>,
    frame: Arc<Frame>,
}

impl RollbackOnDrop {
    fn disarm(mut self) {
        self.tx = None;
    }
}

impl Drop for RollbackOnDrop {
    fn drop(&mut self) {
        let Some(tx) = self.tx.take() else {
            return;
        };
        let frame = self.frame.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                tracing::warn!(
                    xid = tx.xid(),
                    "a transactional block was dropped before it ended; rolling its transaction back"
                );
                runtime.spawn(async move {
                    if let Err(e) = rollback(&tx, &frame).await {
                        tracing::warn!(xid = tx.xid(), error = %e, "rollback of a dropped block failed; the TC rolls back at the timeout");
                    }
                    trigger(&frame.hooks(), Moment::AfterCompletion, Some(tx.xid()));
                });
            }
            Err(_) => tracing::warn!(
                xid = tx.xid(),
                "a transactional block was dropped outside a runtime; the TC rolls its transaction back at the timeout"
            ),
        }
    }
}
