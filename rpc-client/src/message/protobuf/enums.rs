//! The enums of Seata's protos, which are numbered on their own: mapped to meshline's
//! (v1's numbering) by Java's constant name, as Seata's convertors map them
//! (`XxxProto.valueOf(code.name())`).
//!
//! Some v1 constants have no proto value: the exception codes `BeginFailed`,
//! `NotRaftLeader`, `LockKeyConflictFailFast`, `TransactionTimeout`, `CommitHeuristic`
//! and `Broken`; the branch statuses `PhaseTwo_*_XAER_NOTA_Retryable`; the global
//! statuses `CommitRetryTimeout` and `RollbackRetryTimeout`; the branch type `XA`.
//! Seata's Java convertor throws on them; here encoding one is a [`ProtoError`] that
//! names it. The proto's `FailedLockGlobalTranscation` (sic) is v1's
//! `FailedLockGlobalTransaction`, which Java's `valueOf` misses: mapped here.

use super::ProtoError;
use crate::message::codes::{BranchStatus, BranchType, GlobalStatus, TransactionExceptionCode};

/// `TransactionExceptionCodeProto` by number (0-17), as v1 names them.
const EXCEPTION: [&str; 18] = [
    "Unknown",
    "LockKeyConflict",
    "IO",
    "BranchRollbackFailed_Retriable",
    "BranchRollbackFailed_Unretriable",
    "BranchRegisterFailed",
    "BranchReportFailed",
    "LockableCheckFailed",
    "BranchTransactionNotExist",
    "GlobalTransactionNotExist",
    "GlobalTransactionNotActive",
    "GlobalTransactionStatusInvalid",
    "FailedToSendBranchCommitRequest",
    "FailedToSendBranchRollbackRequest",
    "FailedToAddBranch",
    "FailedLockGlobalTransaction",
    "FailedWriteSession",
    "FailedStore",
];

/// `BranchStatusProto`'s numbers (its `BUnknown` is v1's `Unknown`): v1's, less the
/// two XA statuses.
const BRANCH_STATUS: [i32; 12] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 13];

/// The proto number of `code`.
pub(crate) fn exception_to(code: TransactionExceptionCode) -> Result<i32, ProtoError> {
    EXCEPTION
        .iter()
        .position(|n| *n == code.java_name())
        .map(|p| p as i32)
        .ok_or_else(|| ProtoError::NoProtoValue {
            what: "TransactionExceptionCode",
            name: code.java_name(),
        })
}

/// The exception code of proto number `n`.
pub(crate) fn exception_from(n: i32) -> Result<TransactionExceptionCode, ProtoError> {
    let name = usize::try_from(n).ok().and_then(|i| EXCEPTION.get(i));
    name.and_then(|name| {
        TransactionExceptionCode::ALL
            .iter()
            .copied()
            .find(|c| c.java_name() == *name)
    })
    .ok_or(ProtoError::UnknownNumber {
        what: "TransactionExceptionCodeProto",
        number: n,
    })
}

/// The proto number of a branch status.
pub(crate) fn branch_status_to(s: BranchStatus) -> Result<i32, ProtoError> {
    let n = i32::from(s.code());
    if BRANCH_STATUS.contains(&n) {
        Ok(n)
    } else {
        Err(ProtoError::NoProtoValue {
            what: "BranchStatus",
            name: s.java_name(),
        })
    }
}

/// The branch status of proto number `n`.
pub(crate) fn branch_status_from(n: i32) -> Result<BranchStatus, ProtoError> {
    BRANCH_STATUS
        .contains(&n)
        .then(|| BranchStatus::from_code(n as u8))
        .flatten()
        .ok_or(ProtoError::UnknownNumber {
            what: "BranchStatusProto",
            number: n,
        })
}

/// The proto number of a global status (v1's numbers up to `Finished`).
pub(crate) fn global_status_to(s: GlobalStatus) -> Result<i32, ProtoError> {
    let n = i32::from(s.code());
    if n <= GlobalStatus::Finished.code().into() {
        Ok(n)
    } else {
        Err(ProtoError::NoProtoValue {
            what: "GlobalStatus",
            name: s.java_name(),
        })
    }
}

/// The global status of proto number `n`.
pub(crate) fn global_status_from(n: i32) -> Result<GlobalStatus, ProtoError> {
    u8::try_from(n)
        .ok()
        .filter(|n| *n <= GlobalStatus::Finished.code())
        .and_then(GlobalStatus::from_code)
        .ok_or(ProtoError::UnknownNumber {
            what: "GlobalStatusProto",
            number: n,
        })
}

