//! One byte vector per message, from docs/seata-messages.md (derived from Seata Java's
//! codec sources, not from this encoder), checked both ways; the registration frames
//! of docs/seata-compat.md §4.3; malformed bodies naming their field; and a proptest
//! over every decoder.

use super::*;
use crate::codec::{CODEC_SEATA, COMPRESSOR_NONE, FrameCodec, HeadMap};
use tokio_util::codec::{Decoder, Encoder};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const XID: &str = "127.0.0.1:8091:2612341069705662465";
const BID: i64 = 2612341069705662466;
const RES: &str = "jdbc:mysql://127.0.0.1:3306/db";
const LK: &str = "t_order:1,2";
const AD: &str = "{\"k\":\"v\"}";

fn register_req() -> BranchRegisterRequest {
    BranchRegisterRequest {
        xid: XID.into(),
        branch_type: BranchType::AT,
        resource_id: RES.into(),
        lock_key: Some(LK.into()),
        application_data: None,
    }
}

fn ok<T>(f: impl FnOnce(TransactionResult) -> T) -> T {
    f(TransactionResult::success())
}

/// (what, body hex from the doc, the message).
fn vectors() -> Vec<(&'static str, &'static str, SeataMessage)> {
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

fn merge_results() -> Vec<SeataMessage> {
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

#[test]
fn every_message_matches_its_vector_both_ways() {
    let all = vectors();
    let mut codes: Vec<i16> = all.iter().map(|(_, _, m)| m.type_code()).collect();
    codes.sort_unstable();
    codes.dedup();
    // Every body type Seata defines (all but the heartbeat, which has no body).
    assert_eq!(codes.len(), 30, "a message without a vector: {codes:?}");
    for (what, wire, msg) in all {
        let wire = hex(wire);
        assert_eq!(msg.encode().unwrap(), &wire[..], "{what}: encode");
        assert_eq!(
            SeataMessage::decode(&Bytes::from(wire.clone())).unwrap(),
            msg,
            "{what}: decode"
        );
        assert_eq!(
            wire[..2],
            msg.type_code().to_be_bytes(),
            "{what}: type code"
        );
    }
}

fn frame(t: MessageType, id: u32, msg: &SeataMessage) -> Vec<u8> {
    let f = Frame {
        msg_type: t,
        codec: CODEC_SEATA,
        compressor: COMPRESSOR_NONE,
        request_id: id,
        head: HeadMap::new(),
        body: msg.encode().unwrap(),
    };
    let mut b = BytesMut::new();
    FrameCodec::default().encode(f, &mut b).unwrap();
    b.to_vec()
}

fn round_trip(wire: &[u8]) -> SeataMessage {
    let mut b = BytesMut::from(wire);
    let f = FrameCodec::default().decode(&mut b).unwrap().unwrap();
    SeataMessage::decode(&f.body).unwrap()
}

/// docs/seata-compat.md §4.3 and docs/seata-messages.md §8: whole frames.
#[test]
fn whole_frames_match_their_vectors() {
    let v = vectors();
    let find = |what: &str| v.iter().find(|(w, _, _)| *w == what).unwrap().2.clone();
    let cases = [
        (
            "dada010000003200100001000000000100650005322e332e300003617070001064656661756c745f74785f67726f75700000",
            MessageType::Request,
            1,
            find("6.13 RegisterTMRequest"),
        ),
        (
            "dada010000005400100001000000000200670005322e332e300003617070001064656661756c745f74785f67726f757000000000001e6a6462633a6d7973716c3a2f2f3132372e302e302e313a333330362f6462",
            MessageType::Request,
            2,
            find("6.13 RegisterRMRequest"),
        ),
        (
            "dada010000001a0010010100000000010066010005322e332e30",
            MessageType::Response,
            1,
            find("6.14 RegisterTMResponse"),
        ),
        (
            "dada010000002400100001000000000100010000ea60000c6f726465722d637265617465",
            MessageType::Request,
            1,
            find("6.1 GlobalBeginRequest"),
        ),
        (
            "dada010000003200100101000000000700790000001c0002000c01002440e65cb3f850020016010000010000000500000006",
            MessageType::Response,
            7,
            find("7.3 BatchResultMessage"),
        ),
        (
            "dada010000002a001001010000000007003c000000140002000c01002440e65cb3f85002001601000001",
            MessageType::Response,
            7,
            find("7.2 MergeResultMessage"),
        ),
    ];
    for (wire, t, id, msg) in cases {
        let wire = hex(wire);
        assert_eq!(frame(t, id, &msg), wire, "{}", msg.name());
        assert_eq!(round_trip(&wire), msg, "{}", msg.name());
    }
}

#[test]
fn malformed_bodies_name_the_message_and_field() {
    let cases: &[(&str, &str)] = &[
        ("", "truncated at field `typeCode`"),
        (
            "0065",
            "RegisterTMRequest (101): truncated at field `version`",
        ),
        ("00650005322e33", "truncated at field `version`"),
        ("0065000100", "truncated at field `applicationId`"),
        ("006500018000000000000000", "`version` is not UTF-8"),
        ("00650000000000000000ff", "1 unexpected trailing bytes"),
        ("0067000000000000000000", "truncated at field `resourceIds`"),
        (
            "0067000000000000000000000005",
            "truncated at field `resourceIds`",
        ),
        ("0066", "truncated at field `identified`"),
        (
            "0001",
            "GlobalBeginRequest (1): truncated at field `timeout`",
        ),
        (
            "0001 0000ea60 0005 61",
            "truncated at field `transactionName`",
        ),
        ("0002 01", "truncated at field `transactionExceptionCode`"),
        ("0002 02", "field `resultCode` has unknown code 2"),
        (
            "0002 01 18",
            "field `transactionExceptionCode` has unknown code 24",
        ),
        (
            "0008 01 00 12",
            "GlobalCommitResponse (8): field `globalStatus` has unknown code 18",
        ),
        ("000b 0000 04", "field `branchType` has unknown code 4"),
        ("000c 0100 00000000", "truncated at field `branchId`"),
        (
            "000d 0000 0000000000000001 0e",
            "field `status` has unknown code 14",
        ),
        (
            "000d 0000 0000000000000001 05 0000 00000005 61",
            "truncated at field `applicationData`",
        ),
        (
            "0011 0000 0000 20",
            "field `globalStatus` has unknown code 32",
        ),
        ("0016 0100 00", "truncated at field `lockable`"),
        ("006f 00 0000", "truncated at field `saveDays`"),
        ("0013", "unknown seata message type code 19"),
        ("7fff", "unknown seata message type code 32767"),
        ("0078", "unknown seata message type code 120"),
        (
            "003b 00000001",
            "MergedWarpMessage (59): field `length` has impossible value 1",
        ),
        ("003b 00000010 0001", "truncated at field `length`"),
        (
            "003b 00000002 ffff",
            "field `count` has impossible value -1",
        ),
        (
            "003b 00000004 0001 0065",
            "MergedWarpMessage (59) cannot carry RegisterTMRequest (101)",
        ),
        (
            "003b 00000004 0001 003b",
            "cannot carry MergedWarpMessage (59)",
        ),
        (
            "003b 00000004 0001 0063",
            "unknown seata message type code 99",
        ),
        (
            "003b 00000006 0001 0001 0000",
            "GlobalBeginRequest (1): truncated at field `timeout`",
        ),
        (
            "003c 00000004 0001 0001",
            "MergeResultMessage (60) cannot carry GlobalBeginRequest (1)",
        ),
        (
            "0079 00000007 0001 000e 0100 00",
            "BatchResultMessage (121): truncated at field `msgIds`",
        ),
        (
            "003c 00000002 0000 ff",
            "MergeResultMessage (60): 1 unexpected trailing bytes",
        ),
    ];
    for (input, want) in cases {
        let err = SeataMessage::decode(&Bytes::from(hex(input)))
            .expect_err(input)
            .to_string();
        assert!(err.contains(want), "{input}: `{err}` lacks `{want}`");
    }
    // Java treats a negative length as "absent".
    let m = SeataMessage::decode(&Bytes::from(hex("0066 01ffff"))).unwrap();
    assert_eq!(
        m,
        SeataMessage::RegisterTmResponse(RegisterResponse {
            identified: true,
            version: None
        })
    );
    // identified must be exactly 1.
    let m = SeataMessage::decode(&Bytes::from(hex("0068020000"))).unwrap();
    assert!(matches!(
        m,
        SeataMessage::RegisterRmResponse(RegisterResponse {
            identified: false,
            ..
        })
    ));
}

#[test]
fn encoding_refuses_what_java_would_corrupt() {
    let long = "x".repeat(40_000);
    let m = SeataMessage::GlobalCommit(GlobalEndRequest::new(long.clone()));
    assert_eq!(
        m.encode().unwrap_err(),
        MessageError::FieldTooLong {
            field: "xid",
            len: 40_000,
            max: 32767
        }
    );
    // A failed result's message is truncated on a character boundary instead.
    let m = SeataMessage::BranchReportResponse(BranchReportResponse {
        result: TransactionResult::failed(
            TransactionExceptionCode::BranchReportFailed,
            format!("é{long}"),
        ),
    });
    let body = m.encode().unwrap();
    assert_eq!(i16::from_be_bytes([body[3], body[4]]), 32767);
    match SeataMessage::decode(&body).unwrap() {
        SeataMessage::BranchReportResponse(r) => {
            assert_eq!(r.result.message.unwrap().len(), 32767)
        }
        other => panic!("{other:?}"),
    }
    // A success result sends no message (Java writes it only when Failed).
    let mut r = TransactionResult::success();
    r.message = Some("ignored".into());
    let m = SeataMessage::BranchReportResponse(BranchReportResponse { result: r });
    assert_eq!(m.encode().unwrap(), &hex("000e0100")[..]);
    // Envelopes: ids must pair with entries; only transaction messages nest.
    let bad = SeataMessage::BatchResult(BatchResultMessage {
        results: merge_results(),
        msg_ids: vec![1],
    });
    assert_eq!(
        bad.encode().unwrap_err().to_string(),
        "seata message BatchResultMessage (121): 2 entries but 1 msgIds"
    );
    let bad = SeataMessage::Merged(MergedWarpMessage {
        msgs: vec![SeataMessage::RegisterTm(RegisterTmRequest::default())],
        msg_ids: vec![],
    });
    assert!(matches!(
        bad.encode(),
        Err(MessageError::NotNestable { nested: 101, .. })
    ));
}

#[test]
fn merged_answers_split_into_standalone_bodies() {
    let v = vectors();
    let body = |what: &str| Bytes::from(hex(v.iter().find(|(w, _, _)| *w == what).unwrap().1));
    let expected: Vec<Bytes> = merge_results()
        .iter()
        .map(|m| m.encode().unwrap())
        .collect();
    match merge::split_reply(&body("7.2 MergeResultMessage")).unwrap() {
        merge::MergeReply::Positional(parts) => assert_eq!(parts, expected),
        other => panic!("{other:?}"),
    }
    match merge::split_reply(&body("7.3 BatchResultMessage")).unwrap() {
        merge::MergeReply::ById(parts) => {
            assert_eq!(
                parts,
                vec![(5, expected[0].clone()), (6, expected[1].clone())]
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        merge::split_reply(&body("6.4 GlobalCommitResponse")),
        Err(MessageError::UnexpectedType { got: 8, .. })
    ));
    // The writer's merged body is the doc's MergedWarpMessage vector.
    let a = SeataMessage::BranchRegister(register_req())
        .encode()
        .unwrap();
    let b = SeataMessage::GlobalLockQuery(register_req())
        .encode()
        .unwrap();
    let merged = merge::merged_body([(&a, 5u32), (&b, 6u32)].into_iter());
    assert_eq!(&merged[..], &body("7.1 MergedWarpMessage")[..]);
}

// ---- proptest: every decoder, valid and damaged input ----

use proptest::prelude::*;

fn s16() -> impl Strategy<Value = String> {
    "\\PC{0,12}"
}

fn opt16() -> impl Strategy<Value = Option<String>> {
    proptest::option::of("\\PC{1,12}")
}

fn result() -> impl Strategy<Value = TransactionResult> {
    (any::<bool>(), 0u8..24, proptest::option::of("\\PC{1,12}")).prop_map(|(ok, exc, msg)| {
        TransactionResult {
            code: if ok {
                ResultCode::Success
            } else {
                ResultCode::Failed
            },
            exception: TransactionExceptionCode::from_code(exc).unwrap(),
            // Only a failed result carries its message on the wire.
            message: if ok { None } else { msg },
        }
    })
}

fn gstatus() -> impl Strategy<Value = GlobalStatus> {
    (0u8..18).prop_map(|c| GlobalStatus::from_code(c).unwrap())
}

fn bstatus() -> impl Strategy<Value = BranchStatus> {
    (0u8..14).prop_map(|c| BranchStatus::from_code(c).unwrap())
}

fn btype() -> impl Strategy<Value = BranchType> {
    (0u8..4).prop_map(|c| BranchType::from_code(c).unwrap())
}

fn branch_register() -> impl Strategy<Value = BranchRegisterRequest> {
    (s16(), btype(), s16(), opt16(), opt16()).prop_map(|(xid, t, r, l, a)| BranchRegisterRequest {
        xid,
        branch_type: t,
        resource_id: r,
        lock_key: l,
        application_data: a,
    })
}

fn branch_end() -> impl Strategy<Value = BranchEndRequest> {
    (s16(), any::<i64>(), btype(), s16(), opt16()).prop_map(|(xid, id, t, r, a)| BranchEndRequest {
        xid,
        branch_id: id,
        branch_type: t,
        resource_id: r,
        application_data: a,
    })
}

fn branch_end_resp() -> impl Strategy<Value = BranchEndResponse> {
    (result(), s16(), any::<i64>(), bstatus()).prop_map(|(result, xid, id, s)| BranchEndResponse {
        result,
        xid,
        branch_id: id,
        branch_status: s,
    })
}

fn global_end() -> impl Strategy<Value = GlobalEndRequest> {
    (s16(), opt16()).prop_map(|(xid, e)| GlobalEndRequest { xid, extra_data: e })
}

fn global_end_resp() -> impl Strategy<Value = GlobalEndResponse> {
    (result(), gstatus()).prop_map(|(result, s)| GlobalEndResponse {
        result,
        global_status: s,
    })
}

/// The requests that nest in a MergedWarpMessage.
fn mergeable_request() -> impl Strategy<Value = SeataMessage> {
    use SeataMessage as M;
    prop_oneof![
        (any::<i32>(), opt16()).prop_map(|(t, n)| M::GlobalBegin(GlobalBeginRequest {
            timeout_ms: t,
            transaction_name: n
        })),
        global_end().prop_map(M::GlobalCommit),
        global_end().prop_map(M::GlobalRollback),
        global_end().prop_map(M::GlobalStatus),
        (global_end(), proptest::option::of(gstatus())).prop_map(|(g, s)| M::GlobalReport(
            GlobalReportRequest {
                xid: g.xid,
                extra_data: g.extra_data,
                global_status: s
            }
        )),
        branch_register().prop_map(M::BranchRegister),
        branch_register().prop_map(M::GlobalLockQuery),
        (s16(), any::<i64>(), bstatus(), opt16(), opt16(), btype()).prop_map(
            |(xid, id, s, r, a, t)| M::BranchReport(BranchReportRequest {
                xid,
                branch_id: id,
                status: s,
                resource_id: r,
                application_data: a,
                branch_type: t
            })
        ),
    ]
}

/// The responses that nest in a MergeResultMessage / BatchResultMessage.
fn mergeable_result() -> impl Strategy<Value = SeataMessage> {
    use SeataMessage as M;
    prop_oneof![
        (result(), opt16(), opt16()).prop_map(|(result, x, e)| M::GlobalBeginResponse(
            GlobalBeginResponse {
                result,
                xid: x,
                extra_data: e
            }
        )),
        global_end_resp().prop_map(M::GlobalCommitResponse),
        global_end_resp().prop_map(M::GlobalRollbackResponse),
        global_end_resp().prop_map(M::GlobalStatusResponse),
        global_end_resp().prop_map(M::GlobalReportResponse),
        (result(), any::<i64>()).prop_map(|(result, id)| M::BranchRegisterResponse(
            BranchRegisterResponse {
                result,
                branch_id: id
            }
        )),
        result().prop_map(|result| M::BranchReportResponse(BranchReportResponse { result })),
        (result(), any::<bool>()).prop_map(|(result, l)| M::GlobalLockQueryResponse(
            GlobalLockQueryResponse {
                result,
                lockable: l
            }
        )),
    ]
}

/// Any message of any type.
fn any_message() -> impl Strategy<Value = SeataMessage> {
    use SeataMessage as M;
    let reg = || (s16(), s16(), s16(), opt16());
    prop_oneof![
        mergeable_request(),
        mergeable_result(),
        branch_end().prop_map(M::BranchCommit),
        branch_end().prop_map(M::BranchRollback),
        branch_end_resp().prop_map(M::BranchCommitResponse),
        branch_end_resp().prop_map(M::BranchRollbackResponse),
        (btype(), s16(), any::<i16>()).prop_map(|(t, r, d)| M::UndoLogDelete(
            UndoLogDeleteRequest {
                branch_type: t,
                resource_id: r,
                save_days: d
            }
        )),
        reg().prop_map(|(v, a, g, e)| M::RegisterTm(RegisterTmRequest {
            version: v,
            application_id: a,
            transaction_service_group: g,
            extra_data: e
        })),
        (reg(), opt16()).prop_map(|((v, a, g, e), r)| M::RegisterRm(RegisterRmRequest {
            version: v,
            application_id: a,
            transaction_service_group: g,
            extra_data: e,
            resource_ids: r
        })),
        (any::<bool>(), opt16()).prop_map(|(i, v)| M::RegisterTmResponse(RegisterResponse {
            identified: i,
            version: v
        })),
        (any::<bool>(), opt16()).prop_map(|(i, v)| M::RegisterRmResponse(RegisterResponse {
            identified: i,
            version: v
        })),
        proptest::collection::vec(mergeable_request(), 0..4).prop_map(|msgs| {
            let ids = (0..msgs.len() as i32).collect();
            M::Merged(MergedWarpMessage { msgs, msg_ids: ids })
        }),
        proptest::collection::vec(mergeable_result(), 0..4)
            .prop_map(|msgs| M::MergeResult(MergeResultMessage { msgs })),
        proptest::collection::vec(mergeable_result(), 0..4).prop_map(|results| {
            let ids = (100..100 + results.len() as i32).collect();
            M::BatchResult(BatchResultMessage {
                results,
                msg_ids: ids,
            })
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Every message type round-trips, and damaged copies (cut, flipped, extended)
    /// never panic: they decode to an error or to some other valid message.
    #[test]
    fn every_decoder_survives_damage(
        msg in any_message(),
        cut in proptest::option::of(0usize..200),
        flips in proptest::collection::vec((0usize..200, any::<u8>()), 0..4),
        tail in proptest::collection::vec(any::<u8>(), 0..4),
    ) {
        let good = msg.encode().unwrap();
        prop_assert_eq!(&SeataMessage::decode(&good).unwrap(), &msg);
        let mut b = good.to_vec();
        if let Some(c) = cut {
            b.truncate(c.max(2).min(b.len()));
        }
        for (at, v) in flips {
            // Keep the type code so the decoder of this message runs.
            if at >= 2 && at < b.len() {
                b[at] = v;
            }
        }
        b.extend_from_slice(&tail);
        let damaged = b != good.to_vec();
        match SeataMessage::decode(&Bytes::from(b)) {
            Ok(m) => if damaged && cut.is_none() {
                // A flip inside a string or number can give another valid message.
                prop_assert_eq!(m.type_code(), msg.type_code());
            },
            Err(e) => { let _ = e.to_string(); }
        }
    }

    /// Random bytes after every type code Seata defines (and some it does not).
    #[test]
    fn random_fields_never_panic(
        code in prop_oneof![
            Just(1i16), Just(2), Just(3), Just(4), Just(5), Just(6), Just(7), Just(8),
            Just(9), Just(10), Just(11), Just(12), Just(13), Just(14), Just(15), Just(16),
            Just(17), Just(18), Just(21), Just(22), Just(59), Just(60), Just(101),
            Just(102), Just(103), Just(104), Just(111), Just(120), Just(121), any::<i16>()
        ],
        fields in proptest::collection::vec(any::<u8>(), 0..96),
    ) {
        let mut b = code.to_be_bytes().to_vec();
        b.extend_from_slice(&fields);
        let _ = SeataMessage::decode(&Bytes::from(b.clone()));
        let _ = merge::split_reply(&Bytes::from(b));
    }
}
