//! The RM's lock query: GlobalLockQuery (21/22), `docs/seata-messages.md` §6.10.
//!
//! The request is a `BranchRegisterRequest` under another type code (Java's class
//! extends it and adds nothing).

use super::MessageError;
use super::branch::BranchRegisterRequest;
use super::result::TransactionResult;
use super::wire::{Reader, Writer};

/// `GlobalLockQueryRequest` (21): would these lock keys be free for `xid`?
pub type GlobalLockQueryRequest = BranchRegisterRequest;

/// `GlobalLockQueryResponse` (22).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GlobalLockQueryResponse {
    /// Success, or why not.
    pub result: TransactionResult,
    /// True when no other global transaction holds any of the keys (an `i16` on the
    /// wire, `1` or `0`).
    pub lockable: bool,
}

impl GlobalLockQueryResponse {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        self.result.encode(w)?;
        w.i16(i16::from(self.lockable));
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        Ok(GlobalLockQueryResponse {
            result: TransactionResult::decode(r)?,
            lockable: r.i16("lockable")? == 1,
        })
    }
}
