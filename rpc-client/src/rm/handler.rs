//! Phase two at the RM: [`BranchHandler`], and the inbound handler that decodes the
//! TC's BranchCommit / BranchRollback / UndoLogDelete, runs it and answers.

use std::sync::Arc;

use crate::inbound::{BoxFuture, InboundHandler, InboundRequest};
use crate::message::{
    BranchCommitRequest, BranchEndResponse, BranchRollbackRequest, BranchStatus, SeataMessage,
    TransactionExceptionCode, TransactionResult, UndoLogDeleteRequest,
};
use crate::payload::Payload;

/// What an RM does in phase two. The TC calls it for each branch this RM registered,
/// possibly more than once (it retries until it gets a final status), so each method
/// must be idempotent.
///
/// `Ok(status)` is answered as is: `PhaseTwo_Committed` / `PhaseTwo_Rollbacked` when
/// done, a `..._Retryable` status to have the TC try again later, `..._Unretryable` to
/// give up on the branch. `Err(message)` is answered as a failed result with that
/// message and a retryable status.
#[async_trait::async_trait]
pub trait BranchHandler: Send + Sync + 'static {
    /// Commit the branch (AT: delete its undo log; TCC: confirm).
    async fn branch_commit(&self, request: BranchCommitRequest) -> Result<BranchStatus, String>;

    /// Roll the branch back (AT: apply its undo log; TCC: cancel).
    async fn branch_rollback(&self, request: BranchRollbackRequest)
    -> Result<BranchStatus, String>;

    /// Delete undo logs older than `save_days` (one-way from the TC; default: nothing).
    async fn undo_log_delete(&self, request: UndoLogDeleteRequest) {
        let _ = request;
    }
}

/// The RM client's inbound handler: phase two to the [`BranchHandler`].
pub(crate) struct PhaseTwo {
    pub handler: Arc<dyn BranchHandler>,
    /// Decompression cap (the client's frame limit).
    pub limit: usize,
}

impl InboundHandler for PhaseTwo {
    fn handle(&self, req: InboundRequest) -> BoxFuture<'static, Option<Payload>> {
        let handler = self.handler.clone();
        let limit = self.limit;
        Box::pin(async move {
            let peer = req.peer;
            // Decoded, the payload (a slice of the read buffer) goes before the handler
            // runs, so a slow handler does not keep the connection's buffer alive.
            let payload = req.payload;
            let decoded = payload.decode_seata_limited(limit);
            // Seata answers in the request's codec and compressor.
            let format = crate::BodyFormat::of(&payload);
            drop(payload);
            let msg = match decoded {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "the TC sent a request this RM cannot read; not answered");
                    return None;
                }
            };
            let reply = match msg {
                SeataMessage::BranchCommit(r) => {
                    let (xid, branch) = (r.xid.clone(), r.branch_id);
                    let out = handler.branch_commit(r).await;
                    SeataMessage::BranchCommitResponse(answer(
                        xid,
                        branch,
                        out,
                        BranchStatus::PhaseTwoCommitFailedRetryable,
                        TransactionExceptionCode::Unknown,
                    ))
                }
                SeataMessage::BranchRollback(r) => {
                    let (xid, branch) = (r.xid.clone(), r.branch_id);
                    let out = handler.branch_rollback(r).await;
                    SeataMessage::BranchRollbackResponse(answer(
                        xid,
                        branch,
                        out,
                        BranchStatus::PhaseTwoRollbackFailedRetryable,
                        TransactionExceptionCode::BranchRollbackFailedRetriable,
                    ))
                }
                SeataMessage::UndoLogDelete(r) => {
                    handler.undo_log_delete(r).await;
                    return None;
                }
                other => {
                    tracing::warn!(%peer, message = other.name(), "the TC sent a message an RM does not handle; not answered");
                    return None;
                }
            };
            match Payload::seata_as(&reply, format) {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::error!(error = %e, "cannot encode the phase-two answer");
                    None
                }
            }
        })
    }
}

fn answer(
    xid: String,
    branch_id: i64,
    out: Result<BranchStatus, String>,
    failed: BranchStatus,
    exception: TransactionExceptionCode,
) -> BranchEndResponse {
    let (result, branch_status) = match out {
        Ok(status) => (TransactionResult::success(), status),
        Err(message) => {
            tracing::warn!(%xid, branch = branch_id, %message, "phase two failed; the TC will retry");
            (TransactionResult::failed(exception, message), failed)
        }
    };
    BranchEndResponse {
        result,
        xid,
        branch_id,
        branch_status,
    }
}

/// A shared handler (`Arc<MyHandler>`) handles as the handler does, so the application
/// can keep a reference to it.
#[async_trait::async_trait]
impl<T: BranchHandler + ?Sized> BranchHandler for Arc<T> {
    async fn branch_commit(&self, request: BranchCommitRequest) -> Result<BranchStatus, String> {
        (**self).branch_commit(request).await
    }

    async fn branch_rollback(
        &self,
        request: BranchRollbackRequest,
    ) -> Result<BranchStatus, String> {
        (**self).branch_rollback(request).await
    }

    async fn undo_log_delete(&self, request: UndoLogDeleteRequest) {
        (**self).undo_log_delete(request).await
    }
}
