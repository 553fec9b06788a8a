//! Every message through both bodies, and the bytes against vectors `protoc` made
//! from Seata's protos (`scripts/seata-proto-vectors.sh` prints them).

use super::*;
use crate::message::codes::{BranchStatus, BranchType, GlobalStatus, TransactionExceptionCode};
use crate::message::{
    BranchEndRequest, BranchEndResponse, BranchRegisterRequest, BranchRegisterResponse,
    BranchReportRequest, GlobalBeginRequest, GlobalBeginResponse, GlobalEndRequest,
    GlobalEndResponse, MergedWarpMessage, RegisterResponse, RegisterRmRequest, TransactionResult,
    UndoLogDeleteRequest,
};

const XID: &str = "10.0.0.1:8091:7";

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The vectors, with the message each encodes.
fn vectors() -> Vec<(&'static str, SeataMessage, &'static str)> {
    use SeataMessage as M;
    let begin = GlobalBeginRequest {
        timeout_ms: 60_000,
        transaction_name: Some("order".into()),
    };
    vec![
        (
            "GLOBAL_BEGIN",
            M::GlobalBegin(begin),
            "0a040a02080110e0d4031a056f72646572",
        ),
        (
            "GLOBAL_BEGIN_RESPONSE",
            M::GlobalBeginResponse(GlobalBeginResponse {
                result: TransactionResult::success(),
                xid: Some(XID.into()),
                extra_data: None,
            }),
            "0a080a060a0208021001120f31302e302e302e313a383039313a37",
        ),
        (
            "GLOBAL_COMMIT_FAILED",
            M::GlobalCommitResponse(GlobalEndResponse {
                result: TransactionResult::failed(
                    TransactionExceptionCode::FailedStore,
                    "store down",
                ),
                global_status: GlobalStatus::Begin,
            }),
            "0a180a140a100a0208081a0a73746f726520646f776e10111001",
        ),
        (
            "GLOBAL_STATUS",
            M::GlobalStatus(GlobalEndRequest {
                xid: XID.into(),
                extra_data: None,
            }),
            "0a170a040a02080f120f31302e302e302e313a383039313a37",
        ),
        (
            "BRANCH_REGISTER",
            M::BranchRegister(BranchRegisterRequest {
                xid: XID.into(),
                branch_type: BranchType::TCC,
                resource_id: "inventory".into(),
                lock_key: Some("stock:1".into()),
                application_data: Some("{}".into()),
            }),
            "0a040a02080b120f31302e302e302e313a383039313a3718012209696e76656e746f72792a0773746f636b3a3132027b7d",
        ),
        (
            "BRANCH_REGISTER_CONFLICT",
            M::BranchRegisterResponse(BranchRegisterResponse {
                result: TransactionResult::failed(
                    TransactionExceptionCode::LockKeyConflict,
                    "lock",
                ),
                branch_id: 0,
            }),
            "0a0e0a0a0a02080c1a046c6f636b1001",
        ),
        (
            "BRANCH_COMMIT",
            M::BranchCommit(BranchEndRequest {
                xid: XID.into(),
                branch_id: 42,
                branch_type: BranchType::AT,
                resource_id: "jdbc:mysql://db/orders".into(),
                application_data: None,
            }),
            "0a310a040a020803120f31302e302e302e313a383039313a37182a2a166a6462633a6d7973716c3a2f2f64622f6f7264657273",
        ),
        (
            "BRANCH_COMMIT_RESPONSE",
            M::BranchCommitResponse(BranchEndResponse {
                result: TransactionResult::success(),
                xid: XID.into(),
                branch_id: 42,
                branch_status: BranchStatus::PhaseTwoCommitted,
            }),
            "0a1f0a080a060a0208041001120f31302e302e302e313a383039313a37182a2005",
        ),
        (
            "BRANCH_REPORT",
            M::BranchReport(BranchReportRequest {
                xid: XID.into(),
                branch_id: 42,
                status: BranchStatus::PhaseOneFailed,
                resource_id: Some("inventory".into()),
                application_data: None,
                branch_type: BranchType::SAGA,
            }),
            "0a040a02080d120f31302e302e302e313a383039313a37182a2209696e76656e746f727928033802",
        ),
        (
            "REGISTER_RM",
            M::RegisterRm(RegisterRmRequest {
                version: "2.7.0".into(),
                application_id: "orders".into(),
                transaction_service_group: "default_tx_group".into(),
                extra_data: None,
                resource_ids: Some("a,b".into()),
            }),
            "0a250a0208671205322e372e301a066f7264657273221064656661756c745f74785f67726f75701203612c62",
        ),
        (
            "REGISTER_TM_RESPONSE",
            M::RegisterTmResponse(RegisterResponse {
                identified: true,
                version: Some("2.7.0".into()),
            }),
            "0a110a060a02086610011205322e372e302001",
        ),
        (
            "UNDO_LOG_DELETE",
            M::UndoLogDelete(UndoLogDeleteRequest {
                branch_type: BranchType::AT,
                resource_id: "jdbc:mysql://db/orders".into(),
                save_days: 7,
            }),
            "0a040a02086f12166a6462633a6d7973716c3a2f2f64622f6f72646572731807",
        ),
        (
            "MERGED",
            M::Merged(MergedWarpMessage {
                msgs: vec![
                    M::GlobalBegin(GlobalBeginRequest {
                        timeout_ms: 1000,
                        transaction_name: None,
                    }),
                    M::GlobalStatus(GlobalEndRequest {
                        xid: "x:1:2".into(),
                        extra_data: None,
                    }),
                ],
                msg_ids: vec![5, 6],
            }),
            "0a02083b125b0a4e747970652e676f6f676c65617069732e636f6d2f6f72672e6170616368652e73656174612e70726f746f636f6c2e70726f746f6275662e476c6f62616c426567696e5265717565737450726f746f12090a040a02080110e80712620a4f747970652e676f6f676c65617069732e636f6d2f6f72672e6170616368652e73656174612e70726f746f636f6c2e70726f746f6275662e476c6f62616c5374617475735265717565737450726f746f120f0a0d0a040a02080f1205783a313a321a020506",
        ),
    ]
}

