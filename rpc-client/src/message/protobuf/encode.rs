//! Each [`SeataMessage`] to its Seata protobuf message, field by field as Seata's
//! convertors (`serializer/seata-serializer-protobuf/.../convertor`) fill them: every
//! message carries its v1 type code in its innermost `AbstractMessageProto` (the
//! proto's `MessageTypeProto` numbers are v1's), a missing string is written `""`
//! (proto3 has no null), and a result's code and message ride in
//! `AbstractResultMessageProto`. The way back is `decode`.

use prost::Message;
use prost_types::Any;

use super::enums::{branch_status_to, branch_type_to, exception_to, global_status_to};
use super::{ProtoError, pb};
use crate::message::{
    BranchEndRequest, BranchEndResponse, BranchRegisterRequest, GlobalEndRequest,
    GlobalEndResponse, RegisterResponse, RegisterTmRequest, SeataMessage, TransactionResult,
};

/// `Any`'s type URL prefix (what Java's `Any.pack` writes).
const TYPE_URL_PREFIX: &str = "type.googleapis.com/";

fn text(s: &Option<String>) -> String {
    s.clone().unwrap_or_default()
}

fn am(code: i16) -> Option<pb::AbstractMessage> {
    Some(pb::AbstractMessage {
        message_type: i32::from(code),
    })
}

fn tx_req(code: i16) -> Option<pb::AbstractTransactionRequest> {
    Some(pb::AbstractTransactionRequest {
        abstract_message: am(code),
    })
}

fn tx_resp(
    code: i16,
    r: &TransactionResult,
) -> Result<Option<pb::AbstractTransactionResponse>, ProtoError> {
    Ok(Some(pb::AbstractTransactionResponse {
        abstract_result_message: Some(pb::AbstractResultMessage {
            abstract_message: am(code),
            result_code: i32::from(r.code.code()),
            msg: text(&r.message),
        }),
        transaction_exception_code: exception_to(r.exception)?,
    }))
}

/// The `AbstractIdentifyRequest` of a registration: all of the TM's (and the RM's but
/// for its resource ids, see
/// [`RegisterRmRequest::identify`](crate::message::RegisterRmRequest::identify)).
fn identify(code: i16, r: &RegisterTmRequest) -> Option<pb::AbstractIdentifyRequest> {
    Some(pb::AbstractIdentifyRequest {
        abstract_message: am(code),
        version: r.version.clone(),
        application_id: r.application_id.clone(),
        transaction_service_group: r.transaction_service_group.clone(),
        extra_data: text(&r.extra_data),
    })
}

fn register_response(code: i16, r: &RegisterResponse) -> pb::RegisterResponse {
    pb::RegisterResponse {
        abstract_identify_response: Some(pb::AbstractIdentifyResponse {
            abstract_result_message: Some(pb::AbstractResultMessage {
                abstract_message: am(code),
                // What Java's convertor sets when the response has no code of its own.
                result_code: i32::from(r.identified),
                msg: String::new(),
            }),
            version: text(&r.version),
            extra_data: String::new(),
            identified: r.identified,
        }),
    }
}

fn branch_register(
    code: i16,
    b: &BranchRegisterRequest,
) -> Result<pb::BranchRegisterRequest, ProtoError> {
    Ok(pb::BranchRegisterRequest {
        abstract_transaction_request: tx_req(code),
        xid: b.xid.clone(),
        branch_type: branch_type_to(b.branch_type)?,
        resource_id: b.resource_id.clone(),
        lock_key: text(&b.lock_key),
        application_data: text(&b.application_data),
    })
}

fn branch_end(code: i16, b: &BranchEndRequest) -> Result<pb::BranchEndRequest, ProtoError> {
    Ok(pb::BranchEndRequest {
        abstract_branch_end_request: Some(pb::AbstractBranchEndRequest {
            abstract_transaction_request: tx_req(code),
            xid: b.xid.clone(),
            branch_id: b.branch_id,
            branch_type: branch_type_to(b.branch_type)?,
            resource_id: b.resource_id.clone(),
            application_data: text(&b.application_data),
        }),
    })
}

