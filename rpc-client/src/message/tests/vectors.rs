//! One byte vector per message, from docs/seata-messages.md (derived from Seata Java's
//! codec sources, not from this encoder), and the values they are built from.

use super::super::*;

pub(super) fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

pub(super) const XID: &str = "127.0.0.1:8091:2612341069705662465";
pub(super) const BID: i64 = 2612341069705662466;
pub(super) const RES: &str = "jdbc:mysql://127.0.0.1:3306/db";
pub(super) const LK: &str = "t_order:1,2";
pub(super) const AD: &str = "{\"k\":\"v\"}";

pub(super) fn register_req() -> BranchRegisterRequest {
    BranchRegisterRequest {
        xid: XID.into(),
        branch_type: BranchType::AT,
        resource_id: RES.into(),
        lock_key: Some(LK.into()),
        application_data: None,
    }
}

pub(super) fn ok<T>(f: impl FnOnce(TransactionResult) -> T) -> T {
    f(TransactionResult::success())
}

/// (what, body hex from the doc, the message).
pub(in crate::message) fn vectors() -> Vec<(&'static str, &'static str, SeataMessage)> {
    use SeataMessage as M;
    let end = |s: GlobalStatus| GlobalEndResponse::success(s);
    vec![
        (
            "6.1 GlobalBeginRequest",
            "00010000ea60000c6f726465722d637265617465",
            M::GlobalBegin(GlobalBeginRequest {
                timeout_ms: 60000,
                transaction_name: Some("order-create".into()),
            }),
        ),
        (
            "6.1 GlobalBeginResponse",
            "0002010000223132372e302e302e313a383039313a323631323334313036393730353636323436350000",
            M::GlobalBeginResponse(ok(|result| GlobalBeginResponse {
                result,
                xid: Some(XID.into()),
                extra_data: None,
            })),
        ),
        (
            "6.1 GlobalBeginResponse, failed",
            "00020000225472616e73616374696f6e457863657074696f6e5b626567696e206661696c65645d0100000000",
            M::GlobalBeginResponse(GlobalBeginResponse {
                result: TransactionResult::failed(
                    TransactionExceptionCode::BeginFailed,
                    "TransactionException[begin failed]",
                ),
                xid: None,
                extra_data: None,
            }),
        ),
        (
            "6.2 BranchCommitRequest",
            "000300223132372e302e302e313a383039313a323631323334313036393730353636323436352440e65cb3f8500200001e6a6462633a6d7973716c3a2f2f3132372e302e302e313a333330362f6462000000097b226b223a2276227d",
            M::BranchCommit(BranchEndRequest {
                xid: XID.into(),
                branch_id: BID,
                branch_type: BranchType::AT,
                resource_id: RES.into(),
                application_data: Some(AD.into()),
            }),
        ),
        (
            "6.2 BranchCommitResponse",
            "0004010000223132372e302e302e313a383039313a323631323334313036393730353636323436352440e65cb3f8500205",
            M::BranchCommitResponse(ok(|result| BranchEndResponse {
                result,
                xid: XID.into(),
                branch_id: BID,
                branch_status: BranchStatus::PhaseTwoCommitted,
            })),
        ),
        (
            "6.3 BranchRollbackRequest",
            "000500223132372e302e302e313a383039313a323631323334313036393730353636323436352440e65cb3f8500201001e6a6462633a6d7973716c3a2f2f3132372e302e302e313a333330362f646200000000",
            M::BranchRollback(BranchEndRequest {
                xid: XID.into(),
                branch_id: BID,
                branch_type: BranchType::TCC,
                resource_id: RES.into(),
                application_data: None,
            }),
        ),
        (
            "6.3 BranchRollbackResponse",
            "0006010000223132372e302e302e313a383039313a323631323334313036393730353636323436352440e65cb3f8500208",
            M::BranchRollbackResponse(ok(|result| BranchEndResponse {
                result,
                xid: XID.into(),
                branch_id: BID,
                branch_status: BranchStatus::PhaseTwoRollbacked,
            })),
        ),
        (
            "6.4 GlobalCommitRequest",
            "000700223132372e302e302e313a383039313a323631323334313036393730353636323436350000",
            M::GlobalCommit(GlobalEndRequest::new(XID)),
        ),
        (
            "6.4 GlobalCommitResponse",
            "0008010009",
            M::GlobalCommitResponse(end(GlobalStatus::Committed)),
        ),
        (
            "6.4 GlobalCommitResponse, failed",
            "000800001f5472616e73616374696f6e457863657074696f6e5b6e6f742065786973745d0a0f",
            M::GlobalCommitResponse(GlobalEndResponse {
                result: TransactionResult::failed(
                    TransactionExceptionCode::GlobalTransactionNotExist,
                    "TransactionException[not exist]",
                ),
                global_status: GlobalStatus::Finished,
            }),
        ),
        (
            "6.5 GlobalRollbackRequest",
            "000900223132372e302e302e313a383039313a323631323334313036393730353636323436350000",
            M::GlobalRollback(GlobalEndRequest::new(XID)),
        ),
        (
            "6.5 GlobalRollbackResponse",
            "000a01000b",
            M::GlobalRollbackResponse(end(GlobalStatus::Rollbacked)),
        ),
        (
            "6.6 BranchRegisterRequest",
            "000b00223132372e302e302e313a383039313a3236313233343130363937303536363234363500001e6a6462633a6d7973716c3a2f2f3132372e302e302e313a333330362f64620000000b745f6f726465723a312c3200000000",
            M::BranchRegister(register_req()),
        ),
        (
            "6.6 BranchRegisterResponse",
            "000c01002440e65cb3f85002",
            M::BranchRegisterResponse(ok(|result| BranchRegisterResponse {
                result,
                branch_id: BID,
            })),
        ),
        (
            "6.6 BranchRegisterResponse, lock conflict",
            "000c000000020000000000000000",
            M::BranchRegisterResponse(BranchRegisterResponse {
                result: TransactionResult {
                    code: ResultCode::Failed,
                    exception: TransactionExceptionCode::LockKeyConflict,
                    message: None,
                },
                branch_id: 0,
            }),
        ),
        (
            "6.7 BranchReportRequest",
            "000d00223132372e302e302e313a383039313a323631323334313036393730353636323436352440e65cb3f8500202001e6a6462633a6d7973716c3a2f2f3132372e302e302e313a333330362f6462000000097b226b223a2276227d00",
            M::BranchReport(BranchReportRequest {
                xid: XID.into(),
                branch_id: BID,
                status: BranchStatus::PhaseOneDone,
                resource_id: Some(RES.into()),
                application_data: Some(AD.into()),
                branch_type: BranchType::AT,
            }),
        ),
        (
            "6.7 BranchReportResponse",
            "000e0100",
            M::BranchReportResponse(BranchReportResponse::default()),
        ),
        (
            "6.8 GlobalStatusRequest",
            "000f00223132372e302e302e313a383039313a323631323334313036393730353636323436350000",
            M::GlobalStatus(GlobalEndRequest::new(XID)),
        ),
        (
            "6.8 GlobalStatusResponse",
            "0010010001",
            M::GlobalStatusResponse(end(GlobalStatus::Begin)),
        ),
        (
            "6.9 GlobalReportRequest",
            "001100223132372e302e302e313a383039313a32363132333431303639373035363632343635000009",
            M::GlobalReport(GlobalReportRequest {
                xid: XID.into(),
                extra_data: None,
                global_status: Some(GlobalStatus::Committed),
            }),
        ),
        (
            "6.9 GlobalReportRequest, null status",
            "001100223132372e302e302e313a383039313a323631323334313036393730353636323436350000ff",
            M::GlobalReport(GlobalReportRequest {
                xid: XID.into(),
                extra_data: None,
                global_status: None,
            }),
        ),
        (
            "6.9 GlobalReportResponse",
            "0012010009",
            M::GlobalReportResponse(end(GlobalStatus::Committed)),
        ),
        (
            "6.10 GlobalLockQueryRequest",
            "001500223132372e302e302e313a383039313a3236313233343130363937303536363234363500001e6a6462633a6d7973716c3a2f2f3132372e302e302e313a333330362f64620000000b745f6f726465723a312c3200000000",
            M::GlobalLockQuery(register_req()),
        ),
        (
            "6.10 GlobalLockQueryResponse",
            "001601000001",
            M::GlobalLockQueryResponse(ok(|result| GlobalLockQueryResponse {
                result,
                lockable: true,
            })),
        ),
        (
            "6.11 UndoLogDeleteRequest",
            "006f00001e6a6462633a6d7973716c3a2f2f3132372e302e302e313a333330362f64620007",
            M::UndoLogDelete(UndoLogDeleteRequest {
                branch_type: BranchType::AT,
                resource_id: RES.into(),
                save_days: 7,
            }),
        ),
        (
            "6.13 RegisterTMRequest",
            "00650005322e332e300003617070001064656661756c745f74785f67726f75700000",
            M::RegisterTm(RegisterTmRequest {
                version: "2.3.0".into(),
                application_id: "app".into(),
                transaction_service_group: "default_tx_group".into(),
                extra_data: None,
            }),
        ),
        (
            "6.13 RegisterRMRequest",
            "00670005322e332e300003617070001064656661756c745f74785f67726f757000000000001e6a6462633a6d7973716c3a2f2f3132372e302e302e313a333330362f6462",
            M::RegisterRm(RegisterRmRequest {
                version: "2.3.0".into(),
                application_id: "app".into(),
                transaction_service_group: "default_tx_group".into(),
                extra_data: None,
                resource_ids: Some(RES.into()),
            }),
        ),
        (
            "6.14 RegisterTMResponse",
            "0066010005322e332e30",
            M::RegisterTmResponse(RegisterResponse {
                identified: true,
                version: Some("2.3.0".into()),
            }),
        ),
        (
            "6.14 RegisterRMResponse",
            "0068010005322e332e30",
            M::RegisterRmResponse(RegisterResponse {
                identified: true,
                version: Some("2.3.0".into()),
            }),
        ),
        // Seata 2.7's UnregisterRMRequestCodec writes a RegisterRM's fields under type
        // 105; UnregisterRMResponseCodec the old identify layout under 106.
        (
            "UnregisterRMRequest",
            "00690005322e332e300003617070001064656661756c745f74785f67726f757000000000001e6a6462633a6d7973716c3a2f2f3132372e302e302e313a333330362f6462",
            M::UnregisterRm(RegisterRmRequest {
                version: "2.3.0".into(),
                application_id: "app".into(),
                transaction_service_group: "default_tx_group".into(),
                extra_data: None,
                resource_ids: Some(RES.into()),
            }),
        ),
        (
            "UnregisterRMResponse",
            "006a010005322e332e30",
            M::UnregisterRmResponse(RegisterResponse {
                identified: true,
                version: Some("2.3.0".into()),
            }),
        ),
        (
            "7.1 MergedWarpMessage",
            "003b000000be0002000b00223132372e302e302e313a383039313a3236313233343130363937303536363234363500001e6a6462633a6d7973716c3a2f2f3132372e302e302e313a333330362f64620000000b745f6f726465723a312c3200000000001500223132372e302e302e313a383039313a3236313233343130363937303536363234363500001e6a6462633a6d7973716c3a2f2f3132372e302e302e313a333330362f64620000000b745f6f726465723a312c32000000000000000500000006",
            M::Merged(MergedWarpMessage {
                msgs: vec![
                    M::BranchRegister(register_req()),
                    M::GlobalLockQuery(register_req()),
                ],
                msg_ids: vec![5, 6],
            }),
        ),
        (
            "7.2 MergeResultMessage",
            "003c000000140002000c01002440e65cb3f85002001601000001",
            M::MergeResult(MergeResultMessage {
                msgs: merge_results(),
            }),
        ),
        (
            "7.3 BatchResultMessage",
            "00790000001c0002000c01002440e65cb3f850020016010000010000000500000006",
            M::BatchResult(BatchResultMessage {
                results: merge_results(),
                msg_ids: vec![5, 6],
            }),
        ),
    ]
}

pub(super) fn merge_results() -> Vec<SeataMessage> {
    vec![
        SeataMessage::BranchRegisterResponse(ok(|result| BranchRegisterResponse {
            result,
            branch_id: BID,
        })),
        SeataMessage::GlobalLockQueryResponse(ok(|result| GlobalLockQueryResponse {
            result,
            lockable: true,
        })),
    ]
}
