//! The enums Seata writes as one byte, with Java's numeric codes
//! (`docs/seata-messages.md` §9): [`ResultCode`], [`TransactionExceptionCode`],
//! [`GlobalStatus`], [`BranchStatus`] and [`BranchType`].
//!
//! Each prints as Java's constant name (`PhaseTwo_Committed`), so what meshline logs
//! matches what a Seata TC logs. [`TransactionExceptionCode`] uses Seata 2.x's numbering
//! (2.0.0 inserted `NotRaftLeader` at 19; a 1.x peer means something else by 19 to 22).

use super::wire::WireEnum;

macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $code:literal => $java:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant = $code, )*
        }

        impl $name {
            /// Every constant, in code order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The byte on the wire (Java's ordinal / `getCode()`).
            pub fn code(self) -> u8 {
                self as u8
            }

            /// The constant for a wire byte; `None` for a byte Java does not define.
            pub fn from_code(code: u8) -> Option<Self> {
                match code {
                    $( $code => Some($name::$variant), )*
                    _ => None,
                }
            }

            /// Java's constant name (`PhaseTwo_Committed`).
            pub fn java_name(self) -> &'static str {
                match self {
                    $( $name::$variant => $java, )*
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.java_name())
            }
        }

        impl WireEnum for $name {
            fn code(self) -> u8 {
                $name::code(self)
            }
            fn from_code(code: u8) -> Option<Self> {
                $name::from_code(code)
            }
        }
    };
}

wire_enum! {
    /// Whether a request succeeded (`ResultCode`, written as its ordinal).
    pub enum ResultCode {
        /// The TC (or RM) could not do it; the response carries a message.
        Failed = 0 => "Failed",
        /// Done.
        Success = 1 => "Success",
    }
}

wire_enum! {
    /// Why a transaction request failed (`TransactionExceptionCode`, Seata 2.x ordinals).
    pub enum TransactionExceptionCode {
        /// No specific reason (also what a successful response carries).
        Unknown = 0 => "Unknown",
        /// GlobalBegin failed.
        BeginFailed = 1 => "BeginFailed",
        /// Another global transaction holds one of the lock keys.
        LockKeyConflict = 2 => "LockKeyConflict",
        /// I/O error (Java's client uses it for an RPC timeout).
        Io = 3 => "IO",
        /// A branch rollback failed and may be retried.
        BranchRollbackFailedRetriable = 4 => "BranchRollbackFailed_Retriable",
        /// A branch rollback failed for good.
        BranchRollbackFailedUnretriable = 5 => "BranchRollbackFailed_Unretriable",
        /// Branch registration failed.
        BranchRegisterFailed = 6 => "BranchRegisterFailed",
        /// Branch report failed.
        BranchReportFailed = 7 => "BranchReportFailed",
        /// The lock query could not be answered.
        LockableCheckFailed = 8 => "LockableCheckFailed",
        /// No such branch.
        BranchTransactionNotExist = 9 => "BranchTransactionNotExist",
        /// No such global transaction (unknown XID, or already finished).
        GlobalTransactionNotExist = 10 => "GlobalTransactionNotExist",
        /// The global transaction no longer takes branches (commit or rollback began).
        GlobalTransactionNotActive = 11 => "GlobalTransactionNotActive",
        /// The global transaction is in a status that does not allow the request.
        GlobalTransactionStatusInvalid = 12 => "GlobalTransactionStatusInvalid",
        /// The TC could not send a branch commit to the RM.
        FailedToSendBranchCommitRequest = 13 => "FailedToSendBranchCommitRequest",
        /// The TC could not send a branch rollback to the RM.
        FailedToSendBranchRollbackRequest = 14 => "FailedToSendBranchRollbackRequest",
        /// The branch could not be added to the session.
        FailedToAddBranch = 15 => "FailedToAddBranch",
        /// The global session lock could not be taken (spelt `FailedLockGlobalTranscation` up to 2.2.0).
        FailedLockGlobalTransaction = 16 => "FailedLockGlobalTransaction",
        /// The session could not be written to the store.
        FailedWriteSession = 17 => "FailedWriteSession",
        /// The store failed.
        FailedStore = 18 => "FailedStore",
        /// A raft follower got a request only the leader takes (since 2.0.0).
        NotRaftLeader = 19 => "NotRaftLeader",
        /// A lock is held by a transaction that is rolling back: fail now, do not wait.
        LockKeyConflictFailFast = 20 => "LockKeyConflictFailFast",
        /// The global transaction timed out.
        TransactionTimeout = 21 => "TransactionTimeout",
        /// The outcome is heuristic (e.g. commit answered `Finished`: may have been rolled back).
        CommitHeuristic = 22 => "CommitHeuristic",
        /// The transaction is broken.
        Broken = 23 => "Broken",
    }
}

