//! [`TxError`]: why a transactional block did not end in a committed transaction, and
//! what became of the transaction.

use crate::message::GlobalStatus;
use crate::tx_error::TransactionError;

/// What was done with the transaction after the block returned an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The block began it and rolled it back; the TC answered this status
    /// (`Rollbacked`, `Rollbacking`, `Finished`...).
    RolledBack(GlobalStatus),
    /// The block began it and its rollback rule said this error does not roll back:
    /// committed with this status (Seata's `noRollbackFor`).
    Committed(GlobalStatus),
    /// The block joined a transaction begun elsewhere: the error goes up to whoever
    /// began it, which decides (as Seata's participants do).
    LeftToLauncher,
    /// The block ran with no transaction.
    NoTransaction,
}

/// Why a [`Transactional`](super::Transactional) block did not end in a committed
/// transaction. `E` is the block's own error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TxError<E> {
    /// The block returned `Err`; `ended` says what became of the transaction.
    #[error("the transactional block failed ({ended:?}): {error}")]
    Failed {
        /// The block's error.
        error: E,
        /// What was done with the transaction.
        ended: Ended,
    },
    /// The block returned `Err` and the rollback it called for failed: the TC decides
    /// the transaction's fate (it rolls back on timeout; a rollback that got no answer
    /// may still have happened).
    #[error("the transactional block failed ({error}) and its rollback failed: {rollback}")]
    RollbackFailed {
        /// The block's error.
        error: E,
        /// Why the rollback failed.
        rollback: TransactionError,
    },
    /// The block succeeded (or failed with an error its rule commits on: `error`), and
    /// the commit failed: the TC refused, the transaction had timed out (rolled back,
    /// `TransactionTimeout`), was found gone (`CommitHeuristic`), or no answer came.
    /// The block's value is dropped.
    #[error("commit failed: {commit}")]
    CommitFailed {
        /// The block's error, when its rollback rule chose to commit despite it.
        error: Option<E>,
        /// Why the commit failed.
        commit: TransactionError,
    },
    /// GlobalBegin failed: the block did not run.
    #[error("begin failed: {0}")]
    Begin(TransactionError),
    /// `Never`: a transaction is current. The block did not run.
    #[error("a transaction ({xid}) is current and the block's propagation is NEVER")]
    Existing {
        /// The current transaction.
        xid: String,
    },
    /// `Mandatory`: no transaction is current. The block did not run.
    #[error("no transaction is current and the block's propagation is MANDATORY")]
    NoTransaction,
}

impl<E> TxError<E> {
    /// The block's own error, if it returned one.
    pub fn business(&self) -> Option<&E> {
        match self {
            TxError::Failed { error, .. } | TxError::RollbackFailed { error, .. } => Some(error),
            TxError::CommitFailed { error, .. } => error.as_ref(),
            _ => None,
        }
    }

    /// The block's own error, if it returned one, by value.
    pub fn into_business(self) -> Option<E> {
        match self {
            TxError::Failed { error, .. } | TxError::RollbackFailed { error, .. } => Some(error),
            TxError::CommitFailed { error, .. } => error,
            _ => None,
        }
    }
}
