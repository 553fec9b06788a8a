//! Seata's protobuf messages (`serializer/seata-serializer-protobuf`'s
//! `org.apache.seata.protocol.protobuf` package), written with prost's derive so that
//! no `protoc` runs at build time. Field numbers and types are those of Seata's
//! `.proto` files; the tests check the bytes against vectors `protoc` made from them
//! (`scripts/seata-proto-vectors.sh`). Enums are kept as their numbers (`i32`): the
//! numbers are the proto's own, not v1's, and are mapped by name in `enums`.

use prost_types::Any;

/// The package every message's full name is in.
pub(crate) const PACKAGE: &str = "org.apache.seata.protocol.protobuf";

/// `AbstractMessageProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AbstractMessage {
    #[prost(int32, tag = "1")]
    pub(crate) message_type: i32,
}

/// `AbstractResultMessageProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AbstractResultMessage {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_message: Option<AbstractMessage>,
    #[prost(int32, tag = "2")]
    pub(crate) result_code: i32,
    #[prost(string, tag = "3")]
    pub(crate) msg: String,
}

/// `AbstractTransactionRequestProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AbstractTransactionRequest {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_message: Option<AbstractMessage>,
}

/// `AbstractTransactionResponseProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AbstractTransactionResponse {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_result_message: Option<AbstractResultMessage>,
    #[prost(int32, tag = "2")]
    pub(crate) transaction_exception_code: i32,
}

/// `AbstractIdentifyRequestProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AbstractIdentifyRequest {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_message: Option<AbstractMessage>,
    #[prost(string, tag = "2")]
    pub(crate) version: String,
    #[prost(string, tag = "3")]
    pub(crate) application_id: String,
    #[prost(string, tag = "4")]
    pub(crate) transaction_service_group: String,
    #[prost(string, tag = "5")]
    pub(crate) extra_data: String,
}

/// `AbstractIdentifyResponseProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AbstractIdentifyResponse {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_result_message: Option<AbstractResultMessage>,
    #[prost(string, tag = "2")]
    pub(crate) version: String,
    #[prost(string, tag = "3")]
    pub(crate) extra_data: String,
    #[prost(bool, tag = "4")]
    pub(crate) identified: bool,
}

/// `RegisterTMRequestProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RegisterTmRequest {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_identify_request: Option<AbstractIdentifyRequest>,
}

/// `RegisterRMRequestProto`, and `UnregisterRMRequestProto` (the same fields).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RegisterRmRequest {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_identify_request: Option<AbstractIdentifyRequest>,
    #[prost(string, tag = "2")]
    pub(crate) resource_ids: String,
}

/// `RegisterTMResponseProto`, `RegisterRMResponseProto`, `UnregisterRMResponseProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RegisterResponse {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_identify_response: Option<AbstractIdentifyResponse>,
}

/// `GlobalBeginRequestProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct GlobalBeginRequest {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_transaction_request: Option<AbstractTransactionRequest>,
    #[prost(int32, tag = "2")]
    pub(crate) timeout: i32,
    #[prost(string, tag = "3")]
    pub(crate) transaction_name: String,
}

/// `GlobalBeginResponseProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct GlobalBeginResponse {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_transaction_response: Option<AbstractTransactionResponse>,
    #[prost(string, tag = "2")]
    pub(crate) xid: String,
    #[prost(string, tag = "3")]
    pub(crate) extra_data: String,
}

/// `AbstractGlobalEndRequestProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AbstractGlobalEndRequest {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_transaction_request: Option<AbstractTransactionRequest>,
    #[prost(string, tag = "2")]
    pub(crate) xid: String,
    #[prost(string, tag = "3")]
    pub(crate) extra_data: String,
}

/// `GlobalCommitRequestProto`, `GlobalRollbackRequestProto`, `GlobalStatusRequestProto`
/// (each a wrapper of the same one field).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct GlobalEndRequest {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_global_end_request: Option<AbstractGlobalEndRequest>,
}

/// `GlobalReportRequestProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct GlobalReportRequest {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_global_end_request: Option<AbstractGlobalEndRequest>,
    #[prost(int32, tag = "2")]
    pub(crate) global_status: i32,
}

/// `AbstractGlobalEndResponseProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AbstractGlobalEndResponse {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_transaction_response: Option<AbstractTransactionResponse>,
    #[prost(int32, tag = "2")]
    pub(crate) global_status: i32,
}

