//! Each Seata protobuf message back to its [`SeataMessage`] (the way out is
//! `encode`): an empty string reads as none, a missing nested message as its
//! defaults (what Java's getters return), and a number an enum lacks is an error.

use prost::Message;
use prost_types::Any;

use super::encode::proto_name;
use super::enums::{branch_status_from, branch_type_from, exception_from, global_status_from};
use super::{ProtoError, pb};
use crate::message::codes::ResultCode;
use crate::message::{
    BatchResultMessage, BranchEndRequest, BranchEndResponse, BranchRegisterRequest,
    BranchRegisterResponse, BranchReportRequest, BranchReportResponse, GlobalBeginRequest,
    GlobalBeginResponse, GlobalEndRequest, GlobalEndResponse, GlobalLockQueryResponse,
    GlobalReportRequest, MergeResultMessage, MergedWarpMessage, RegisterResponse,
    RegisterRmRequest, RegisterTmRequest, SeataMessage, TransactionResult, UndoLogDeleteRequest,
};

fn opt(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

fn result_of(r: Option<pb::AbstractTransactionResponse>) -> Result<TransactionResult, ProtoError> {
    let r = r.unwrap_or_default();
    let m = r.abstract_result_message.unwrap_or_default();
    Ok(TransactionResult {
        code: result_code(m.result_code)?,
        exception: exception_from(r.transaction_exception_code)?,
        message: opt(m.msg),
    })
}

fn result_code(n: i32) -> Result<ResultCode, ProtoError> {
    match n {
        0 => Ok(ResultCode::Failed),
        1 => Ok(ResultCode::Success),
        _ => Err(ProtoError::UnknownNumber {
            what: "ResultCodeProto",
            number: n,
        }),
    }
}

/// The messages of an envelope; an envelope inside one is refused, as the v1 codec
/// refuses it.
fn from_anys(anys: &[Any]) -> Result<Vec<SeataMessage>, ProtoError> {
    anys.iter()
        .map(|a| {
            let m = from_any(a)?;
            match m {
                SeataMessage::Merged(_)
                | SeataMessage::MergeResult(_)
                | SeataMessage::BatchResult(_) => Err(ProtoError::NotNestable(proto_name(&m))),
                m => Ok(m),
            }
        })
        .collect()
}

/// The message an `Any` holds (the type named by the URL's last segment).
pub(crate) fn from_any(any: &Any) -> Result<SeataMessage, ProtoError> {
    let full = any.type_url.rsplit('/').next().unwrap_or_default();
    from_proto(full, &any.value)
}

fn parse<T: Message + Default>(name: &str, bytes: &[u8]) -> Result<T, ProtoError> {
    T::decode(bytes).map_err(|e| ProtoError::Decode {
        name: name.to_string(),
        reason: e.to_string(),
    })
}

fn branch_register_from(b: pb::BranchRegisterRequest) -> Result<BranchRegisterRequest, ProtoError> {
    Ok(BranchRegisterRequest {
        xid: b.xid,
        branch_type: branch_type_from(b.branch_type)?,
        resource_id: b.resource_id,
        lock_key: opt(b.lock_key),
        application_data: opt(b.application_data),
    })
}

fn branch_end_from(b: pb::BranchEndRequest) -> Result<BranchEndRequest, ProtoError> {
    let b = b.abstract_branch_end_request.unwrap_or_default();
    Ok(BranchEndRequest {
        xid: b.xid,
        branch_id: b.branch_id,
        branch_type: branch_type_from(b.branch_type)?,
        resource_id: b.resource_id,
        application_data: opt(b.application_data),
    })
}

fn branch_end_response_from(b: pb::BranchEndResponse) -> Result<BranchEndResponse, ProtoError> {
    let b = b.abstract_branch_end_response.unwrap_or_default();
    Ok(BranchEndResponse {
        result: result_of(b.abstract_transaction_response)?,
        xid: b.xid,
        branch_id: b.branch_id,
        branch_status: branch_status_from(b.branch_status)?,
    })
}

fn global_end_from(g: Option<pb::AbstractGlobalEndRequest>) -> GlobalEndRequest {
    let g = g.unwrap_or_default();
    GlobalEndRequest {
        xid: g.xid,
        extra_data: opt(g.extra_data),
    }
}

fn global_end_response_from(g: pb::GlobalEndResponse) -> Result<GlobalEndResponse, ProtoError> {
    let g = g.abstract_global_end_response.unwrap_or_default();
    Ok(GlobalEndResponse {
        result: result_of(g.abstract_transaction_response)?,
        global_status: global_status_from(g.global_status)?,
    })
}

/// The `AbstractIdentifyRequest` fields, which are all of the TM's registration (and
/// the RM's but for its resource ids).
fn identify_from(i: Option<pb::AbstractIdentifyRequest>) -> RegisterTmRequest {
    let i = i.unwrap_or_default();
    RegisterTmRequest {
        version: i.version,
        application_id: i.application_id,
        transaction_service_group: i.transaction_service_group,
        extra_data: opt(i.extra_data),
    }
}

fn register_response_from(r: pb::RegisterResponse) -> RegisterResponse {
    let r = r.abstract_identify_response.unwrap_or_default();
    RegisterResponse {
        identified: r.identified,
        version: opt(r.version),
    }
}

fn register_rm_from(r: pb::RegisterRmRequest) -> RegisterRmRequest {
    let RegisterTmRequest {
        version,
        application_id,
        transaction_service_group,
        extra_data,
    } = identify_from(r.abstract_identify_request);
    RegisterRmRequest {
        version,
        application_id,
        transaction_service_group,
        extra_data,
        resource_ids: opt(r.resource_ids),
    }
}

/// The message named `full` (`org.apache.seata.protocol.protobuf.XxxProto`, or just
/// `XxxProto`) whose bytes are `bytes`.
pub(crate) fn from_proto(full: &str, bytes: &[u8]) -> Result<SeataMessage, ProtoError> {
    use SeataMessage as M;
    let name = full
        .strip_prefix(super::pb::PACKAGE)
        .and_then(|n| n.strip_prefix('.'))
        .unwrap_or(full);
    Ok(match name {
        "GlobalBeginRequestProto" => {
            let g: pb::GlobalBeginRequest = parse(full, bytes)?;
            M::GlobalBegin(GlobalBeginRequest {
                timeout_ms: g.timeout,
                transaction_name: opt(g.transaction_name),
            })
        }
        "GlobalBeginResponseProto" => {
            let g: pb::GlobalBeginResponse = parse(full, bytes)?;
            M::GlobalBeginResponse(GlobalBeginResponse {
                result: result_of(g.abstract_transaction_response)?,
                xid: opt(g.xid),
                extra_data: opt(g.extra_data),
            })
        }
        "BranchCommitRequestProto" => M::BranchCommit(branch_end_from(parse(full, bytes)?)?),
        "BranchRollbackRequestProto" => M::BranchRollback(branch_end_from(parse(full, bytes)?)?),
        "BranchCommitResponseProto" => {
            M::BranchCommitResponse(branch_end_response_from(parse(full, bytes)?)?)
        }
        "BranchRollbackResponseProto" => {
            M::BranchRollbackResponse(branch_end_response_from(parse(full, bytes)?)?)
        }
        "GlobalCommitRequestProto" | "GlobalRollbackRequestProto" | "GlobalStatusRequestProto" => {
            let g: pb::GlobalEndRequest = parse(full, bytes)?;
            let g = global_end_from(g.abstract_global_end_request);
            match name {
                "GlobalCommitRequestProto" => M::GlobalCommit(g),
                "GlobalRollbackRequestProto" => M::GlobalRollback(g),
                _ => M::GlobalStatus(g),
            }
        }
        "GlobalCommitResponseProto" => {
            M::GlobalCommitResponse(global_end_response_from(parse(full, bytes)?)?)
        }
        "GlobalRollbackResponseProto" => {
            M::GlobalRollbackResponse(global_end_response_from(parse(full, bytes)?)?)
        }
        "GlobalStatusResponseProto" => {
            M::GlobalStatusResponse(global_end_response_from(parse(full, bytes)?)?)
        }
        "GlobalReportResponseProto" => {
            M::GlobalReportResponse(global_end_response_from(parse(full, bytes)?)?)
        }
        "GlobalReportRequestProto" => {
            let g: pb::GlobalReportRequest = parse(full, bytes)?;
            let end = global_end_from(g.abstract_global_end_request);
            M::GlobalReport(GlobalReportRequest {
                xid: end.xid,
                extra_data: end.extra_data,
                // proto3 has no null: 0 (`UnKnown`, which no report means) is none.
                global_status: match g.global_status {
                    0 => None,
                    n => Some(global_status_from(n)?),
                },
            })
        }
        "BranchRegisterRequestProto" => {
            M::BranchRegister(branch_register_from(parse(full, bytes)?)?)
        }
        "BranchRegisterResponseProto" => {
            let b: pb::BranchRegisterResponse = parse(full, bytes)?;
            M::BranchRegisterResponse(BranchRegisterResponse {
                result: result_of(b.abstract_transaction_response)?,
                branch_id: b.branch_id,
            })
        }
        "BranchReportRequestProto" => {
            let b: pb::BranchReportRequest = parse(full, bytes)?;
            M::BranchReport(BranchReportRequest {
                xid: b.xid,
                branch_id: b.branch_id,
                status: branch_status_from(b.status)?,
                resource_id: opt(b.resource_id),
                application_data: opt(b.application_data),
                branch_type: branch_type_from(b.branch_type)?,
            })
        }
        "BranchReportResponseProto" => {
            let b: pb::BranchReportResponse = parse(full, bytes)?;
            M::BranchReportResponse(BranchReportResponse {
                result: result_of(b.abstract_transaction_response)?,
            })
        }
        "GlobalLockQueryRequestProto" => {
            let g: pb::GlobalLockQueryRequest = parse(full, bytes)?;
            M::GlobalLockQuery(branch_register_from(
                g.branch_register_request.unwrap_or_default(),
            )?)
        }
        "GlobalLockQueryResponseProto" => {
            let g: pb::GlobalLockQueryResponse = parse(full, bytes)?;
            M::GlobalLockQueryResponse(GlobalLockQueryResponse {
                result: result_of(g.abstract_transaction_response)?,
                lockable: g.lockable,
            })
        }
        _ => return other_message(name, full, bytes),
    })
}

/// The envelopes, the registrations and UndoLogDelete (the rest of [`from_proto`]).
fn other_message(name: &str, full: &str, bytes: &[u8]) -> Result<SeataMessage, ProtoError> {
    use SeataMessage as M;
    Ok(match name {
        "MergedWarpMessageProto" => {
            let m: pb::MergedWarpMessage = parse(full, bytes)?;
            M::Merged(MergedWarpMessage {
                msgs: from_anys(&m.msgs)?,
                msg_ids: m.msg_ids,
            })
        }
        "MergedResultMessageProto" => {
            let m: pb::MergedResultMessage = parse(full, bytes)?;
            M::MergeResult(MergeResultMessage {
                msgs: from_anys(&m.msgs)?,
            })
        }
        "BatchResultMessageProto" => {
            let b: pb::BatchResultMessage = parse(full, bytes)?;
            M::BatchResult(BatchResultMessage {
                results: from_anys(&b.result_messages)?,
                msg_ids: b.msg_ids,
            })
        }
        "RegisterTMRequestProto" => {
            let r: pb::RegisterTmRequest = parse(full, bytes)?;
            M::RegisterTm(identify_from(r.abstract_identify_request))
        }
        "RegisterRMRequestProto" => M::RegisterRm(register_rm_from(parse(full, bytes)?)),
        "UnregisterRMRequestProto" => M::UnregisterRm(register_rm_from(parse(full, bytes)?)),
        "RegisterTMResponseProto" => {
            M::RegisterTmResponse(register_response_from(parse(full, bytes)?))
        }
        "RegisterRMResponseProto" => {
            M::RegisterRmResponse(register_response_from(parse(full, bytes)?))
        }
        "UnregisterRMResponseProto" => {
            M::UnregisterRmResponse(register_response_from(parse(full, bytes)?))
        }
        "UndoLogDeleteRequestProto" => {
            let u: pb::UndoLogDeleteRequest = parse(full, bytes)?;
            M::UndoLogDelete(UndoLogDeleteRequest {
                branch_type: branch_type_from(u.branch_type)?,
                resource_id: u.resource_id,
                save_days: i16::try_from(u.save_days).map_err(|_| ProtoError::UnknownNumber {
                    what: "UndoLogDeleteRequestProto.saveDays",
                    number: u.save_days,
                })?,
            })
        }
        _ => return Err(ProtoError::UnknownMessage(full.to_string())),
    })
}
