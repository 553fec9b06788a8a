//! One byte vector per message, from docs/seata-messages.md (derived from Seata Java's
//! codec sources, not from this encoder), checked both ways; the registration frames
//! of docs/seata-compat.md §4.3; malformed bodies naming their field; and a proptest
//! over every decoder.

mod props;
pub(in crate::message) mod vectors;

use super::*;
use crate::codec::{CODEC_SEATA, COMPRESSOR_NONE, FrameCodec, HeadMap};
use tokio_util::codec::{Decoder, Encoder};
use vectors::{hex, merge_results, register_req, vectors};

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