wire_enum! {
    /// The status of a global transaction (`GlobalStatus`, written as `getCode()`).
    pub enum GlobalStatus {
        /// Unknown.
        Unknown = 0 => "UnKnown",
        /// Begun; takes branches.
        Begin = 1 => "Begin",
        /// Phase two commit under way.
        Committing = 2 => "Committing",
        /// Commit failed for some branch; the TC retries.
        CommitRetrying = 3 => "CommitRetrying",
        /// Phase two rollback under way.
        Rollbacking = 4 => "Rollbacking",
        /// Rollback failed for some branch; the TC retries.
        RollbackRetrying = 5 => "RollbackRetrying",
        /// Timed out; rolling back.
        TimeoutRollbacking = 6 => "TimeoutRollbacking",
        /// Timed out; rollback is being retried.
        TimeoutRollbackRetrying = 7 => "TimeoutRollbackRetrying",
        /// Committed from the TM's point of view; branches commit in the background.
        AsyncCommitting = 8 => "AsyncCommitting",
        /// Committed.
        Committed = 9 => "Committed",
        /// Commit failed for good.
        CommitFailed = 10 => "CommitFailed",
        /// Rolled back.
        Rollbacked = 11 => "Rollbacked",
        /// Rollback failed for good.
        RollbackFailed = 12 => "RollbackFailed",
        /// Timed out and rolled back.
        TimeoutRollbacked = 13 => "TimeoutRollbacked",
        /// Timed out; rollback failed for good.
        TimeoutRollbackFailed = 14 => "TimeoutRollbackFailed",
        /// Finished (the TC no longer knows it: what it answers for an unknown XID).
        Finished = 15 => "Finished",
        /// Commit retries ran past `server.maxCommitRetryTimeout` (since 1.5.0).
        CommitRetryTimeout = 16 => "CommitRetryTimeout",
        /// Rollback retries ran past `server.maxRollbackRetryTimeout` (since 1.5.0).
        RollbackRetryTimeout = 17 => "RollbackRetryTimeout",
    }
}

wire_enum! {
    /// The status of a branch (`BranchStatus`, written as `getCode()`).
    pub enum BranchStatus {
        /// Unknown.
        Unknown = 0 => "Unknown",
        /// Registered with the TC.
        Registered = 1 => "Registered",
        /// Phase one done (local commit).
        PhaseOneDone = 2 => "PhaseOne_Done",
        /// Phase one failed.
        PhaseOneFailed = 3 => "PhaseOne_Failed",
        /// Phase one timed out.
        PhaseOneTimeout = 4 => "PhaseOne_Timeout",
        /// Phase two committed.
        PhaseTwoCommitted = 5 => "PhaseTwo_Committed",
        /// Phase two commit failed; the TC retries.
        PhaseTwoCommitFailedRetryable = 6 => "PhaseTwo_CommitFailed_Retryable",
        /// Phase two commit failed for good.
        PhaseTwoCommitFailedUnretryable = 7 => "PhaseTwo_CommitFailed_Unretryable",
        /// Phase two rolled back.
        PhaseTwoRollbacked = 8 => "PhaseTwo_Rollbacked",
        /// Phase two rollback failed; the TC retries.
        PhaseTwoRollbackFailedRetryable = 9 => "PhaseTwo_RollbackFailed_Retryable",
        /// Phase two rollback failed for good.
        PhaseTwoRollbackFailedUnretryable = 10 => "PhaseTwo_RollbackFailed_Unretryable",
        /// XA: commit failed with XAER_NOTA; retryable (since 1.5.0).
        PhaseTwoCommitFailedXaerNotaRetryable = 11 => "PhaseTwo_CommitFailed_XAER_NOTA_Retryable",
        /// XA: rollback failed with XAER_NOTA; retryable (since 1.5.0).
        PhaseTwoRollbackFailedXaerNotaRetryable = 12 => "PhaseTwo_RollbackFailed_XAER_NOTA_Retryable",
        /// Read-only branch: nothing to do in phase two (since 2.2.0).
        PhaseOneRdonly = 13 => "PhaseOne_RDONLY",
    }
}