#[test]
fn every_vector_is_what_seatas_protos_make_and_reads_back() {
    for (name, msg, bytes) in vectors() {
        let (_, ours) = encode::to_proto(&msg).unwrap();
        assert_eq!(ours, hex(bytes), "{name}: encoded");
        let full = proto_name(&msg);
        assert_eq!(
            decode::from_proto(&full, &hex(bytes)).unwrap(),
            msg,
            "{name}: decoded"
        );
        // The v1 body: the name with its length before it, then the same bytes.
        let body = encode(&msg).unwrap();
        let len = u32::from_be_bytes(body[..4].try_into().unwrap()) as usize;
        assert_eq!(&body[4..4 + len], full.as_bytes(), "{name}");
        assert_eq!(&body[4 + len..], hex(bytes).as_slice(), "{name}");
        assert_eq!(decode(&body).unwrap(), msg, "{name}: v1 body");
        // The gRPC body.
        assert_eq!(
            decode_any(&encode_any(&msg).unwrap()).unwrap(),
            msg,
            "{name}: Any"
        );
    }
}

#[test]
fn the_grpc_body_is_the_any_java_packs() {
    let msg = vectors().remove(0).1;
    assert_eq!(
        encode_any(&msg).unwrap(),
        hex(
            "0a4e747970652e676f6f676c65617069732e636f6d2f6f72672e6170616368652e73656174612e70726f746f636f6c2e70726f746f6275662e476c6f62616c426567696e5265717565737450726f746f12110a040a02080110e0d4031a056f72646572"
        )
    );
}

/// The v1 codec's vectors hold one message of every type (and the v1-only constants):
/// each goes through both protobuf bodies unchanged, or is refused as having no proto
/// value.
#[test]
fn every_message_type_round_trips_through_both_bodies() {
    let mut types = std::collections::BTreeSet::new();
    for (what, _, msg) in crate::message::tests::vectors::vectors() {
        match encode(&msg) {
            Ok(body) => {
                assert_eq!(decode(&body).unwrap(), msg, "{what}");
                assert_eq!(
                    decode_any(&encode_any(&msg).unwrap()).unwrap(),
                    msg,
                    "{what}"
                );
                types.insert(msg.type_code());
            }
            Err(e) => assert!(matches!(e, ProtoError::NoProtoValue { .. }), "{what}: {e}"),
        }
    }
    // Every type Seata's protobuf serializer has (all of v1's but the heartbeat).
    assert_eq!(types.len(), 30, "{types:?}");
}

