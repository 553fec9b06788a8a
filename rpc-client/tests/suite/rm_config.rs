//! `client.rm.*` as Seata's RM acts on it, against a test TC that answers a scripted
//! number of refusals: lock conflicts are retried (`client.rm.lock.retryInterval`,
//! `retryTimes`), fail-fast conflicts are not, phase-one reports follow
//! `reportSuccessEnable` and `reportRetryCount`.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use meshline_rpc_client::message::{
    BranchCommitRequest, BranchRegisterResponse, BranchReportResponse, BranchRollbackRequest,
    BranchStatus, BranchType, SeataMessage, TransactionExceptionCode, TransactionResult,
    register_reply,
};
use meshline_rpc_client::rm::{BranchHandler, ResourceManager, async_trait};
use meshline_rpc_client::{InboundRequest, Payload, Server, ServerConfig, TransactionError};

/// What a [`ScriptedTc`] refuses: the first `refusals` branch registrations with
/// `conflict`, and the first `report_failures` branch reports with `FailedStore`. With
/// `drop_first_report`, the first branch report closes its connection unanswered (the
/// TC stays up).
#[derive(Clone, Copy)]
struct Script {
    refusals: u32,
    conflict: TransactionExceptionCode,
    report_failures: u32,
    drop_first_report: bool,
}

impl Script {
    /// Refuses the first `refusals` registrations with `conflict`; every report is
    /// answered with success.
    fn refusing(refusals: u32, conflict: TransactionExceptionCode) -> Script {
        Script {
            refusals,
            conflict,
            report_failures: 0,
            drop_first_report: false,
        }
    }

    /// Registers every branch; fails the first `failures` reports, and drops the first
    /// report's connection when `drop_first`.
    fn failing_reports(failures: u32, drop_first: bool) -> Script {
        Script {
            report_failures: failures,
            drop_first_report: drop_first,
            ..Script::refusing(0, TransactionExceptionCode::LockKeyConflict)
        }
    }
}

/// A TC that plays a [`Script`] and counts the registrations and reports it got.
struct ScriptedTc {
    server: Server,
    registers: Arc<AtomicU32>,
    reports: Arc<AtomicU32>,
}

async fn scripted_tc(script: Script) -> ScriptedTc {
    let registers = Arc::new(AtomicU32::new(0));
    let reports = Arc::new(AtomicU32::new(0));
    let (reg, rep) = (registers.clone(), reports.clone());
    let handler = move |req: InboundRequest| {
        let (reg, rep) = (reg.clone(), rep.clone());
        async move {
            let msg = req.payload.decode_seata().ok()?;
            if let Some(reply) = register_reply(&msg, true, "2.3.0") {
                return Some(Payload::seata(&reply).unwrap());
            }
            let answer = match msg {
                SeataMessage::BranchRegister(_) => {
                    let n = reg.fetch_add(1, Ordering::SeqCst);
                    SeataMessage::BranchRegisterResponse(if n < script.refusals {
                        BranchRegisterResponse {
                            result: TransactionResult::failed(script.conflict, "row t:1 is held"),
                            branch_id: 0,
                        }
                    } else {
                        BranchRegisterResponse {
                            result: TransactionResult::success(),
                            branch_id: 77,
                        }
                    })
                }
                SeataMessage::BranchReport(_) => {
                    let n = rep.fetch_add(1, Ordering::SeqCst);
                    if script.drop_first_report && n == 0 {
                        req.connection.close_with("the test drops the connection");
                        return None;
                    }
                    SeataMessage::BranchReportResponse(BranchReportResponse {
                        result: if n < script.report_failures {
                            TransactionResult::failed(
                                TransactionExceptionCode::FailedStore,
                                "store down",
                            )
                        } else {
                            TransactionResult::success()
                        },
                    })
                }
                _ => return None,
            };
            Some(Payload::seata(&answer).unwrap())
        }
    };
    let server = Server::bind_with(
        "127.0.0.1:0".parse().unwrap(),
        ServerConfig::default(),
        handler,
    )
    .await
    .unwrap();
    ScriptedTc {
        server,
        registers,
        reports,
    }
}

struct Nothing;

#[async_trait]
impl BranchHandler for Nothing {
    async fn branch_commit(&self, _: BranchCommitRequest) -> Result<BranchStatus, String> {
        Ok(BranchStatus::PhaseTwoCommitted)
    }
    async fn branch_rollback(&self, _: BranchRollbackRequest) -> Result<BranchStatus, String> {
        Ok(BranchStatus::PhaseTwoRollbacked)
    }
}

async fn start_rm(
    tc: &ScriptedTc,
    keys: &str,
) -> (Arc<meshline_registry_core::WatchHub>, ResourceManager) {
    let hub = common::hub_with(vec![common::instance(tc.server.local_addr())]);
    let rm = ResourceManager::builder()
        .config(&common::properties(keys))
        .watch(hub.subscribe("c"), "c")
        .resource("jdbc:db")
        .handler(Nothing)
        .configure(|o| o.transport.batch = None)
        .build()
        .await
        .unwrap();
    rm.client()
        .wait_alive(1, Duration::from_secs(5))
        .await
        .unwrap();
    (hub, rm)
}