fn branch_end_response(
    code: i16,
    b: &BranchEndResponse,
) -> Result<pb::BranchEndResponse, ProtoError> {
    Ok(pb::BranchEndResponse {
        abstract_branch_end_response: Some(pb::AbstractBranchEndResponse {
            abstract_transaction_response: tx_resp(code, &b.result)?,
            xid: b.xid.clone(),
            branch_id: b.branch_id,
            branch_status: branch_status_to(b.branch_status)?,
        }),
    })
}

fn global_end(code: i16, g: &GlobalEndRequest) -> Option<pb::AbstractGlobalEndRequest> {
    Some(pb::AbstractGlobalEndRequest {
        abstract_transaction_request: tx_req(code),
        xid: g.xid.clone(),
        extra_data: text(&g.extra_data),
    })
}

fn global_end_response(
    code: i16,
    g: &GlobalEndResponse,
) -> Result<pb::GlobalEndResponse, ProtoError> {
    Ok(pb::GlobalEndResponse {
        abstract_global_end_response: Some(pb::AbstractGlobalEndResponse {
            abstract_transaction_response: tx_resp(code, &g.result)?,
            global_status: global_status_to(g.global_status)?,
        }),
    })
}

fn anys(msgs: &[SeataMessage]) -> Result<Vec<Any>, ProtoError> {
    msgs.iter().map(to_any).collect()
}

/// `msg` packed as Java's `Any.pack` packs it.
pub(crate) fn to_any(msg: &SeataMessage) -> Result<Any, ProtoError> {
    let (name, value) = to_proto(msg)?;
    Ok(Any {
        type_url: format!("{TYPE_URL_PREFIX}{}.{name}", super::pb::PACKAGE),
        value,
    })
}

/// The full proto name's last part (`GlobalBeginRequestProto`) and the message's bytes.
pub(crate) fn to_proto(msg: &SeataMessage) -> Result<(&'static str, Vec<u8>), ProtoError> {
    use SeataMessage as M;
    let code = msg.type_code();
    let bytes = match msg {
        M::GlobalBegin(g) => pb::GlobalBeginRequest {
            abstract_transaction_request: tx_req(code),
            timeout: g.timeout_ms,
            transaction_name: text(&g.transaction_name),
        }
        .encode_to_vec(),
        M::GlobalBeginResponse(g) => pb::GlobalBeginResponse {
            abstract_transaction_response: tx_resp(code, &g.result)?,
            xid: text(&g.xid),
            extra_data: text(&g.extra_data),
        }
        .encode_to_vec(),
        M::BranchCommit(b) | M::BranchRollback(b) => branch_end(code, b)?.encode_to_vec(),
        M::BranchCommitResponse(b) | M::BranchRollbackResponse(b) => {
            branch_end_response(code, b)?.encode_to_vec()
        }
        M::GlobalCommit(g) | M::GlobalRollback(g) | M::GlobalStatus(g) => pb::GlobalEndRequest {
            abstract_global_end_request: global_end(code, g),
        }
        .encode_to_vec(),
        M::GlobalCommitResponse(g)
        | M::GlobalRollbackResponse(g)
        | M::GlobalStatusResponse(g)
        | M::GlobalReportResponse(g) => global_end_response(code, g)?.encode_to_vec(),
        M::GlobalReport(g) => pb::GlobalReportRequest {
            abstract_global_end_request: global_end(
                code,
                &GlobalEndRequest {
                    xid: g.xid.clone(),
                    extra_data: g.extra_data.clone(),
                },
            ),
            global_status: match g.global_status {
                Some(s) => global_status_to(s)?,
                None => 0,
            },
        }
        .encode_to_vec(),
        M::BranchRegister(b) => branch_register(code, b)?.encode_to_vec(),
        M::BranchRegisterResponse(b) => pb::BranchRegisterResponse {
            abstract_transaction_response: tx_resp(code, &b.result)?,
            branch_id: b.branch_id,
        }
        .encode_to_vec(),
        M::BranchReport(b) => pb::BranchReportRequest {
            abstract_transaction_request: tx_req(code),
            xid: b.xid.clone(),
            branch_id: b.branch_id,
            resource_id: text(&b.resource_id),
            status: branch_status_to(b.status)?,
            application_data: text(&b.application_data),
            branch_type: branch_type_to(b.branch_type)?,
        }
        .encode_to_vec(),
        M::BranchReportResponse(b) => pb::BranchReportResponse {
            abstract_transaction_response: tx_resp(code, &b.result)?,
        }
        .encode_to_vec(),
        M::GlobalLockQuery(b) => pb::GlobalLockQueryRequest {
            branch_register_request: Some(branch_register(code, b)?),
        }
        .encode_to_vec(),
        M::GlobalLockQueryResponse(g) => pb::GlobalLockQueryResponse {
            abstract_transaction_response: tx_resp(code, &g.result)?,
            lockable: g.lockable,
        }
        .encode_to_vec(),
        M::Merged(m) => pb::MergedWarpMessage {
            abstract_message: am(code),
            msgs: anys(&m.msgs)?,
            msg_ids: m.msg_ids.clone(),
        }
        .encode_to_vec(),
        M::MergeResult(m) => pb::MergedResultMessage {
            abstract_message: am(code),
            msgs: anys(&m.msgs)?,
        }
        .encode_to_vec(),
        M::BatchResult(b) => pb::BatchResultMessage {
            abstract_message: am(code),
            result_messages: anys(&b.results)?,
            msg_ids: b.msg_ids.clone(),
        }
        .encode_to_vec(),
        M::RegisterTm(r) => pb::RegisterTmRequest {
            abstract_identify_request: identify(code, r),
        }
        .encode_to_vec(),
        M::RegisterRm(r) | M::UnregisterRm(r) => pb::RegisterRmRequest {
            abstract_identify_request: identify(code, &r.identify()),
            resource_ids: text(&r.resource_ids),
        }
        .encode_to_vec(),
        M::RegisterTmResponse(r) | M::RegisterRmResponse(r) | M::UnregisterRmResponse(r) => {
            register_response(code, r).encode_to_vec()
        }
        M::UndoLogDelete(u) => pb::UndoLogDeleteRequest {
            abstract_transaction_request: tx_req(code),
            resource_id: u.resource_id.clone(),
            save_days: i32::from(u.save_days),
            branch_type: branch_type_to(u.branch_type)?,
        }
        .encode_to_vec(),
    };
    Ok((proto_name(msg), bytes))
}