/// `GlobalCommitResponseProto`, `GlobalRollbackResponseProto`,
/// `GlobalStatusResponseProto`, `GlobalReportResponseProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct GlobalEndResponse {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_global_end_response: Option<AbstractGlobalEndResponse>,
}

/// `BranchRegisterRequestProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct BranchRegisterRequest {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_transaction_request: Option<AbstractTransactionRequest>,
    #[prost(string, tag = "2")]
    pub(crate) xid: String,
    #[prost(int32, tag = "3")]
    pub(crate) branch_type: i32,
    #[prost(string, tag = "4")]
    pub(crate) resource_id: String,
    #[prost(string, tag = "5")]
    pub(crate) lock_key: String,
    #[prost(string, tag = "6")]
    pub(crate) application_data: String,
}

/// `BranchRegisterResponseProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct BranchRegisterResponse {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_transaction_response: Option<AbstractTransactionResponse>,
    #[prost(int64, tag = "2")]
    pub(crate) branch_id: i64,
}

/// `BranchReportRequestProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct BranchReportRequest {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_transaction_request: Option<AbstractTransactionRequest>,
    #[prost(string, tag = "2")]
    pub(crate) xid: String,
    #[prost(int64, tag = "3")]
    pub(crate) branch_id: i64,
    #[prost(string, tag = "4")]
    pub(crate) resource_id: String,
    #[prost(int32, tag = "5")]
    pub(crate) status: i32,
    #[prost(string, tag = "6")]
    pub(crate) application_data: String,
    #[prost(int32, tag = "7")]
    pub(crate) branch_type: i32,
}

/// `BranchReportResponseProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct BranchReportResponse {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_transaction_response: Option<AbstractTransactionResponse>,
}

/// `GlobalLockQueryRequestProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct GlobalLockQueryRequest {
    #[prost(message, optional, tag = "1")]
    pub(crate) branch_register_request: Option<BranchRegisterRequest>,
}

/// `GlobalLockQueryResponseProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct GlobalLockQueryResponse {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_transaction_response: Option<AbstractTransactionResponse>,
    #[prost(bool, tag = "2")]
    pub(crate) lockable: bool,
}

/// `AbstractBranchEndRequestProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AbstractBranchEndRequest {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_transaction_request: Option<AbstractTransactionRequest>,
    #[prost(string, tag = "2")]
    pub(crate) xid: String,
    #[prost(int64, tag = "3")]
    pub(crate) branch_id: i64,
    #[prost(int32, tag = "4")]
    pub(crate) branch_type: i32,
    #[prost(string, tag = "5")]
    pub(crate) resource_id: String,
    #[prost(string, tag = "6")]
    pub(crate) application_data: String,
}

/// `BranchCommitRequestProto`, `BranchRollbackRequestProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct BranchEndRequest {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_branch_end_request: Option<AbstractBranchEndRequest>,
}

/// `AbstractBranchEndResponseProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AbstractBranchEndResponse {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_transaction_response: Option<AbstractTransactionResponse>,
    #[prost(string, tag = "2")]
    pub(crate) xid: String,
    #[prost(int64, tag = "3")]
    pub(crate) branch_id: i64,
    #[prost(int32, tag = "4")]
    pub(crate) branch_status: i32,
}

/// `BranchCommitResponseProto`, `BranchRollbackResponseProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct BranchEndResponse {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_branch_end_response: Option<AbstractBranchEndResponse>,
}

/// `UndoLogDeleteRequestProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct UndoLogDeleteRequest {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_transaction_request: Option<AbstractTransactionRequest>,
    #[prost(string, tag = "2")]
    pub(crate) resource_id: String,
    #[prost(int32, tag = "3")]
    pub(crate) save_days: i32,
    #[prost(int32, tag = "4")]
    pub(crate) branch_type: i32,
}

/// `MergedWarpMessageProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct MergedWarpMessage {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_message: Option<AbstractMessage>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) msgs: Vec<Any>,
    #[prost(int32, repeated, tag = "3")]
    pub(crate) msg_ids: Vec<i32>,
}

/// `MergedResultMessageProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct MergedResultMessage {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_message: Option<AbstractMessage>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) msgs: Vec<Any>,
}

/// `BatchResultMessageProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct BatchResultMessage {
    #[prost(message, optional, tag = "1")]
    pub(crate) abstract_message: Option<AbstractMessage>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) result_messages: Vec<Any>,
    #[prost(int32, repeated, tag = "3")]
    pub(crate) msg_ids: Vec<i32>,
}
