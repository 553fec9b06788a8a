//! The RM's phase-one messages: BranchRegister (11/12) and BranchReport (13/14),
//! `docs/seata-messages.md` §6.6, §6.7.

use super::MessageError;
use super::codes::{BranchStatus, BranchType};
use super::result::TransactionResult;
use super::wire::{Reader, Writer};

/// `BranchRegisterRequest` (11): an RM joins a global transaction with a branch. The TC
/// assigns the branch id. Also the layout of `GlobalLockQueryRequest` (21).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BranchRegisterRequest {
    /// The global transaction.
    pub xid: String,
    /// AT, TCC, SAGA or XA.
    pub branch_type: BranchType,
    /// The resource (a JDBC URL, a TCC bean).
    pub resource_id: String,
    /// Rows the branch locks: `table:pk1,pk2;table2:pk` (AT).
    pub lock_key: Option<String>,
    /// Free-form data for phase two.
    pub application_data: Option<String>,
}

/// `BranchRegisterResponse` (12).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BranchRegisterResponse {
    /// Success, or why not (`LockKeyConflict`, `GlobalTransactionNotExist`...).
    pub result: TransactionResult,
    /// The new branch's id (0 when it failed).
    pub branch_id: i64,
}

/// `BranchReportRequest` (13): an RM reports its branch's phase-one outcome. Note the
/// branch type comes last, after the application data, as Java writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchReportRequest {
    /// The global transaction.
    pub xid: String,
    /// The branch.
    pub branch_id: i64,
    /// Its status (`PhaseOne_Done`, `PhaseOne_Failed`...).
    pub status: BranchStatus,
    /// The resource.
    pub resource_id: Option<String>,
    /// Free-form data.
    pub application_data: Option<String>,
    /// AT, TCC, SAGA or XA.
    pub branch_type: BranchType,
}

/// `BranchReportResponse` (14): only the result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BranchReportResponse {
    /// Success, or why not.
    pub result: TransactionResult,
}

impl BranchRegisterRequest {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        w.str16("xid", Some(&self.xid))?;
        w.enumeration(self.branch_type);
        w.str16("resourceId", Some(&self.resource_id))?;
        w.str32("lockKey", self.lock_key.as_deref())?;
        w.str32("applicationData", self.application_data.as_deref())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        Ok(BranchRegisterRequest {
            xid: r.str16_or_empty("xid")?,
            branch_type: r.enumeration("branchType")?,
            resource_id: r.str16_or_empty("resourceId")?,
            lock_key: r.str32("lockKey")?,
            application_data: r.str32("applicationData")?,
        })
    }
}

impl BranchRegisterResponse {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        self.result.encode(w)?;
        w.i64(self.branch_id);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        Ok(BranchRegisterResponse {
            result: TransactionResult::decode(r)?,
            branch_id: r.i64("branchId")?,
        })
    }
}

impl BranchReportRequest {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        w.str16("xid", Some(&self.xid))?;
        w.i64(self.branch_id);
        w.enumeration(self.status);
        w.str16("resourceId", self.resource_id.as_deref())?;
        w.str32("applicationData", self.application_data.as_deref())?;
        w.enumeration(self.branch_type);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        Ok(BranchReportRequest {
            xid: r.str16_or_empty("xid")?,
            branch_id: r.i64("branchId")?,
            status: r.enumeration("status")?,
            resource_id: r.str16("resourceId")?,
            application_data: r.str32("applicationData")?,
            branch_type: r.enumeration("branchType")?,
        })
    }
}

impl BranchReportResponse {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        self.result.encode(w)
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        Ok(BranchReportResponse {
            result: TransactionResult::decode(r)?,
        })
    }
}
