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
            let msg = match req.payload.decode_seata_limited(limit) {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "the TC sent a request this RM cannot read; not answered");
                    return None;
                }
            };
            // Seata answers with the request's compressor.
            let compressor = req.payload.compressor().unwrap_or_default();
            let reply = match msg {
                SeataMessage::BranchCommit(r) => {
                    let out = handler.branch_commit(r.clone()).await;
                    SeataMessage::BranchCommitResponse(answer(
                        &r,
                        out,
                        BranchStatus::PhaseTwoCommitFailedRetryable,
                        TransactionExceptionCode::Unknown,
                    ))
                }
                SeataMessage::BranchRollback(r) => {
                    let out = handler.branch_rollback(r.clone()).await;
                    SeataMessage::BranchRollbackResponse(answer(
                        &r,
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
            match Payload::seata_compressed(&reply, compressor) {
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
    req: &BranchCommitRequest,
    out: Result<BranchStatus, String>,
    failed: BranchStatus,
    exception: TransactionExceptionCode,
) -> BranchEndResponse {
    match out {
        Ok(status) => BranchEndResponse::for_request(req, status),
        Err(message) => {
            tracing::warn!(xid = %req.xid, branch = req.branch_id, %message, "phase two failed; the TC will retry");
            BranchEndResponse {
                result: TransactionResult::failed(exception, message),
                xid: req.xid.clone(),
                branch_id: req.branch_id,
                branch_status: failed,
            }
        }
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
