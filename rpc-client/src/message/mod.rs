//! Every Seata v1 message in the Seata codec, typed, byte-identical to Seata Java's
//! `*Codec` classes.
//!
//! A Seata-codec body is `[i16 type code][fields]`. The layouts, field by field, with a
//! byte vector per message, are in
//! [docs/seata-messages.md](https://github.com/meshline/meshline/blob/main/docs/seata-messages.md);
//! the frame around the body in
//! [docs/seata-compat.md §4](https://github.com/meshline/meshline/blob/main/docs/seata-compat.md#4-rpc-protocol-v1).
//! One family of messages per file:
//!
//! | file | messages |
//! |---|---|
//! | `register` | RegisterTM (101/102), RegisterRM (103/104) |
//! | `global` | GlobalBegin (1/2), GlobalCommit (7/8), GlobalRollback (9/10), GlobalStatus (15/16), GlobalReport (17/18) |
//! | `branch` | BranchRegister (11/12), BranchReport (13/14) |
//! | `phase_two` | BranchCommit (3/4), BranchRollback (5/6), TC to RM |
//! | `lock` | GlobalLockQuery (21/22) |
//! | `undo` | UndoLogDelete (111), TC to RM, one-way |
//! | `merge` | MergedWarpMessage (59), MergeResultMessage (60), BatchResultMessage (121) |
//! | `codes` | ResultCode, TransactionExceptionCode, GlobalStatus, BranchStatus, BranchType |
//! | `result` | the result head every transaction response starts with |
//! | `outcome` | which failed answers are the TC's failure and which the caller's |
//! | `protobuf` | the same messages as Seata's protobuf serializer writes them (v1 frames with the protobuf codec, and gRPC bodies) |
//!
//! Heartbeats have no body: PING/PONG are implied by the frame's message type
//! ([`HeartbeatMessage`]).
//!
//! # Strings and bad input
//!
//! Strings are `[i16 length][UTF-8]`, lock keys, application data and resource ids
//! `[i32 length][UTF-8]`. As in Java, null and `""` are both written as length 0, and a
//! length of 0 or less reads as absent. Decoding is stricter than Java's where Java
//! would misread: a body that ends early, has bytes after its last field, carries a
//! type code or enum byte Seata does not define, or a string that is not UTF-8 is a
//! [`MessageError`] naming the message and the field. Nothing a peer sends can make a
//! decoder panic (a proptest over every decoder checks it).

mod branch;
mod codes;
mod global;
mod lock;
pub(crate) mod merge;
pub mod outcome;
mod phase_two;
pub mod protobuf;
mod register;
mod result;
mod undo;
mod wire;

use bytes::{BufMut, Bytes, BytesMut};

pub use branch::{
    BranchRegisterRequest, BranchRegisterResponse, BranchReportRequest, BranchReportResponse,
};
pub use codes::{BranchStatus, BranchType, GlobalStatus, ResultCode, TransactionExceptionCode};
pub use global::{
    GlobalBeginRequest, GlobalBeginResponse, GlobalCommitRequest, GlobalCommitResponse,
    GlobalEndRequest, GlobalEndResponse, GlobalReportRequest, GlobalReportResponse,
    GlobalRollbackRequest, GlobalRollbackResponse, GlobalStatusRequest, GlobalStatusResponse,
};
pub use lock::{GlobalLockQueryRequest, GlobalLockQueryResponse};
pub use merge::{
    BatchResultMessage, MAX_ENTRIES, MergeResultMessage, MergedWarpMessage, is_mergeable_request,
};
pub use outcome::SeataClassifier;
pub use phase_two::{
    BranchCommitRequest, BranchCommitResponse, BranchEndRequest, BranchEndResponse,
    BranchRollbackRequest, BranchRollbackResponse,
};
pub use register::{RegisterResponse, RegisterRmRequest, RegisterTmRequest};
pub use result::TransactionResult;
pub use undo::UndoLogDeleteRequest;

use crate::codec::{Frame, MessageType};
use crate::compress::CompressError;
use wire::{Reader, Writer};