/// The proto message's name for `msg` (without the package).
pub(crate) fn proto_name(msg: &SeataMessage) -> &'static str {
    use SeataMessage as M;
    match msg {
        M::GlobalBegin(_) => "GlobalBeginRequestProto",
        M::GlobalBeginResponse(_) => "GlobalBeginResponseProto",
        M::BranchCommit(_) => "BranchCommitRequestProto",
        M::BranchCommitResponse(_) => "BranchCommitResponseProto",
        M::BranchRollback(_) => "BranchRollbackRequestProto",
        M::BranchRollbackResponse(_) => "BranchRollbackResponseProto",
        M::GlobalCommit(_) => "GlobalCommitRequestProto",
        M::GlobalCommitResponse(_) => "GlobalCommitResponseProto",
        M::GlobalRollback(_) => "GlobalRollbackRequestProto",
        M::GlobalRollbackResponse(_) => "GlobalRollbackResponseProto",
        M::BranchRegister(_) => "BranchRegisterRequestProto",
        M::BranchRegisterResponse(_) => "BranchRegisterResponseProto",
        M::BranchReport(_) => "BranchReportRequestProto",
        M::BranchReportResponse(_) => "BranchReportResponseProto",
        M::GlobalStatus(_) => "GlobalStatusRequestProto",
        M::GlobalStatusResponse(_) => "GlobalStatusResponseProto",
        M::GlobalReport(_) => "GlobalReportRequestProto",
        M::GlobalReportResponse(_) => "GlobalReportResponseProto",
        M::GlobalLockQuery(_) => "GlobalLockQueryRequestProto",
        M::GlobalLockQueryResponse(_) => "GlobalLockQueryResponseProto",
        M::Merged(_) => "MergedWarpMessageProto",
        M::MergeResult(_) => "MergedResultMessageProto",
        M::RegisterTm(_) => "RegisterTMRequestProto",
        M::RegisterTmResponse(_) => "RegisterTMResponseProto",
        M::RegisterRm(_) => "RegisterRMRequestProto",
        M::RegisterRmResponse(_) => "RegisterRMResponseProto",
        M::UnregisterRm(_) => "UnregisterRMRequestProto",
        M::UnregisterRmResponse(_) => "UnregisterRMResponseProto",
        M::UndoLogDelete(_) => "UndoLogDeleteRequestProto",
        M::BatchResult(_) => "BatchResultMessageProto",
    }
}
