//! The TM's messages: GlobalBegin (1/2), GlobalCommit (7/8), GlobalRollback (9/10),
//! GlobalStatus (15/16) and GlobalReport (17/18), `docs/seata-messages.md` §5.3, §5.4,
//! §6.1, §6.4, §6.5, §6.8, §6.9.

use super::MessageError;
use super::codes::GlobalStatus;
use super::result::TransactionResult;
use super::wire::{Reader, Writer};

/// `GlobalBeginRequest` (1): start a global transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalBeginRequest {
    /// Timeout in milliseconds (Java's default: 60000).
    pub timeout_ms: i32,
    /// `transactionName`; also the routing key Java's balancers use for a begin.
    pub transaction_name: Option<String>,
}

impl Default for GlobalBeginRequest {
    fn default() -> Self {
        GlobalBeginRequest {
            timeout_ms: 60_000,
            transaction_name: None,
        }
    }
}

/// `GlobalBeginResponse` (2): the XID of the new transaction.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GlobalBeginResponse {
    /// Success, or why not.
    pub result: TransactionResult,
    /// The new XID (`ip:port:transactionId`).
    pub xid: Option<String>,
    /// `extraData`.
    pub extra_data: Option<String>,
}

/// `AbstractGlobalEndRequest`: the XID a commit (7), rollback (9) or status query (15)
/// is about.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GlobalEndRequest {
    /// The XID.
    pub xid: String,
    /// `extraData`.
    pub extra_data: Option<String>,
}

/// `GlobalCommitRequest` (7).
pub type GlobalCommitRequest = GlobalEndRequest;
/// `GlobalRollbackRequest` (9).
pub type GlobalRollbackRequest = GlobalEndRequest;
/// `GlobalStatusRequest` (15).
pub type GlobalStatusRequest = GlobalEndRequest;

/// `GlobalReportRequest` (17): the TM tells the TC a status (Saga).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GlobalReportRequest {
    /// The XID.
    pub xid: String,
    /// `extraData`.
    pub extra_data: Option<String>,
    /// The reported status; `None` is written as `0xff`, as Java writes null.
    pub global_status: Option<GlobalStatus>,
}

/// `AbstractGlobalEndResponse`: the answer to a commit (8), rollback (10), status
/// query (16) or report (18).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalEndResponse {
    /// Success, or why not.
    pub result: TransactionResult,
    /// The transaction's status (always present, also on failure).
    pub global_status: GlobalStatus,
}

/// `GlobalCommitResponse` (8).
pub type GlobalCommitResponse = GlobalEndResponse;
/// `GlobalRollbackResponse` (10).
pub type GlobalRollbackResponse = GlobalEndResponse;
/// `GlobalStatusResponse` (16).
pub type GlobalStatusResponse = GlobalEndResponse;
/// `GlobalReportResponse` (18).
pub type GlobalReportResponse = GlobalEndResponse;

impl GlobalEndResponse {
    /// A successful answer with `status`.
    pub fn success(global_status: GlobalStatus) -> Self {
        GlobalEndResponse {
            result: TransactionResult::success(),
            global_status,
        }
    }
}

impl GlobalBeginRequest {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        w.i32(self.timeout_ms);
        w.str16("transactionName", self.transaction_name.as_deref())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        Ok(GlobalBeginRequest {
            timeout_ms: r.i32("timeout")?,
            transaction_name: r.str16("transactionName")?,
        })
    }
}

impl GlobalBeginResponse {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        self.result.encode(w)?;
        w.str16("xid", self.xid.as_deref())?;
        w.str16("extraData", self.extra_data.as_deref())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        Ok(GlobalBeginResponse {
            result: TransactionResult::decode(r)?,
            xid: r.str16("xid")?,
            extra_data: r.str16("extraData")?,
        })
    }
}

impl GlobalEndRequest {
    /// A request about `xid`, no extra data.
    pub fn new(xid: impl Into<String>) -> Self {
        GlobalEndRequest {
            xid: xid.into(),
            extra_data: None,
        }
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        w.str16("xid", Some(&self.xid))?;
        w.str16("extraData", self.extra_data.as_deref())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        Ok(GlobalEndRequest {
            xid: r.str16_or_empty("xid")?,
            extra_data: r.str16("extraData")?,
        })
    }
}

impl GlobalReportRequest {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        w.str16("xid", Some(&self.xid))?;
        w.str16("extraData", self.extra_data.as_deref())?;
        match self.global_status {
            Some(s) => w.enumeration(s),
            None => w.u8(0xff),
        }
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        let xid = r.str16_or_empty("xid")?;
        let extra_data = r.str16("extraData")?;
        // Java: a negative byte (0x80..=0xff) is null; anything else must be a status.
        let code = r.u8("globalStatus")?;
        let global_status = if code >= 0x80 {
            None
        } else {
            Some(
                GlobalStatus::from_code(code).ok_or(MessageError::UnknownCode {
                    type_code: r.type_code,
                    field: "globalStatus",
                    code,
                })?,
            )
        };
        Ok(GlobalReportRequest {
            xid,
            extra_data,
            global_status,
        })
    }
}

impl GlobalEndResponse {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        self.result.encode(w)?;
        w.enumeration(self.global_status);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        Ok(GlobalEndResponse {
            result: TransactionResult::decode(r)?,
            global_status: r.enumeration("globalStatus")?,
        })
    }
}