/// Seata message type codes (`MessageType.java`).
pub mod type_code {
    /// GlobalBeginRequest.
    pub const GLOBAL_BEGIN: i16 = 1;
    /// GlobalBeginResponse.
    pub const GLOBAL_BEGIN_RESULT: i16 = 2;
    /// BranchCommitRequest (TC -> RM).
    pub const BRANCH_COMMIT: i16 = 3;
    /// BranchCommitResponse.
    pub const BRANCH_COMMIT_RESULT: i16 = 4;
    /// BranchRollbackRequest (TC -> RM).
    pub const BRANCH_ROLLBACK: i16 = 5;
    /// BranchRollbackResponse.
    pub const BRANCH_ROLLBACK_RESULT: i16 = 6;
    /// GlobalCommitRequest.
    pub const GLOBAL_COMMIT: i16 = 7;
    /// GlobalCommitResponse.
    pub const GLOBAL_COMMIT_RESULT: i16 = 8;
    /// GlobalRollbackRequest.
    pub const GLOBAL_ROLLBACK: i16 = 9;
    /// GlobalRollbackResponse.
    pub const GLOBAL_ROLLBACK_RESULT: i16 = 10;
    /// BranchRegisterRequest.
    pub const BRANCH_REGISTER: i16 = 11;
    /// BranchRegisterResponse.
    pub const BRANCH_REGISTER_RESULT: i16 = 12;
    /// BranchReportRequest.
    pub const BRANCH_STATUS_REPORT: i16 = 13;
    /// BranchReportResponse.
    pub const BRANCH_STATUS_REPORT_RESULT: i16 = 14;
    /// GlobalStatusRequest.
    pub const GLOBAL_STATUS: i16 = 15;
    /// GlobalStatusResponse.
    pub const GLOBAL_STATUS_RESULT: i16 = 16;
    /// GlobalReportRequest.
    pub const GLOBAL_REPORT: i16 = 17;
    /// GlobalReportResponse.
    pub const GLOBAL_REPORT_RESULT: i16 = 18;
    /// GlobalLockQueryRequest.
    pub const GLOBAL_LOCK_QUERY: i16 = 21;
    /// GlobalLockQueryResponse.
    pub const GLOBAL_LOCK_QUERY_RESULT: i16 = 22;
    /// MergedWarpMessage (batched requests).
    pub const SEATA_MERGE: i16 = 59;
    /// MergeResultMessage.
    pub const SEATA_MERGE_RESULT: i16 = 60;
    /// RegisterTMRequest.
    pub const REG_CLT: i16 = 101;
    /// RegisterTMResponse.
    pub const REG_CLT_RESULT: i16 = 102;
    /// RegisterRMRequest.
    pub const REG_RM: i16 = 103;
    /// RegisterRMResponse.
    pub const REG_RM_RESULT: i16 = 104;
    /// UnregisterRMRequest (servers from 2.7.0).
    pub const UNREG_RM: i16 = 105;
    /// UnregisterRMResponse.
    pub const UNREG_RM_RESULT: i16 = 106;
    /// UndoLogDeleteRequest.
    pub const RM_DELETE_UNDOLOG: i16 = 111;
    /// HeartbeatMessage (implied by frame types 3/4; never in a body).
    pub const HEARTBEAT: i16 = 120;
    /// BatchResultMessage.
    pub const BATCH_RESULT: i16 = 121;
}

