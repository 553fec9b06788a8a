//! A proptest over every decoder: valid messages round-trip, damaged ones are refused
//! with an error and never panic.

use super::super::*;
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
        (reg(), opt16()).prop_map(|((v, a, g, e), r)| M::UnregisterRm(RegisterRmRequest {
            version: v,
            application_id: a,
            transaction_service_group: g,
            extra_data: e,
            resource_ids: r
        })),
        (any::<bool>(), opt16()).prop_map(|(i, v)| M::UnregisterRmResponse(RegisterResponse {
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
            Just(102), Just(103), Just(104), Just(105), Just(106), Just(111), Just(120),
            Just(121), any::<i16>()
        ],
        fields in proptest::collection::vec(any::<u8>(), 0..96),
    ) {
        let mut b = code.to_be_bytes().to_vec();
        b.extend_from_slice(&fields);
        let _ = SeataMessage::decode(&Bytes::from(b.clone()));
        let _ = merge::split_reply(&Bytes::from(b));
    }
}
