//! A fence row's status (Seata's `CommonFenceConstant`).

/// Where a branch stands in the fence log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FenceStatus {
    /// The try ran (its row and its work committed together).
    Tried = 1,
    /// The confirm ran.
    Committed = 2,
    /// The cancel ran after a try.
    Rollbacked = 3,
    /// A cancel came before any try (an empty rollback): recorded so that a try
    /// arriving later is refused (anti-suspension).
    Suspended = 4,
}

impl FenceStatus {
    /// The number stored in the `status` column.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The status stored as `code`, if it is one.
    pub fn from_code(code: i64) -> Option<Self> {
        Some(match code {
            1 => FenceStatus::Tried,
            2 => FenceStatus::Committed,
            3 => FenceStatus::Rollbacked,
            4 => FenceStatus::Suspended,
            _ => return None,
        })
    }
}