/// Java's class name for a type code (for messages and logs).
pub fn type_name(code: i16) -> &'static str {
    use type_code::*;
    match code {
        GLOBAL_BEGIN => "GlobalBeginRequest",
        GLOBAL_BEGIN_RESULT => "GlobalBeginResponse",
        BRANCH_COMMIT => "BranchCommitRequest",
        BRANCH_COMMIT_RESULT => "BranchCommitResponse",
        BRANCH_ROLLBACK => "BranchRollbackRequest",
        BRANCH_ROLLBACK_RESULT => "BranchRollbackResponse",
        GLOBAL_COMMIT => "GlobalCommitRequest",
        GLOBAL_COMMIT_RESULT => "GlobalCommitResponse",
        GLOBAL_ROLLBACK => "GlobalRollbackRequest",
        GLOBAL_ROLLBACK_RESULT => "GlobalRollbackResponse",
        BRANCH_REGISTER => "BranchRegisterRequest",
        BRANCH_REGISTER_RESULT => "BranchRegisterResponse",
        BRANCH_STATUS_REPORT => "BranchReportRequest",
        BRANCH_STATUS_REPORT_RESULT => "BranchReportResponse",
        GLOBAL_STATUS => "GlobalStatusRequest",
        GLOBAL_STATUS_RESULT => "GlobalStatusResponse",
        GLOBAL_REPORT => "GlobalReportRequest",
        GLOBAL_REPORT_RESULT => "GlobalReportResponse",
        GLOBAL_LOCK_QUERY => "GlobalLockQueryRequest",
        GLOBAL_LOCK_QUERY_RESULT => "GlobalLockQueryResponse",
        SEATA_MERGE => "MergedWarpMessage",
        SEATA_MERGE_RESULT => "MergeResultMessage",
        REG_CLT => "RegisterTMRequest",
        REG_CLT_RESULT => "RegisterTMResponse",
        REG_RM => "RegisterRMRequest",
        REG_RM_RESULT => "RegisterRMResponse",
        UNREG_RM => "UnregisterRMRequest",
        UNREG_RM_RESULT => "UnregisterRMResponse",
        RM_DELETE_UNDOLOG => "UndoLogDeleteRequest",
        HEARTBEAT => "HeartbeatMessage",
        BATCH_RESULT => "BatchResultMessage",
        _ => "unknown message",
    }
}

/// Seata's `HeartbeatMessage`: PING from the client, PONG from the server. On the wire
/// it is only the frame's message type (3 or 4); the body is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatMessage {
    /// Client -> server, frame type 3.
    Ping,
    /// Server -> client, frame type 4, echoing the PING's id.
    Pong,
}

impl HeartbeatMessage {
    /// The heartbeat a frame carries, if it is one.
    pub fn from_frame(frame: &Frame) -> Option<HeartbeatMessage> {
        match frame.msg_type {
            MessageType::HeartbeatRequest => Some(HeartbeatMessage::Ping),
            MessageType::HeartbeatResponse => Some(HeartbeatMessage::Pong),
            _ => None,
        }
    }
}

/// A Seata-codec body, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)]
pub enum SeataMessage {
    /// 1: start a global transaction.
    GlobalBegin(GlobalBeginRequest),
    /// 2.
    GlobalBeginResponse(GlobalBeginResponse),
    /// 3: TC -> RM, commit a branch.
    BranchCommit(BranchCommitRequest),
    /// 4.
    BranchCommitResponse(BranchCommitResponse),
    /// 5: TC -> RM, roll a branch back.
    BranchRollback(BranchRollbackRequest),
    /// 6.
    BranchRollbackResponse(BranchRollbackResponse),
    /// 7: commit a global transaction.
    GlobalCommit(GlobalCommitRequest),
    /// 8.
    GlobalCommitResponse(GlobalCommitResponse),
    /// 9: roll a global transaction back.
    GlobalRollback(GlobalRollbackRequest),
    /// 10.
    GlobalRollbackResponse(GlobalRollbackResponse),
    /// 11: register a branch.
    BranchRegister(BranchRegisterRequest),
    /// 12.
    BranchRegisterResponse(BranchRegisterResponse),
    /// 13: report a branch's phase-one status.
    BranchReport(BranchReportRequest),
    /// 14.
    BranchReportResponse(BranchReportResponse),
    /// 15: ask a global transaction's status.
    GlobalStatus(GlobalStatusRequest),
    /// 16.
    GlobalStatusResponse(GlobalStatusResponse),
    /// 17: report a global transaction's status (Saga).
    GlobalReport(GlobalReportRequest),
    /// 18.
    GlobalReportResponse(GlobalReportResponse),
    /// 21: would these lock keys be free?
    GlobalLockQuery(GlobalLockQueryRequest),
    /// 22.
    GlobalLockQueryResponse(GlobalLockQueryResponse),
    /// 59: several requests in one frame.
    Merged(MergedWarpMessage),
    /// 60: their results, by position.
    MergeResult(MergeResultMessage),
    /// 101.
    RegisterTm(RegisterTmRequest),
    /// 102.
    RegisterTmResponse(RegisterResponse),
    /// 103.
    RegisterRm(RegisterRmRequest),
    /// 104.
    RegisterRmResponse(RegisterResponse),
    /// 105: an RM leaving (its resources, comma-joined; the layout of a RegisterRM),
    /// sent one-way on its orderly shutdown to servers from 2.7.0.
    UnregisterRm(RegisterRmRequest),
    /// 106: `identified` true when the resources were removed. The old identify layout
    /// (no result code) in every protocol version.
    UnregisterRmResponse(RegisterResponse),
    /// 111: TC -> RM, one-way, delete old undo logs.
    UndoLogDelete(UndoLogDeleteRequest),
    /// 121: results of merged requests, by request id.
    BatchResult(BatchResultMessage),
}

