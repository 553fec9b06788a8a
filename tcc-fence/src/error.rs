//! [`FenceError`]: why a fenced try, confirm or cancel did not do its work.

use crate::FenceStatus;

/// Why a fenced operation did not run its work, or failed. `E` is the work's own
/// error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError<E> {
    /// The try came after the branch's cancel (anti-suspension): its row exists
    /// (`Suspended`), so the try's work did not run. Nothing will ever confirm or
    /// cancel it; refusing it is the point.
    #[error(
        "the branch {xid}/{branch_id} was rolled back before its try arrived; the try is refused"
    )]
    Suspended {
        /// The transaction.
        xid: String,
        /// The branch.
        branch_id: i64,
    },
    /// A confirm or cancel found the branch in a status it cannot move from (a
    /// confirm after a cancel, a cancel after a confirm): the work did not run. Seata
    /// answers the TC "failed, retryable".
    #[error("the branch {xid}/{branch_id} is {status:?}; this phase two does not apply")]
    Unexpected {
        /// The transaction.
        xid: String,
        /// The branch.
        branch_id: i64,
        /// Where it stands.
        status: FenceStatus,
    },
    /// A confirm found no row: no try ever ran for this branch here.
    #[error("no fence row for the branch {xid}/{branch_id}: no try ran for it here")]
    NoTry {
        /// The transaction.
        xid: String,
        /// The branch.
        branch_id: i64,
    },
    /// The fence's own database work failed (the local transaction was rolled back).
    #[error("fence database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The work failed; the local transaction (fence row included) was rolled back.
    #[error("the fenced work failed: {0}")]
    Work(E),
    /// The row holds a status that is not one of Seata's.
    #[error("the fence row of {xid}/{branch_id} holds an unknown status {code}")]
    BadStatus {
        /// The transaction.
        xid: String,
        /// The branch.
        branch_id: i64,
        /// What it holds.
        code: i64,
    },
}
