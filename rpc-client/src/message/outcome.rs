//! Which Seata answers say the TC cannot work, and which only refuse the caller's
//! request: the table behind [`Classifier::seata`](crate::Classifier::seata).
//!
//! A transaction response starts with its result (`AbstractTransactionResponse`):
//! `Success`, or `Failed` with a `TransactionExceptionCode`. Seata's TC answers
//! `Failed` in two kinds of case, and a balancer must tell them apart: one means the TC
//! is healthy and the caller must deal with the refusal; the other means this TC cannot
//! serve anyone now, and the next request should go elsewhere.
//!
//! | exception code | outcome | why |
//! |---|---|---|
//! | `FailedStore` | server | the TC's session store failed (`AbstractTCInboundHandler` wraps every `StoreException` in it) |
//! | `FailedWriteSession` | server | the session could not be written (`AbstractSessionManager`, raft's `RaftTaskUtil`) |
//! | `FailedLockGlobalTransaction` | server | the TC could not take its own session lock in time (`GlobalSession.lock`): it is stalled |
//! | `NotRaftLeader` | misdirected | a raft follower: only the leader serves and the follower applied nothing; the request is sent again to the leader the registry names next |
//! | `BeginFailed` | server | a begin the TC could not carry out; nothing of the caller's can cause it |
//! | `IO` | server | the TC's own I/O failed (Seata's clients use the code for their RPC timeouts, which never reach the wire) |
//! | `Unknown`, on a GlobalBegin | server | a `RuntimeException` inside begin (`onException` leaves the code `Unknown`): the TC's own failure, since a begin carries nothing the caller can get wrong |
//! | `Unknown`, on anything else | caller | the same code comes with decided outcomes (a commit whose RM is gone is answered `Failed`, `Unknown`, `CommitRetrying`: committed) and with refused bad input |
//! | `LockKeyConflict`, `LockKeyConflictFailFast` | caller | another transaction holds the rows |
//! | `GlobalTransactionNotExist`, `GlobalTransactionNotActive`, `GlobalTransactionStatusInvalid`, `BranchTransactionNotExist`, `TransactionTimeout` | caller | about this transaction, not the TC |
//! | `FailedToAddBranch` | caller | also what an over-long `applicationData` gets (`AbstractCore.branchRegister`): one caller's bad input must not eject a healthy TC (a TC whose store failed fails begins too) |
//! | `FailedToSendBranchCommitRequest`, `FailedToSendBranchRollbackRequest` | caller | the RM is unreachable, not the TC |
//! | `BranchRollbackFailed_*`, `BranchRegisterFailed`, `BranchReportFailed`, `LockableCheckFailed`, `CommitHeuristic`, `Broken` | caller | about a branch or this transaction (the middle three are RM-side codes that a TC does not send) |
//!
//! Answers in Seata's protobuf codec are read by the same table. Any other answer (a
//! registration, a merged result, an undecodable body, another codec) is a success:
//! the caller reads it and reports what is wrong with it.
//!
//! The probe ([`Classify::probe`]) is a GlobalStatus of an XID
//! no TC made: Seata reads its store for it (`SessionHolder.findGlobalSession`), so a
//! TC whose store failed answers `FailedStore`, and a healthy one `Finished`.

use super::codes::{ResultCode, TransactionExceptionCode};
use super::type_code::*;
use super::wire::Reader;
use super::{GlobalEndRequest, SeataMessage};
use crate::codec::{CODEC_PROTOBUF, CODEC_SEATA, COMPRESSOR_NONE, DEFAULT_MAX_FRAME_LEN};
use crate::outcome::{Classify, Outcome};
use crate::payload::Payload;

/// The XID the probe asks about: well formed (`ip:port:id`), and made by no TC (port 0).
pub const PROBE_XID: &str = "0.0.0.0:0:0";

/// What an answer of type `response_type` that failed with `exception` says about the
/// TC (the table in this module's docs).
pub fn failed_outcome(response_type: i16, exception: TransactionExceptionCode) -> Outcome {
    use TransactionExceptionCode::*;
    match exception {
        NotRaftLeader => Outcome::Misdirected,
        FailedStore | FailedWriteSession | FailedLockGlobalTransaction | BeginFailed | Io => {
            Outcome::ServerFailure
        }
        Unknown if response_type == GLOBAL_BEGIN_RESULT => Outcome::ServerFailure,
        Unknown
        | LockKeyConflict
        | LockKeyConflictFailFast
        | GlobalTransactionNotExist
        | GlobalTransactionNotActive
        | GlobalTransactionStatusInvalid
        | BranchTransactionNotExist
        | TransactionTimeout
        | FailedToAddBranch
        | FailedToSendBranchCommitRequest
        | FailedToSendBranchRollbackRequest
        | BranchRollbackFailedRetriable
        | BranchRollbackFailedUnretriable
        | BranchRegisterFailed
        | BranchReportFailed
        | LockableCheckFailed
        | CommitHeuristic
        | Broken => Outcome::CallerFailure,
    }
}