/// The proto number of a branch type (AT, TCC, SAGA: v1's numbers).
pub(crate) fn branch_type_to(t: BranchType) -> Result<i32, ProtoError> {
    match t {
        BranchType::AT | BranchType::TCC | BranchType::SAGA => Ok(i32::from(t.code())),
        BranchType::XA => Err(ProtoError::NoProtoValue {
            what: "BranchType",
            name: t.java_name(),
        }),
    }
}

/// The branch type of proto number `n`.
pub(crate) fn branch_type_from(n: i32) -> Result<BranchType, ProtoError> {
    match n {
        0 => Ok(BranchType::AT),
        1 => Ok(BranchType::TCC),
        2 => Ok(BranchType::SAGA),
        _ => Err(ProtoError::UnknownNumber {
            what: "BranchTypeProto",
            number: n,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exception_codes_map_by_name_and_the_v1_only_ones_are_refused() {
        assert_eq!(exception_to(TransactionExceptionCode::Unknown), Ok(0));
        assert_eq!(
            exception_to(TransactionExceptionCode::LockKeyConflict),
            Ok(1)
        );
        assert_eq!(exception_to(TransactionExceptionCode::FailedStore), Ok(17));
        assert_eq!(
            exception_to(TransactionExceptionCode::FailedLockGlobalTransaction),
            Ok(15)
        );
        for code in TransactionExceptionCode::ALL {
            match exception_to(*code) {
                Ok(n) => assert_eq!(exception_from(n), Ok(*code)),
                Err(e) => assert!(
                    matches!(e, ProtoError::NoProtoValue { name, .. } if name == code.java_name())
                ),
            }
        }
        let refused: Vec<_> = TransactionExceptionCode::ALL
            .iter()
            .filter(|c| exception_to(**c).is_err())
            .map(|c| c.java_name())
            .collect();
        assert_eq!(
            refused,
            [
                "BeginFailed",
                "NotRaftLeader",
                "LockKeyConflictFailFast",
                "TransactionTimeout",
                "CommitHeuristic",
                "Broken"
            ]
        );
        for n in [18, -1] {
            assert_eq!(
                exception_from(n),
                Err(ProtoError::UnknownNumber {
                    what: "TransactionExceptionCodeProto",
                    number: n
                })
            );
        }
    }

    /// Each of `all` that `to` numbers reads back from its number through `from`; one
    /// `to` refuses is refused by its Java name as a `what`, and is one `proto_lacks`.
    fn numbers_read_back<T: Copy + PartialEq + std::fmt::Debug + std::fmt::Display>(
        all: &[T],
        to: fn(T) -> Result<i32, ProtoError>,
        from: fn(i32) -> Result<T, ProtoError>,
        what: &'static str,
        java_name: fn(T) -> &'static str,
        proto_lacks: fn(&str) -> bool,
    ) {
        for s in all {
            match to(*s) {
                Ok(n) => assert_eq!(from(n), Ok(*s)),
                Err(e) => {
                    assert!(proto_lacks(java_name(*s)), "{s}");
                    assert_eq!(
                        e,
                        ProtoError::NoProtoValue {
                            what,
                            name: java_name(*s)
                        }
                    );
                }
            }
        }
    }

    #[test]
    fn statuses_and_types_keep_their_numbers_where_the_proto_has_them() {
        numbers_read_back(
            BranchStatus::ALL,
            branch_status_to,
            branch_status_from,
            "BranchStatus",
            BranchStatus::java_name,
            |name| name.contains("XAER_NOTA"),
        );
        assert_eq!(
            branch_status_from(11),
            Err(ProtoError::UnknownNumber {
                what: "BranchStatusProto",
                number: 11
            })
        );
        numbers_read_back(
            GlobalStatus::ALL,
            global_status_to,
            global_status_from,
            "GlobalStatus",
            GlobalStatus::java_name,
            |name| name.ends_with("RetryTimeout"),
        );
        assert_eq!(
            global_status_from(16),
            Err(ProtoError::UnknownNumber {
                what: "GlobalStatusProto",
                number: 16
            })
        );
        assert_eq!(branch_type_to(BranchType::TCC), Ok(1));
        assert_eq!(
            branch_type_to(BranchType::XA),
            Err(ProtoError::NoProtoValue {
                what: "BranchType",
                name: "XA"
            })
        );
        assert_eq!(
            branch_type_from(3),
            Err(ProtoError::UnknownNumber {
                what: "BranchTypeProto",
                number: 3
            })
        );
    }
}