wire_enum! {
    /// The kind of a branch (`BranchType`, written as its ordinal).
    pub enum BranchType {
        /// Automatic transaction (undo log).
        AT = 0 => "AT",
        /// Try-confirm-cancel.
        TCC = 1 => "TCC",
        /// Saga.
        SAGA = 2 => "SAGA",
        /// XA (since 1.2.0).
        XA = 3 => "XA",
    }
}

impl Default for BranchType {
    /// AT, Java's default for every message that carries a branch type.
    fn default() -> Self {
        BranchType::AT
    }
}

impl GlobalStatus {
    /// True for a status the TC never leaves: the transaction is over.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            GlobalStatus::Committed
                | GlobalStatus::CommitFailed
                | GlobalStatus::Rollbacked
                | GlobalStatus::RollbackFailed
                | GlobalStatus::TimeoutRollbacked
                | GlobalStatus::TimeoutRollbackFailed
                | GlobalStatus::Finished
                | GlobalStatus::CommitRetryTimeout
                | GlobalStatus::RollbackRetryTimeout
        )
    }
}

impl BranchStatus {
    /// True when a phase-two commit or rollback should be tried again later.
    pub fn is_retryable_failure(self) -> bool {
        matches!(
            self,
            BranchStatus::PhaseTwoCommitFailedRetryable
                | BranchStatus::PhaseTwoRollbackFailedRetryable
                | BranchStatus::PhaseTwoCommitFailedXaerNotaRetryable
                | BranchStatus::PhaseTwoRollbackFailedXaerNotaRetryable
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The codes of docs/seata-messages.md §9, by Java name: a renumbering breaks this.
    #[test]
    fn codes_are_javas() {
        let exc: Vec<(u8, &str)> = TransactionExceptionCode::ALL
            .iter()
            .map(|c| (c.code(), c.java_name()))
            .collect();
        assert_eq!(exc.len(), 24);
        assert_eq!(exc[2], (2, "LockKeyConflict"));
        assert_eq!(exc[10], (10, "GlobalTransactionNotExist"));
        assert_eq!(exc[19], (19, "NotRaftLeader"));
        assert_eq!(exc[23], (23, "Broken"));
        assert_eq!(GlobalStatus::Committed.code(), 9);
        assert_eq!(GlobalStatus::Finished.code(), 15);
        assert_eq!(GlobalStatus::RollbackRetryTimeout.code(), 17);
        assert_eq!(GlobalStatus::Unknown.to_string(), "UnKnown");
        assert_eq!(BranchStatus::PhaseTwoCommitted.code(), 5);
        assert_eq!(BranchStatus::PhaseTwoRollbacked.code(), 8);
        assert_eq!(BranchStatus::PhaseOneRdonly.code(), 13);
        assert_eq!(BranchType::XA.code(), 3);
        assert_eq!(ResultCode::Success.code(), 1);
        // Every code is its position (Java writes ordinals or codes equal to them).
        for (i, s) in GlobalStatus::ALL.iter().enumerate() {
            assert_eq!(s.code() as usize, i);
            assert_eq!(GlobalStatus::from_code(i as u8), Some(*s));
        }
        for (i, s) in BranchStatus::ALL.iter().enumerate() {
            assert_eq!(s.code() as usize, i);
        }
        for (i, s) in TransactionExceptionCode::ALL.iter().enumerate() {
            assert_eq!(s.code() as usize, i);
        }
        assert_eq!(GlobalStatus::from_code(18), None);
        assert_eq!(BranchStatus::from_code(14), None);
        assert_eq!(BranchType::from_code(4), None);
        assert_eq!(TransactionExceptionCode::from_code(24), None);
        assert_eq!(ResultCode::from_code(2), None);
    }
}