/// The outcome a Seata-codec body reports (uncompressed), reading only its head.
pub fn body_outcome(body: &[u8]) -> Outcome {
    let mut r = Reader::new(body, 0);
    let Ok(code) = r.i16("typeCode") else {
        return Outcome::Success;
    };
    if !matches!(
        code,
        GLOBAL_BEGIN_RESULT
            | GLOBAL_COMMIT_RESULT
            | GLOBAL_ROLLBACK_RESULT
            | GLOBAL_STATUS_RESULT
            | GLOBAL_REPORT_RESULT
            | BRANCH_REGISTER_RESULT
            | BRANCH_STATUS_REPORT_RESULT
            | GLOBAL_LOCK_QUERY_RESULT
            | BRANCH_COMMIT_RESULT
            | BRANCH_ROLLBACK_RESULT
    ) {
        return Outcome::Success;
    }
    r.type_code = code;
    match r.enumeration::<ResultCode>("resultCode") {
        Ok(ResultCode::Failed) => {}
        _ => return Outcome::Success,
    }
    // The message: skipped, not decoded (no allocation).
    let Ok(len) = r.i16("msg") else {
        return Outcome::Success;
    };
    let len = usize::try_from(len).unwrap_or(0);
    if r.buf.len() < len {
        return Outcome::Success;
    }
    r.buf = &r.buf[len..];
    match r.enumeration::<TransactionExceptionCode>("transactionExceptionCode") {
        Ok(exception) => failed_outcome(code, exception),
        Err(_) => Outcome::Success,
    }
}

/// Seata's [`Classify`]: the table in this module's docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct SeataClassifier;

/// The outcome a body in Seata's protobuf codec reports: decoded whole (the protobuf
/// head is not at fixed offsets), then the same table.
fn protobuf_outcome(body: &[u8]) -> Outcome {
    let Ok(msg) = super::protobuf::decode(body) else {
        return Outcome::Success;
    };
    match msg.transaction_result() {
        Some(r) if r.code == ResultCode::Failed => failed_outcome(msg.type_code(), r.exception),
        _ => Outcome::Success,
    }
}

impl Classify for SeataClassifier {
    fn classify(&self, answer: &Payload) -> Outcome {
        if answer.codec == CODEC_PROTOBUF {
            return match answer.compressor {
                COMPRESSOR_NONE => protobuf_outcome(&answer.body),
                c => match crate::compress::decompress(c, &answer.body, DEFAULT_MAX_FRAME_LEN) {
                    Ok(body) => protobuf_outcome(&body),
                    Err(_) => Outcome::Success,
                },
            };
        }
        if answer.codec != CODEC_SEATA {
            return Outcome::Success;
        }
        if answer.compressor == COMPRESSOR_NONE {
            return body_outcome(&answer.body);
        }
        match crate::compress::decompress(answer.compressor, &answer.body, DEFAULT_MAX_FRAME_LEN) {
            Ok(body) => body_outcome(&body),
            Err(_) => Outcome::Success,
        }
    }