/// Why a Seata-codec body could not be encoded or decoded. Every variant names what
/// was wrong: the message, the field, the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessageError {
    /// The body ends before a field it declares.
    #[error("seata message {} ({type_code}): truncated at field `{field}`", type_name(*type_code))]
    Truncated {
        /// The type code (0 if not even that was there).
        type_code: i16,
        /// The field being read.
        field: &'static str,
    },
    /// A string field is not UTF-8.
    #[error("seata message {} ({type_code}): field `{field}` is not UTF-8", type_name(*type_code))]
    NotUtf8 {
        /// The type code.
        type_code: i16,
        /// The field.
        field: &'static str,
    },
    /// Bytes left after the last field.
    #[error("seata message {} ({type_code}): {extra} unexpected trailing bytes after the last field", type_name(*type_code))]
    Trailing {
        /// The type code.
        type_code: i16,
        /// How many bytes were left.
        extra: usize,
    },
    /// A one-byte enum field holds a value Seata does not define.
    #[error("seata message {} ({type_code}): field `{field}` has unknown code {code}", type_name(*type_code))]
    UnknownCode {
        /// The type code.
        type_code: i16,
        /// The field.
        field: &'static str,
        /// The byte.
        code: u8,
    },
    /// A length or count that cannot be (negative, or too small for what follows).
    #[error("seata message {} ({type_code}): field `{field}` has impossible value {len}", type_name(*type_code))]
    BadLength {
        /// The type code.
        type_code: i16,
        /// The field.
        field: &'static str,
        /// The value read.
        len: i64,
    },
    /// The body starts with a type code Seata does not define.
    #[error("unknown seata message type code {0}")]
    UnknownType(i16),
    /// A message that may not travel inside a batching envelope was found in one.
    #[error("seata message {} ({type_code}) cannot carry {} ({nested})", type_name(*type_code), type_name(*nested))]
    NotNestable {
        /// The envelope's type code.
        type_code: i16,
        /// The nested message's type code.
        nested: i16,
    },
    /// More entries than an envelope's `i16` count can say.
    #[error("seata message {} ({type_code}): {count} entries, more than 32767", type_name(*type_code))]
    TooManyEntries {
        /// The envelope's type code.
        type_code: i16,
        /// How many entries.
        count: usize,
    },
    /// An envelope's ids do not match its entries one to one.
    #[error("seata message {} ({type_code}): {entries} entries but {ids} msgIds", type_name(*type_code))]
    IdsMismatch {
        /// The envelope's type code.
        type_code: i16,
        /// Entries.
        entries: usize,
        /// Ids.
        ids: usize,
    },
    /// A body of another type was expected here.
    #[error("expected {expected}, got {} ({got})", type_name(*got))]
    UnexpectedType {
        /// What was expected.
        expected: &'static str,
        /// The type code found.
        got: i16,
    },
    /// A string too long for its length prefix.
    #[error("field `{field}` of {len} bytes does not fit its length prefix (at most {max})")]
    FieldTooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The most its prefix can say.
        max: usize,
    },
    /// The body is compressed and could not be decompressed (or compressed).
    #[error(transparent)]
    Compression(#[from] CompressError),
    /// The body uses a serializer meshline does not speak.
    #[error("body uses the {name} serializer (codec byte {code:#04x}); meshline speaks the seata (0x01) and protobuf (0x02) codecs: set transport.serialization=seata on the peer", name = crate::codec::codec_name(*.0), code = .0)]
    NotSeataCodec(u8),
    /// A body in Seata's protobuf codec that cannot be read or written.
    #[error("seata protobuf body: {0}")]
    Protobuf(#[from] protobuf::ProtoError),
}

impl SeataMessage {
    /// The message's type code.
    pub fn type_code(&self) -> i16 {
        use type_code::*;
        match self {
            SeataMessage::GlobalBegin(_) => GLOBAL_BEGIN,
            SeataMessage::GlobalBeginResponse(_) => GLOBAL_BEGIN_RESULT,
            SeataMessage::BranchCommit(_) => BRANCH_COMMIT,
            SeataMessage::BranchCommitResponse(_) => BRANCH_COMMIT_RESULT,
            SeataMessage::BranchRollback(_) => BRANCH_ROLLBACK,
            SeataMessage::BranchRollbackResponse(_) => BRANCH_ROLLBACK_RESULT,
            SeataMessage::GlobalCommit(_) => GLOBAL_COMMIT,
            SeataMessage::GlobalCommitResponse(_) => GLOBAL_COMMIT_RESULT,
            SeataMessage::GlobalRollback(_) => GLOBAL_ROLLBACK,
            SeataMessage::GlobalRollbackResponse(_) => GLOBAL_ROLLBACK_RESULT,
            SeataMessage::BranchRegister(_) => BRANCH_REGISTER,
            SeataMessage::BranchRegisterResponse(_) => BRANCH_REGISTER_RESULT,
            SeataMessage::BranchReport(_) => BRANCH_STATUS_REPORT,
            SeataMessage::BranchReportResponse(_) => BRANCH_STATUS_REPORT_RESULT,
            SeataMessage::GlobalStatus(_) => GLOBAL_STATUS,
            SeataMessage::GlobalStatusResponse(_) => GLOBAL_STATUS_RESULT,
            SeataMessage::GlobalReport(_) => GLOBAL_REPORT,
            SeataMessage::GlobalReportResponse(_) => GLOBAL_REPORT_RESULT,
            SeataMessage::GlobalLockQuery(_) => GLOBAL_LOCK_QUERY,
            SeataMessage::GlobalLockQueryResponse(_) => GLOBAL_LOCK_QUERY_RESULT,
            SeataMessage::Merged(_) => SEATA_MERGE,
            SeataMessage::MergeResult(_) => SEATA_MERGE_RESULT,
            SeataMessage::RegisterTm(_) => REG_CLT,
            SeataMessage::RegisterTmResponse(_) => REG_CLT_RESULT,
            SeataMessage::RegisterRm(_) => REG_RM,
            SeataMessage::RegisterRmResponse(_) => REG_RM_RESULT,
            SeataMessage::UnregisterRm(_) => UNREG_RM,
            SeataMessage::UnregisterRmResponse(_) => UNREG_RM_RESULT,
            SeataMessage::UndoLogDelete(_) => RM_DELETE_UNDOLOG,
            SeataMessage::BatchResult(_) => BATCH_RESULT,
        }
    }

    /// Java's class name of the message (`BranchRegisterRequest`).
    pub fn name(&self) -> &'static str {
        type_name(self.type_code())
    }

    /// True for a type code a Seata body may start with.
    pub fn is_known_type(code: i16) -> bool {
        code != type_code::HEARTBEAT && type_name(code) != "unknown message"
    }

    /// The result head of a transaction response (`None` for requests, registration
    /// answers and envelopes).
    pub fn transaction_result(&self) -> Option<&TransactionResult> {
        match self {
            SeataMessage::GlobalBeginResponse(r) => Some(&r.result),
            SeataMessage::BranchCommitResponse(r) | SeataMessage::BranchRollbackResponse(r) => {
                Some(&r.result)
            }
            SeataMessage::GlobalCommitResponse(r)
            | SeataMessage::GlobalRollbackResponse(r)
            | SeataMessage::GlobalStatusResponse(r)
            | SeataMessage::GlobalReportResponse(r) => Some(&r.result),
            SeataMessage::BranchRegisterResponse(r) => Some(&r.result),
            SeataMessage::BranchReportResponse(r) => Some(&r.result),
            SeataMessage::GlobalLockQueryResponse(r) => Some(&r.result),
            _ => None,
        }
    }

    /// Encodes the body: type code, then fields.
    pub fn encode(&self) -> Result<Bytes, MessageError> {
        let mut b = BytesMut::with_capacity(64);
        self.encode_into(&mut b)?;
        Ok(b.freeze())
    }

    /// Appends the body (type code, then fields) to `buf`.
    pub fn encode_into(&self, buf: &mut BytesMut) -> Result<(), MessageError> {
        buf.put_i16(self.type_code());
        let w = &mut Writer { buf };
        match self {
            SeataMessage::GlobalBegin(m) => m.encode(w),
            SeataMessage::GlobalBeginResponse(m) => m.encode(w),
            SeataMessage::BranchCommit(m) | SeataMessage::BranchRollback(m) => m.encode(w),
            SeataMessage::BranchCommitResponse(m) | SeataMessage::BranchRollbackResponse(m) => {
                m.encode(w)
            }
            SeataMessage::GlobalCommit(m)
            | SeataMessage::GlobalRollback(m)
            | SeataMessage::GlobalStatus(m) => m.encode(w),
            SeataMessage::GlobalCommitResponse(m)
            | SeataMessage::GlobalRollbackResponse(m)
            | SeataMessage::GlobalStatusResponse(m)
            | SeataMessage::GlobalReportResponse(m) => m.encode(w),
            SeataMessage::GlobalReport(m) => m.encode(w),
            SeataMessage::BranchRegister(m) | SeataMessage::GlobalLockQuery(m) => m.encode(w),
            SeataMessage::BranchRegisterResponse(m) => m.encode(w),
            SeataMessage::BranchReport(m) => m.encode(w),
            SeataMessage::BranchReportResponse(m) => m.encode(w),
            SeataMessage::GlobalLockQueryResponse(m) => m.encode(w),
            SeataMessage::Merged(m) => m.encode(w),
            SeataMessage::MergeResult(m) => m.encode(w),
            SeataMessage::BatchResult(m) => m.encode(w),
            SeataMessage::RegisterTm(m) => m.encode(w),
            SeataMessage::RegisterRm(m) | SeataMessage::UnregisterRm(m) => m.encode(w),
            SeataMessage::RegisterTmResponse(m)
            | SeataMessage::RegisterRmResponse(m)
            | SeataMessage::UnregisterRmResponse(m) => m.encode(w),
            SeataMessage::UndoLogDelete(m) => m.encode(w),
        }
    }

    /// Decodes an uncompressed Seata-codec body. Every byte must belong to a field.
    pub fn decode(body: &Bytes) -> Result<SeataMessage, MessageError> {
        Self::decode_slice(body)
    }

    /// [`decode`](Self::decode) from a byte slice.
    pub fn decode_slice(body: &[u8]) -> Result<SeataMessage, MessageError> {
        let mut r = Reader::new(body, 0);
        let code = r.i16("typeCode")?;
        r.type_code = code;
        let msg = Self::decode_fields(code, &mut r)?;
        r.finish()?;
        Ok(msg)
    }

    /// Reads the fields of a `code` message (an envelope's entries use it to find where
    /// each entry ends).
    pub(crate) fn skip_fields(code: i16, r: &mut Reader<'_>) -> Result<(), MessageError> {
        Self::decode_fields(code, r).map(drop)
    }

    fn decode_fields(code: i16, r: &mut Reader<'_>) -> Result<SeataMessage, MessageError> {
        use type_code::*;
        Ok(match code {
            GLOBAL_BEGIN => SeataMessage::GlobalBegin(GlobalBeginRequest::decode(r)?),
            GLOBAL_BEGIN_RESULT => {
                SeataMessage::GlobalBeginResponse(GlobalBeginResponse::decode(r)?)
            }
            BRANCH_COMMIT => SeataMessage::BranchCommit(BranchEndRequest::decode(r)?),
            BRANCH_COMMIT_RESULT => {
                SeataMessage::BranchCommitResponse(BranchEndResponse::decode(r)?)
            }
            BRANCH_ROLLBACK => SeataMessage::BranchRollback(BranchEndRequest::decode(r)?),
            BRANCH_ROLLBACK_RESULT => {
                SeataMessage::BranchRollbackResponse(BranchEndResponse::decode(r)?)
            }
            GLOBAL_COMMIT => SeataMessage::GlobalCommit(GlobalEndRequest::decode(r)?),
            GLOBAL_COMMIT_RESULT => {
                SeataMessage::GlobalCommitResponse(GlobalEndResponse::decode(r)?)
            }
            GLOBAL_ROLLBACK => SeataMessage::GlobalRollback(GlobalEndRequest::decode(r)?),
            GLOBAL_ROLLBACK_RESULT => {
                SeataMessage::GlobalRollbackResponse(GlobalEndResponse::decode(r)?)
            }
            BRANCH_REGISTER => SeataMessage::BranchRegister(BranchRegisterRequest::decode(r)?),
            BRANCH_REGISTER_RESULT => {
                SeataMessage::BranchRegisterResponse(BranchRegisterResponse::decode(r)?)
            }
            BRANCH_STATUS_REPORT => SeataMessage::BranchReport(BranchReportRequest::decode(r)?),
            BRANCH_STATUS_REPORT_RESULT => {
                SeataMessage::BranchReportResponse(BranchReportResponse::decode(r)?)
            }
            GLOBAL_STATUS => SeataMessage::GlobalStatus(GlobalEndRequest::decode(r)?),
            GLOBAL_STATUS_RESULT => {
                SeataMessage::GlobalStatusResponse(GlobalEndResponse::decode(r)?)
            }
            GLOBAL_REPORT => SeataMessage::GlobalReport(GlobalReportRequest::decode(r)?),
            GLOBAL_REPORT_RESULT => {
                SeataMessage::GlobalReportResponse(GlobalEndResponse::decode(r)?)
            }
            GLOBAL_LOCK_QUERY => SeataMessage::GlobalLockQuery(BranchRegisterRequest::decode(r)?),
            GLOBAL_LOCK_QUERY_RESULT => {
                SeataMessage::GlobalLockQueryResponse(GlobalLockQueryResponse::decode(r)?)
            }
            SEATA_MERGE => SeataMessage::Merged(MergedWarpMessage::decode(r)?),
            SEATA_MERGE_RESULT => SeataMessage::MergeResult(MergeResultMessage::decode(r)?),
            BATCH_RESULT => SeataMessage::BatchResult(BatchResultMessage::decode(r)?),
            REG_CLT => SeataMessage::RegisterTm(RegisterTmRequest::decode(r)?),
            REG_CLT_RESULT => SeataMessage::RegisterTmResponse(RegisterResponse::decode(r)?),
            REG_RM => SeataMessage::RegisterRm(RegisterRmRequest::decode(r)?),
            REG_RM_RESULT => SeataMessage::RegisterRmResponse(RegisterResponse::decode(r)?),
            UNREG_RM => SeataMessage::UnregisterRm(RegisterRmRequest::decode(r)?),
            UNREG_RM_RESULT => SeataMessage::UnregisterRmResponse(RegisterResponse::decode(r)?),
            RM_DELETE_UNDOLOG => SeataMessage::UndoLogDelete(UndoLogDeleteRequest::decode(r)?),
            other => return Err(MessageError::UnknownType(other)),
        })
    }
}

/// The TC side of registration: when `msg` is a RegisterTM or RegisterRM request, the
/// matching response with `identified = accept` and the server's `version`; `None` for
/// any other message. Used by the examples' `tc-server`, the tests and the bench server.
pub fn register_reply(msg: &SeataMessage, accept: bool, version: &str) -> Option<SeataMessage> {
    let resp = RegisterResponse {
        identified: accept,
        version: Some(version.to_string()),
    };
    match msg {
        SeataMessage::RegisterTm(_) => Some(SeataMessage::RegisterTmResponse(resp)),
        SeataMessage::RegisterRm(_) => Some(SeataMessage::RegisterRmResponse(resp)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