#[test]
fn a_v1_constant_without_a_proto_value_is_a_named_error() {
    let msg = SeataMessage::GlobalBeginResponse(GlobalBeginResponse {
        result: TransactionResult::failed(TransactionExceptionCode::NotRaftLeader, "follower"),
        xid: None,
        extra_data: None,
    });
    let e = encode(&msg).unwrap_err();
    assert_eq!(
        e,
        ProtoError::NoProtoValue {
            what: "TransactionExceptionCode",
            name: "NotRaftLeader"
        }
    );
    assert!(e.to_string().contains("NotRaftLeader has no value"), "{e}");
    let xa = SeataMessage::BranchRegister(BranchRegisterRequest {
        branch_type: BranchType::XA,
        ..Default::default()
    });
    assert!(matches!(
        encode_any(&xa),
        Err(ProtoError::NoProtoValue { name: "XA", .. })
    ));
}

#[test]
fn bad_bodies_are_named_errors_not_panics() {
    // Too short for the length, a length past the end, a negative one, an unknown name.
    assert!(matches!(decode(&[0, 0]), Err(ProtoError::Framing(_))));
    assert!(matches!(
        decode(&[0, 0, 0, 9, b'a']),
        Err(ProtoError::Framing(_))
    ));
    assert!(matches!(
        decode(&[0xff, 0xff, 0xff, 0xff]),
        Err(ProtoError::Framing(_))
    ));
    let mut body = 3i32.to_be_bytes().to_vec();
    body.extend_from_slice(b"Foo");
    assert_eq!(decode(&body), Err(ProtoError::UnknownMessage("Foo".into())));
    // A known name over bytes that are not its message.
    let name = "org.apache.seata.protocol.protobuf.GlobalBeginRequestProto";
    let mut body = (name.len() as i32).to_be_bytes().to_vec();
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(&[0x0a, 0x7f]);
    assert!(
        matches!(decode(&body), Err(ProtoError::Decode { .. })),
        "{:?}",
        decode(&body)
    );
    // An enum number the proto lacks.
    let begin_bad_code = hex("0a0e0a0a0a02080c1a046c6f636b1063");
    let full = "org.apache.seata.protocol.protobuf.BranchRegisterResponseProto";
    assert_eq!(
        decode::from_proto(full, &begin_bad_code),
        Err(ProtoError::UnknownNumber {
            what: "TransactionExceptionCodeProto",
            number: 99
        })
    );
    // An envelope inside an envelope.
    let inner = SeataMessage::Merged(MergedWarpMessage::default());
    let outer = SeataMessage::Merged(MergedWarpMessage {
        msgs: vec![inner],
        msg_ids: vec![1],
    });
    assert_eq!(
        decode(&encode(&outer).unwrap()),
        Err(ProtoError::NotNestable("MergedWarpMessageProto"))
    );
}

/// What a decoder made of arbitrary bytes is a message that encodes and reads back as
/// itself, or a named error.
fn decoded_is_whole(got: Result<SeataMessage, ProtoError>) {
    if let Ok(m) = got {
        let again = decode(&encode(&m).unwrap()).unwrap();
        assert_eq!(again, m);
    }
}

proptest::proptest! {
    /// Arbitrary bytes, bare and after a valid name, never panic a decoder.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
        decoded_is_whole(decode(&bytes));
        decoded_is_whole(decode_any(&bytes));
        let name = "org.apache.seata.protocol.protobuf.MergedWarpMessageProto";
        let mut body = (name.len() as i32).to_be_bytes().to_vec();
        body.extend_from_slice(name.as_bytes());
        body.extend_from_slice(&bytes);
        decoded_is_whole(decode(&body));
    }
}
