#!/usr/bin/env bash
# Prints the byte vectors rpc-client's protobuf tests compare against
# (rpc-client/src/message/protobuf/tests.rs, rpc-client/src/grpc/tests.rs), made by `protoc --encode` from Seata's
# own .proto files (rpc-client/tests/seata-protos/seata.proto: those of
# apache/incubator-seata 2.x's serializer/seata-serializer-protobuf and core's
# grpcMessage.proto, gathered in one file of the same package). The vectors
# are independent of meshline's prost structs: if those drift from Seata's protos, the
# tests fail. Needs protoc (apt-get install protobuf-compiler); the build never does.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
protos="$here/rpc-client/tests/seata-protos"
pkg=org.apache.seata.protocol.protobuf
url=type.googleapis.com/$pkg

# name|message type|text format
vectors=(
"GLOBAL_BEGIN|GlobalBeginRequestProto|abstractTransactionRequest { abstractMessage { messageType: TYPE_GLOBAL_BEGIN } } timeout: 60000 transactionName: \"order\""
"GLOBAL_BEGIN_RESPONSE|GlobalBeginResponseProto|abstractTransactionResponse { abstractResultMessage { AbstractMessage { messageType: TYPE_GLOBAL_BEGIN_RESULT } resultCode: Success } } xid: \"10.0.0.1:8091:7\""
"GLOBAL_COMMIT_FAILED|GlobalCommitResponseProto|abstractGlobalEndResponse { abstractTransactionResponse { abstractResultMessage { AbstractMessage { messageType: TYPE_GLOBAL_COMMIT_RESULT } resultCode: Failed msg: \"store down\" } transactionExceptionCode: FailedStore } globalStatus: Begin }"
"GLOBAL_STATUS|GlobalStatusRequestProto|abstractGlobalEndRequest { abstractTransactionRequest { abstractMessage { messageType: TYPE_GLOBAL_STATUS } } xid: \"10.0.0.1:8091:7\" }"
"BRANCH_REGISTER|BranchRegisterRequestProto|abstractTransactionRequest { abstractMessage { messageType: TYPE_BRANCH_REGISTER } } xid: \"10.0.0.1:8091:7\" branchType: TCC resourceId: \"inventory\" lockKey: \"stock:1\" applicationData: \"{}\""
"BRANCH_REGISTER_CONFLICT|BranchRegisterResponseProto|abstractTransactionResponse { abstractResultMessage { AbstractMessage { messageType: TYPE_BRANCH_REGISTER_RESULT } resultCode: Failed msg: \"lock\" } transactionExceptionCode: LockKeyConflict }"
"BRANCH_COMMIT|BranchCommitRequestProto|abstractBranchEndRequest { abstractTransactionRequest { abstractMessage { messageType: TYPE_BRANCH_COMMIT } } xid: \"10.0.0.1:8091:7\" branchId: 42 branchType: AT resourceId: \"jdbc:mysql://db/orders\" }"
"BRANCH_COMMIT_RESPONSE|BranchCommitResponseProto|abstractBranchEndResponse { abstractTransactionResponse { abstractResultMessage { AbstractMessage { messageType: TYPE_BRANCH_COMMIT_RESULT } resultCode: Success } } xid: \"10.0.0.1:8091:7\" branchId: 42 branchStatus: PhaseTwo_Committed }"
"BRANCH_REPORT|BranchReportRequestProto|abstractTransactionRequest { abstractMessage { messageType: TYPE_BRANCH_STATUS_REPORT } } xid: \"10.0.0.1:8091:7\" branchId: 42 resourceId: \"inventory\" status: PhaseOne_Failed branchType: SAGA"
"REGISTER_RM|RegisterRMRequestProto|abstractIdentifyRequest { abstractMessage { messageType: TYPE_REG_RM } version: \"2.7.0\" applicationId: \"orders\" transactionServiceGroup: \"default_tx_group\" } resourceIds: \"a,b\""
"REGISTER_TM_RESPONSE|RegisterTMResponseProto|abstractIdentifyResponse { abstractResultMessage { AbstractMessage { messageType: TYPE_REG_CLT_RESULT } resultCode: Success } version: \"2.7.0\" identified: true }"
"UNDO_LOG_DELETE|UndoLogDeleteRequestProto|abstractTransactionRequest { abstractMessage { messageType: TYPE_UNDO_LOG_DELETE } } resourceId: \"jdbc:mysql://db/orders\" saveDays: 7 branchType: AT"
"GRPC_MESSAGE|GrpcMessageProto|id: 7 messageType: 0 headMap { key: \"codec-type\" value: \"40\" } body: \"\\x0a\\x01\\x41\""
"MERGED|MergedWarpMessageProto|abstractMessage { messageType: TYPE_SEATA_MERGE } msgs { [$url.GlobalBeginRequestProto] { abstractTransactionRequest { abstractMessage { messageType: TYPE_GLOBAL_BEGIN } } timeout: 1000 } } msgs { [$url.GlobalStatusRequestProto] { abstractGlobalEndRequest { abstractTransactionRequest { abstractMessage { messageType: TYPE_GLOBAL_STATUS } } xid: \"x:1:2\" } } } msgIds: 5 msgIds: 6"
)

imports=(seata.proto)
for v in "${vectors[@]}"; do
  IFS='|' read -r name type text <<<"$v"
  hex=$(printf '%s' "$text" | protoc -I "$protos" -I /usr/include --encode="$pkg.$type" "${imports[@]}" | od -An -v -tx1 | tr -d ' \n')
  echo "$name $hex"
done
# The gRPC body: the GlobalBegin vector's message packed in an Any.
any_text="[$url.GlobalBeginRequestProto] { abstractTransactionRequest { abstractMessage { messageType: TYPE_GLOBAL_BEGIN } } timeout: 60000 transactionName: \"order\" }"
hex=$(printf '%s' "$any_text" | protoc -I "$protos" -I /usr/include --encode=google.protobuf.Any google/protobuf/any.proto "${imports[@]}" | od -An -v -tx1 | tr -d ' \n')
echo "ANY_GLOBAL_BEGIN $hex"