    fn probe(&self) -> Option<Payload> {
        Payload::seata(&SeataMessage::GlobalStatus(GlobalEndRequest::new(
            PROBE_XID,
        )))
        .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{
        BranchRegisterResponse, GlobalBeginResponse, GlobalEndResponse, GlobalStatus,
        RegisterResponse, TransactionResult,
    };

    fn outcome_of(msg: &SeataMessage) -> Outcome {
        body_outcome(&msg.encode().unwrap())
    }

    fn begin(result: TransactionResult) -> SeataMessage {
        SeataMessage::GlobalBeginResponse(GlobalBeginResponse {
            result,
            xid: None,
            extra_data: None,
        })
    }

    /// The same answers in the protobuf codec (plain and gzip) classify alike.
    #[test]
    fn protobuf_answers_are_classified_by_the_same_table() {
        use TransactionExceptionCode as E;
        let classify = |msg: &SeataMessage, compressor: crate::compress::Compressor| {
            let format = crate::BodyFormat {
                codec: CODEC_PROTOBUF,
                compressor,
            };
            SeataClassifier.classify(&Payload::seata_as(msg, format).unwrap())
        };
        for c in [
            crate::compress::Compressor::None,
            crate::compress::Compressor::Gzip,
        ] {
            let store = begin(TransactionResult::failed(E::FailedStore, "store down"));
            assert_eq!(classify(&store, c), Outcome::ServerFailure, "{c:?}");
            let conflict = SeataMessage::BranchRegisterResponse(BranchRegisterResponse {
                result: TransactionResult::failed(E::LockKeyConflict, "held"),
                branch_id: 0,
            });
            assert_eq!(classify(&conflict, c), Outcome::CallerFailure, "{c:?}");
            assert_eq!(
                classify(&begin(TransactionResult::success()), c),
                Outcome::Success
            );
        }
        // A protobuf body that does not decode is the caller's to read: a success.
        let junk = Payload::new(&b"junk"[..]).with_codec(CODEC_PROTOBUF);
        assert_eq!(SeataClassifier.classify(&junk), Outcome::Success);
    }

    #[test]
    fn a_store_failure_is_the_servers_a_conflict_the_callers() {
        use TransactionExceptionCode as E;
        assert_eq!(
            outcome_of(&begin(TransactionResult::success())),
            Outcome::Success
        );
        for e in [E::FailedStore, E::FailedWriteSession, E::Unknown] {
            assert_eq!(
                outcome_of(&begin(TransactionResult::failed(e, "store down"))),
                Outcome::ServerFailure,
                "{e}"
            );
        }
        let register = |e| {
            SeataMessage::BranchRegisterResponse(BranchRegisterResponse {
                result: TransactionResult::failed(e, "no"),
                branch_id: 0,
            })
        };
        // A raft follower applied nothing: the request belongs to the leader.
        assert_eq!(
            outcome_of(&begin(TransactionResult::failed(
                E::NotRaftLeader,
                "follower"
            ))),
            Outcome::Misdirected
        );
        for (e, outcome) in [
            (E::NotRaftLeader, Outcome::Misdirected),
            (E::LockKeyConflict, Outcome::CallerFailure),
            (E::FailedToAddBranch, Outcome::CallerFailure),
            (E::FailedStore, Outcome::ServerFailure),
        ] {
            assert_eq!(outcome_of(&register(e)), outcome, "{e}");
        }
        // A decided commit answered Failed (an RM is gone) is not the TC's failure.
        let commit = SeataMessage::GlobalCommitResponse(GlobalEndResponse {
            result: TransactionResult::failed(E::Unknown, "rm gone"),
            global_status: GlobalStatus::CommitRetrying,
        });
        assert_eq!(outcome_of(&commit), Outcome::CallerFailure);
        let registration = SeataMessage::RegisterTmResponse(RegisterResponse {
            identified: false,
            version: None,
        });
        assert_eq!(outcome_of(&registration), Outcome::Success);
    }

    #[test]
    fn every_exception_code_has_its_row() {
        // The match in `failed_outcome` is exhaustive; this pins the server side of it.
        let server: Vec<_> = TransactionExceptionCode::ALL
            .iter()
            .filter(|&&e| failed_outcome(GLOBAL_COMMIT_RESULT, e) == Outcome::ServerFailure)
            .map(|e| e.java_name())
            .collect();
        assert_eq!(
            server,
            [
                "BeginFailed",
                "IO",
                "FailedLockGlobalTransaction",
                "FailedWriteSession",
                "FailedStore",
            ]
        );
    }

    #[test]
    fn short_or_foreign_bodies_are_successes() {
        let full = begin(TransactionResult::failed(
            TransactionExceptionCode::FailedStore,
            "x",
        ))
        .encode()
        .unwrap();
        // type code (2), result (1), message length (2) and "x" (1), exception (1):
        // a body cut anywhere in that head is read as a success; only the head is read,
        // so one cut after it is read by its exception code.
        let head = 7;
        for cut in 0..head {
            assert_eq!(body_outcome(&full[..cut]), Outcome::Success, "cut at {cut}");
        }
        assert_eq!(body_outcome(&full[..head]), Outcome::ServerFailure);
        assert_eq!(body_outcome(&full), Outcome::ServerFailure);
        assert_eq!(body_outcome(b"\xff\xffgame bytes"), Outcome::Success);
    }
}
