//! Phase two, sent by the TC to the RM that owns a branch: BranchCommit (3/4) and
//! BranchRollback (5/6), `docs/seata-messages.md` §5.5, §5.6, §6.2, §6.3.

use super::MessageError;
use super::codes::{BranchStatus, BranchType};
use super::result::TransactionResult;
use super::wire::{Reader, Writer};

/// `AbstractBranchEndRequest`: commit (3) or roll back (5) one branch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BranchEndRequest {
    /// The global transaction.
    pub xid: String,
    /// The branch.
    pub branch_id: i64,
    /// AT, TCC, SAGA or XA.
    pub branch_type: BranchType,
    /// The resource the branch was registered with.
    pub resource_id: String,
    /// The application data the branch was registered with.
    pub application_data: Option<String>,
}

/// `BranchCommitRequest` (3).
pub type BranchCommitRequest = BranchEndRequest;
/// `BranchRollbackRequest` (5).
pub type BranchRollbackRequest = BranchEndRequest;

/// `AbstractBranchEndResponse`: the RM's answer to a commit (4) or rollback (6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchEndResponse {
    /// Success, or why not.
    pub result: TransactionResult,
    /// The global transaction.
    pub xid: String,
    /// The branch.
    pub branch_id: i64,
    /// The branch's status after phase two (`PhaseTwo_Committed`, `PhaseTwo_Rollbacked`,
    /// or a retryable / unretryable failure).
    pub branch_status: BranchStatus,
}

/// `BranchCommitResponse` (4).
pub type BranchCommitResponse = BranchEndResponse;
/// `BranchRollbackResponse` (6).
pub type BranchRollbackResponse = BranchEndResponse;

impl BranchEndRequest {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        w.str16("xid", Some(&self.xid))?;
        w.i64(self.branch_id);
        w.enumeration(self.branch_type);
        w.str16("resourceId", Some(&self.resource_id))?;
        w.str32("applicationData", self.application_data.as_deref())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        Ok(BranchEndRequest {
            xid: r.str16_or_empty("xid")?,
            branch_id: r.i64("branchId")?,
            branch_type: r.enumeration("branchType")?,
            resource_id: r.str16_or_empty("resourceId")?,
            application_data: r.str32("applicationData")?,
        })
    }
}

impl BranchEndResponse {
    /// The answer for `request` with `status` (success).
    pub fn for_request(request: &BranchEndRequest, branch_status: BranchStatus) -> Self {
        BranchEndResponse {
            result: TransactionResult::success(),
            xid: request.xid.clone(),
            branch_id: request.branch_id,
            branch_status,
        }
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        self.result.encode(w)?;
        w.str16("xid", Some(&self.xid))?;
        w.i64(self.branch_id);
        w.enumeration(self.branch_status);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        Ok(BranchEndResponse {
            result: TransactionResult::decode(r)?,
            xid: r.str16_or_empty("xid")?,
            branch_id: r.i64("branchId")?,
            branch_status: r.enumeration("branchStatus")?,
        })
    }
}