const LOCK_KEYS: &str = "client.rm.lock.retryInterval=20\nclient.rm.lock.retryTimes=5\n";
const XID: &str = "127.0.0.1:8091:1";

async fn register(rm: &ResourceManager) -> Result<i64, TransactionError> {
    rm.branch_register(XID, BranchType::AT, "jdbc:db", Some("t:1"), None)
        .await
}

#[tokio::test]
async fn a_conflict_that_clears_within_the_retries_registers() {
    let tc = scripted_tc(Script::refusing(
        3,
        TransactionExceptionCode::LockKeyConflict,
    ))
    .await;
    let (_hub, rm) = start_rm(&tc, LOCK_KEYS).await;
    let started = Instant::now();
    assert_eq!(register(&rm).await.unwrap(), 77);
    assert_eq!(
        tc.registers.load(Ordering::SeqCst),
        4,
        "three refusals, then the registration"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(60),
        "three waits of retryInterval (20 ms) took {:?}",
        started.elapsed()
    );
}

/// A registration by an RM on [`LOCK_KEYS`] against a TC that refuses every one with
/// `conflict`: what it returned, and how many registrations the TC got.
async fn register_against_a_lasting_conflict(
    conflict: TransactionExceptionCode,
) -> (Result<i64, TransactionError>, u32) {
    let tc = scripted_tc(Script::refusing(u32::MAX, conflict)).await;
    let (_hub, rm) = start_rm(&tc, LOCK_KEYS).await;
    let registered = register(&rm).await;
    (registered, tc.registers.load(Ordering::SeqCst))
}

#[tokio::test]
async fn a_conflict_that_stays_fails_after_retry_times_with_its_code() {
    let (registered, registers) =
        register_against_a_lasting_conflict(TransactionExceptionCode::LockKeyConflict).await;
    match registered {
        Err(TransactionError::Refused {
            exception: TransactionExceptionCode::LockKeyConflict,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(registers, 6, "the first and retryTimes (5) more");
}

#[tokio::test]
async fn a_fail_fast_conflict_is_not_retried() {
    let (registered, registers) =
        register_against_a_lasting_conflict(TransactionExceptionCode::LockKeyConflictFailFast)
            .await;
    match registered {
        Err(e) => assert_eq!(
            e.exception_code(),
            TransactionExceptionCode::LockKeyConflictFailFast
        ),
        Ok(id) => panic!("registered {id}"),
    }
    assert_eq!(registers, 1);
}

#[tokio::test]
async fn phase_one_reports_follow_report_success_enable_and_retry_count() {
    // Seata's defaults: a success is not reported, a failure is.
    let tc = scripted_tc(Script::failing_reports(0, false)).await;
    let (_hub, rm) = start_rm(&tc, "").await;
    assert!(
        !rm.report_phase_one(XID, 77, BranchType::AT, "jdbc:db", true)
            .await
            .unwrap()
    );
    assert_eq!(tc.reports.load(Ordering::SeqCst), 0);
    assert!(
        rm.report_phase_one(XID, 77, BranchType::AT, "jdbc:db", false)
            .await
            .unwrap()
    );
    assert_eq!(tc.reports.load(Ordering::SeqCst), 1);

    // Successes reported; two failed reports sent again within reportRetryCount (3).
    let tc = scripted_tc(Script::failing_reports(2, false)).await;
    let keys = "client.rm.reportSuccessEnable=true\nclient.rm.reportRetryCount=3\n";
    let (_hub, rm) = start_rm(&tc, keys).await;
    assert!(
        rm.report_phase_one(XID, 77, BranchType::AT, "jdbc:db", true)
            .await
            .unwrap()
    );
    assert_eq!(tc.reports.load(Ordering::SeqCst), 3);

    // A report that keeps failing fails after reportRetryCount attempts, with its code.
    let tc = scripted_tc(Script::failing_reports(u32::MAX, false)).await;
    let (_hub, rm) = start_rm(&tc, keys).await;
    let e = rm
        .report_phase_one(XID, 77, BranchType::AT, "jdbc:db", false)
        .await
        .unwrap_err();
    assert_eq!(e.exception_code(), TransactionExceptionCode::FailedStore);
    assert_eq!(tc.reports.load(Ordering::SeqCst), 3);
}

/// A phase-one report whose connection is lost on the way (the TC stays up) is sent
/// again once the RM is connected again: its retries are not spent in the microseconds
/// before the reconnect, each failing "none is alive".
#[tokio::test]
async fn a_report_whose_connection_drops_is_sent_again_once_reconnected() {
    let tc = scripted_tc(Script::failing_reports(0, true)).await;
    let (_hub, rm) = start_rm(&tc, "").await;
    assert!(
        rm.report_phase_one(XID, 77, BranchType::AT, "jdbc:db", false)
            .await
            .unwrap()
    );
    // The dropped one and the one answered.
    assert_eq!(tc.reports.load(Ordering::SeqCst), 2);
}
