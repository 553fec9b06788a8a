//! UndoLogDelete (111), sent one-way by the TC to RMs: delete AT undo logs older than
//! `saveDays`. No response type exists (`docs/seata-messages.md` §6.11).

use super::MessageError;
use super::codes::BranchType;
use super::wire::{Reader, Writer};

/// `UndoLogDeleteRequest` (111).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndoLogDeleteRequest {
    /// The branch type (AT).
    pub branch_type: BranchType,
    /// The resource whose undo log to clean.
    pub resource_id: String,
    /// Keep this many days (Java's default: 7).
    pub save_days: i16,
}

impl Default for UndoLogDeleteRequest {
    fn default() -> Self {
        UndoLogDeleteRequest {
            branch_type: BranchType::AT,
            resource_id: String::new(),
            save_days: 7,
        }
    }
}

impl UndoLogDeleteRequest {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) -> Result<(), MessageError> {
        w.enumeration(self.branch_type);
        w.str16("resourceId", Some(&self.resource_id))?;
        w.i16(self.save_days);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, MessageError> {
        Ok(UndoLogDeleteRequest {
            branch_type: r.enumeration("branchType")?,
            resource_id: r.str16_or_empty("resourceId")?,
            save_days: r.i16("saveDays")?,
        })
    }
}
