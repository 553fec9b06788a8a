//! The example TC answers as Seata's `DefaultCore` does, wherever a client can see it.
//! One test per behaviour; each names the Seata source it follows (the table is in
//! docs/seata-compat.md, "The example TC beside Seata's").

use crate::tx_world;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use meshline::rpc::message::{
    BranchCommitRequest, BranchRollbackRequest, BranchStatus, BranchType, GlobalBeginRequest,
    GlobalEndRequest, GlobalEndResponse, GlobalReportRequest, GlobalStatus, ResultCode,
    SeataMessage, TransactionExceptionCode,
};
use meshline::rpc::rm::{BranchHandler, ResourceManager, async_trait};
use meshline::rpc::tm::TransactionManager;
use meshline::rpc::{CallOptions, Payload, RpcClient, ServerConfig, TransactionError};
use meshline::{EmptyProtection, WatchHub};
use meshline_example_tc::TcOptions;
use tokio::sync::Notify;
use tx_world::{Connected, GROUP, Tc, rm_gone, seata_options, start_tc, until};

/// Every phase-two request an RM got, whole; answers with `answer` (per branch type),
/// after `delay`.
#[derive(Clone, Default)]
struct Rm {
    got: Arc<Mutex<Vec<(bool, BranchCommitRequest)>>>,
    changed: Arc<Notify>,
    answer: Arc<Mutex<Option<BranchStatus>>>,
    delay: Option<Duration>,
}

impl Rm {
    fn got(&self) -> Vec<(bool, BranchCommitRequest)> {
        self.got.lock().unwrap().clone()
    }

    async fn wait(&self, n: usize, limit: Duration) -> Vec<(bool, BranchCommitRequest)> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.changed.notified();
            if self.got().len() >= n {
                return self.got();
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!("the RM got {:?} in {limit:?}, wanted {n}", self.got());
            }
        }
    }

    async fn record(&self, commit: bool, r: BranchCommitRequest) -> BranchStatus {
        if let Some(d) = self.delay {
            tokio::time::sleep(d).await;
        }
        self.got.lock().unwrap().push((commit, r));
        self.changed.notify_waiters();
        self.answer.lock().unwrap().unwrap_or(if commit {
            BranchStatus::PhaseTwoCommitted
        } else {
            BranchStatus::PhaseTwoRollbacked
        })
    }
}

#[async_trait]
impl BranchHandler for Rm {
    async fn branch_commit(&self, r: BranchCommitRequest) -> Result<BranchStatus, String> {
        Ok(self.record(true, r).await)
    }

    async fn branch_rollback(&self, r: BranchRollbackRequest) -> Result<BranchStatus, String> {
        Ok(self.record(false, r).await)
    }
}

struct World {
    hub: Arc<WatchHub>,
    tc: Tc,
    tm: TransactionManager,
}

async fn world(options: TcOptions) -> World {
    let hub = Arc::new(WatchHub::new("test", EmptyProtection::Apply));
    let tc = start_tc(options, ServerConfig::default()).await;
    hub.publish("c", vec![tc.instance()]);
    let tm = tx_world::tm(&hub, 1).await;
    World { hub, tc, tm }
}

async fn rm(w: &World, app: &str, resource: &str, handler: Rm) -> ResourceManager {
    ResourceManager::builder()
        .watch(w.hub.subscribe("c"), "c")
        .transaction_service_group(GROUP)
        .application_id(app)
        .resource(resource)
        .handler(handler)
        .load_balance_name("XID")
        .configure(|o| o.transport.batch = None)
        .connected(1)
        .await
}

/// A transaction holding the AT row `row` of `jdbc:stock` through `stock`.
async fn holding(
    w: &World,
    stock: &ResourceManager,
    row: &str,
) -> meshline::rpc::tm::GlobalTransaction {
    let holder = w.tm.begin("holder", Duration::from_secs(30)).await.unwrap();
    stock
        .branch_register(holder.xid(), BranchType::AT, "jdbc:stock", Some(row), None)
        .await
        .unwrap();
    holder
}

/// Sends `msg` on `client` routed by `xid` and decodes the answer: the TC's own words,
/// result code included, before the TM reads them.
async fn raw(client: &RpcClient, xid: &str, msg: SeataMessage) -> SeataMessage {
    client
        .call(Payload::seata(&msg).unwrap(), CallOptions::xid(xid))
        .await
        .unwrap()
        .payload
        .decode_seata()
        .unwrap()
}

async fn raw_end(client: &RpcClient, commit: bool, xid: &str) -> GlobalEndResponse {
    let req = GlobalEndRequest::new(xid);
    let msg = if commit {
        SeataMessage::GlobalCommit(req)
    } else {
        SeataMessage::GlobalRollback(req)
    };
    match raw(client, xid, msg).await {
        SeataMessage::GlobalCommitResponse(r) | SeataMessage::GlobalRollbackResponse(r) => r,
        other => panic!("answered {other:?}"),
    }
}

/// `DefaultCore.commit`: every branch AT, the session turns `AsyncCommitting` and is
/// answered `Committed` before any RM is asked; the background loop commits the branch.
/// With the RM gone, still `Committed` (the loop keeps trying).
#[tokio::test]
async fn an_at_commit_is_answered_at_once_and_its_branches_committed_after() {
    let w = world(seata_options()).await;
    let handler = Rm::default();
    let stock = rm(&w, "stock", "jdbc:stock", handler.clone()).await;
    let tx = w.tm.begin("at", Duration::from_secs(30)).await.unwrap();
    let b = stock
        .branch_register(tx.xid(), BranchType::AT, "jdbc:stock", Some("t:1"), None)
        .await
        .unwrap();
    assert_eq!(tx.commit().await.unwrap(), GlobalStatus::Committed);
    assert!(
        handler.got().is_empty(),
        "the RM was asked before the commit was answered"
    );
    let got = handler.wait(1, Duration::from_secs(2)).await;
    assert_eq!((got[0].0, got[0].1.branch_id), (true, b));
    assert!(until(Duration::from_secs(2), || w.tc.tc.open_sessions() == 0).await);

    // The RM gone: still Committed, and the branch waits for it.
    let tx = w.tm.begin("at", Duration::from_secs(30)).await.unwrap();
    stock
        .branch_register(tx.xid(), BranchType::AT, "jdbc:stock", Some("t:2"), None)
        .await
        .unwrap();
    rm_gone(&w.tc, &stock, "jdbc:stock").await;
    assert_eq!(tx.commit().await.unwrap(), GlobalStatus::Committed);
    assert_eq!(w.tc.tc.status(tx.xid()), GlobalStatus::AsyncCommitting);
}

/// `DefaultCore.doGlobalCommit`: a TCC branch whose RM is not connected throws out of
/// `branchCommit`; the commit is queued to retry and answered `Failed` / `Unknown` with
/// `CommitRetrying` (`AbstractTCInboundHandler.checkTransactionStatus`). The TM reads it
/// as decided.
#[tokio::test]
async fn a_tcc_commit_whose_rm_is_gone_is_failed_with_commit_retrying() {
    let w = world(seata_options()).await;
    let account = rm(&w, "account", "tcc:account", Rm::default()).await;
    let tx = w.tm.begin("tcc", Duration::from_secs(30)).await.unwrap();
    account
        .branch_register(tx.xid(), BranchType::TCC, "tcc:account", None, None)
        .await
        .unwrap();
    rm_gone(&w.tc, &account, "tcc:account").await;
    let r = raw_end(w.tm.client(), true, tx.xid()).await;
    assert_eq!(r.result.code, ResultCode::Failed, "{r:?}");
    assert_eq!(r.result.exception, TransactionExceptionCode::Unknown);
    assert_eq!(r.global_status, GlobalStatus::CommitRetrying);
    assert!(
        r.result
            .message
            .as_deref()
            .unwrap_or("")
            .contains("rm client is not connected"),
        "{r:?}"
    );
    // Asked again, the TC answers the status (success), and the TM reads both the same.
    assert_eq!(tx.commit().await.unwrap(), GlobalStatus::CommitRetrying);
}

/// `SagaCore.doGlobalReport`: a SAGA transaction reported `Committed` ends there; no
/// compensation follows at its timeout. `SagaCore.doGlobalRollback`: a SAGA that times
/// out gets one BranchRollback, branch id -1, at `applicationId#txServiceGroup` of the
/// TM that began it, with the global status's name as application data.
#[tokio::test]
async fn a_saga_report_ends_it_and_its_phase_two_goes_to_the_saga_resource() {
    let w = world(seata_options()).await;
    let saga_resource = format!("order-service#{GROUP}");
    let handler = Rm::default();
    let saga = rm(&w, "order-service", &saga_resource, handler.clone()).await;

    let tx =
        w.tm.begin("saga", Duration::from_millis(300))
            .await
            .unwrap();
    saga.branch_register(tx.xid(), BranchType::SAGA, &saga_resource, None, None)
        .await
        .unwrap();
    assert_eq!(
        tx.report(GlobalStatus::Committed).await.unwrap(),
        GlobalStatus::Committed
    );
    assert_eq!(w.tc.tc.status(tx.xid()), GlobalStatus::Finished);

    let timed_out =
        w.tm.begin("saga", Duration::from_millis(300))
            .await
            .unwrap();
    saga.branch_register(
        timed_out.xid(),
        BranchType::SAGA,
        &saga_resource,
        None,
        None,
    )
    .await
    .unwrap();
    let got = handler.wait(1, Duration::from_secs(3)).await;
    assert_eq!(
        got.len(),
        1,
        "only the timed-out saga is compensated: {got:?}"
    );
    let (commit, r) = &got[0];
    assert!(!commit);
    assert_eq!(r.xid, timed_out.xid());
    assert_eq!(r.branch_id, -1);
    assert_eq!(r.branch_type, BranchType::SAGA);
    assert_eq!(r.resource_id, saga_resource);
    assert_eq!(r.application_data.as_deref(), Some("TimeoutRollbacking"));
    assert!(until(Duration::from_secs(2), || w.tc.tc.open_sessions() == 0).await);
}

/// `DefaultCore.doGlobalCommit`: an XA branch reported `PhaseOne_RDONLY` is dropped
/// without a commit; `isXaerNotaTimeout`: a branch answered `XAER_NOTA` is retried until
/// the session's timeout plus the longer of it and `server.xaerNotaRetryTimeout`, then
/// taken as committed.
#[tokio::test]
async fn xa_read_only_branches_are_skipped_and_xaer_nota_ends_after_its_time() {
    let w = world(TcOptions {
        xaer_nota_retry_timeout: Duration::from_millis(200),
        ..seata_options()
    })
    .await;
    let handler = Rm::default();
    let xa = rm(&w, "xa", "xa:db", handler.clone()).await;
    let tx = w.tm.begin("xa", Duration::from_millis(300)).await.unwrap();
    let read_only = xa
        .branch_register(tx.xid(), BranchType::XA, "xa:db", None, None)
        .await
        .unwrap();
    xa.branch_report(
        tx.xid(),
        read_only,
        BranchType::XA,
        "xa:db",
        BranchStatus::PhaseOneRdonly,
        None,
    )
    .await
    .unwrap();
    let writer = xa
        .branch_register(tx.xid(), BranchType::XA, "xa:db", None, None)
        .await
        .unwrap();
    *handler.answer.lock().unwrap() = Some(BranchStatus::PhaseTwoCommitFailedXaerNotaRetryable);
    assert_eq!(tx.commit().await.unwrap(), GlobalStatus::CommitRetrying);
    // Done after 300 ms + max(300 ms, 200 ms), retried every 50 ms until then.
    assert!(
        until(Duration::from_secs(3), || w.tc.tc.status(tx.xid())
            == GlobalStatus::Finished)
        .await,
        "still {} after 3 s",
        w.tc.tc.status(tx.xid())
    );
    let got = handler.got();
    assert!(got.len() >= 2, "retried: {got:?}");
    assert!(
        got.iter().all(|(c, r)| *c && r.branch_id == writer),
        "the read-only branch was never asked: {got:?}"
    );
}

/// `AbstractCore.lockQuery`: only AT takes global locks; a lock query of any other
/// branch type answers lockable.
#[tokio::test]
async fn a_lock_query_for_tcc_or_xa_is_lockable() {
    let w = world(seata_options()).await;
    let stock = rm(&w, "stock", "jdbc:stock", Rm::default()).await;
    let _holder = holding(&w, &stock, "t:1").await;
    let other = w.tm.begin("other", Duration::from_secs(30)).await.unwrap();
    let q = |t| stock.lock_query(t, "jdbc:stock", other.xid(), "t:1");
    assert!(!q(BranchType::AT).await.unwrap());
    assert!(q(BranchType::TCC).await.unwrap());
    assert!(q(BranchType::XA).await.unwrap());
}

/// `AbstractLockManager.collectRowLocks` keeps table names and keys as written:
/// `t: 1` is not the row `t:1`.
#[tokio::test]
async fn lock_keys_are_kept_as_written() {
    let w = world(seata_options()).await;
    let stock = rm(&w, "stock", "jdbc:stock", Rm::default()).await;
    let a = w.tm.begin("a", Duration::from_secs(30)).await.unwrap();
    let b = w.tm.begin("b", Duration::from_secs(30)).await.unwrap();
    stock
        .branch_register(a.xid(), BranchType::AT, "jdbc:stock", Some("t:1"), None)
        .await
        .unwrap();
    stock
        .branch_register(b.xid(), BranchType::AT, "jdbc:stock", Some("t: 1"), None)
        .await
        .expect("`t: 1` is another row than `t:1`");
    match stock
        .branch_register(b.xid(), BranchType::AT, "jdbc:stock", Some("t:1"), None)
        .await
    {
        Err(e) => assert_eq!(
            e.exception_code(),
            TransactionExceptionCode::LockKeyConflict
        ),
        Ok(id) => panic!("`t:1` is held by a, yet registered as {id}"),
    }
}

/// `GlobalSession.createGlobalSession` takes any timeout; the timeout check rolls back
/// one of 0 at once.
#[tokio::test]
async fn a_begin_with_a_timeout_of_0_is_accepted_and_rolled_back() {
    let w = world(seata_options()).await;
    let msg = SeataMessage::GlobalBegin(GlobalBeginRequest {
        timeout_ms: 0,
        transaction_name: Some("zero".into()),
    });
    let xid = match raw(w.tm.client(), "zero", msg).await {
        SeataMessage::GlobalBeginResponse(r) => {
            assert_eq!(r.result.code, ResultCode::Success, "{r:?}");
            r.xid.unwrap()
        }
        other => panic!("answered {other:?}"),
    };
    assert!(
        until(Duration::from_secs(2), || w.tc.tc.status(&xid)
            == GlobalStatus::Finished)
        .await
    );
    assert_eq!(
        w.tc.tc
            .stats()
            .timed_out
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

/// `XID.generateXID`: the address as Java prints it, IPv6 neither bracketed nor
/// compressed; the `XID` balancer reads it back to the TC that made it.
#[tokio::test]
async fn an_ipv6_xid_is_written_as_seata_writes_it() {
    let (server, tc) = meshline_example_tc::Coordinator::serve(
        "127.0.0.1:0".parse().unwrap(),
        "::1".parse().unwrap(),
        seata_options(),
        ServerConfig::default(),
    )
    .await
    .unwrap();
    let port = server.local_addr().port();
    assert_eq!(tc.xid_address(), format!("0:0:0:0:0:0:0:1:{port}"));
    let parsed = meshline::loadbalance::parse_xid_address(&format!("{}:42", tc.xid_address()));
    assert_eq!(parsed, Some(format!("[::1]:{port}").parse().unwrap()));
}

/// `AbstractCore.branchReport` sets the branch's application data to what the report
/// carries; phase two hands it back.
#[tokio::test]
async fn a_branch_report_keeps_its_application_data() {
    let w = world(seata_options()).await;
    let handler = Rm::default();
    let account = rm(&w, "account", "tcc:account", handler.clone()).await;
    let tx = w.tm.begin("tcc", Duration::from_secs(30)).await.unwrap();
    let b = account
        .branch_register(
            tx.xid(),
            BranchType::TCC,
            "tcc:account",
            None,
            Some(r#"{"v":1}"#),
        )
        .await
        .unwrap();
    account
        .branch_report(
            tx.xid(),
            b,
            BranchType::TCC,
            "tcc:account",
            BranchStatus::PhaseOneDone,
            Some(r#"{"v":2}"#),
        )
        .await
        .unwrap();
    assert_eq!(tx.commit().await.unwrap(), GlobalStatus::Committed);
    let got = handler.got();
    assert_eq!(got[0].1.application_data.as_deref(), Some(r#"{"v":2}"#));
}

/// Seata's `FileLocker`: a row held by a transaction that is rolling back is refused
/// `LockKeyConflictFailFast` (waiting for it is pointless), any other held row
/// `LockKeyConflict`.
#[tokio::test]
async fn a_row_held_by_a_rolling_back_transaction_fails_fast() {
    let w = world(seata_options()).await;
    let slow = Rm {
        delay: Some(Duration::from_millis(500)),
        ..Rm::default()
    };
    let stock = rm(&w, "stock", "jdbc:stock", slow).await;
    let holder = holding(&w, &stock, "t:1").await;
    let other = w.tm.begin("other", Duration::from_secs(30)).await.unwrap();
    let register =
        || stock.branch_register(other.xid(), BranchType::AT, "jdbc:stock", Some("t:1"), None);
    match register().await {
        Err(e) => assert_eq!(
            e.exception_code(),
            TransactionExceptionCode::LockKeyConflict
        ),
        Ok(id) => panic!("registered {id} on a held row"),
    }
    let rollback = tokio::spawn({
        let holder = holder.clone();
        async move { holder.rollback().await }
    });
    assert!(
        until(Duration::from_secs(2), || w.tc.tc.status(holder.xid())
            == GlobalStatus::Rollbacking)
        .await
    );
    match register().await {
        Err(TransactionError::Refused { exception, .. }) => {
            assert_eq!(exception, TransactionExceptionCode::LockKeyConflictFailFast)
        }
        other => panic!("a row of a rolling-back transaction: {other:?}"),
    }
    assert_eq!(rollback.await.unwrap().unwrap(), GlobalStatus::Rollbacked);
}

/// A `GlobalReport` of a transaction that is not SAGA changes nothing
/// (`AbstractCore.doGlobalReport`); of an XID the TC does not know, it echoes the status.
#[tokio::test]
async fn a_report_of_a_non_saga_transaction_changes_nothing() {
    let w = world(seata_options()).await;
    let tx = w.tm.begin("at", Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        tx.report(GlobalStatus::Committed).await.unwrap(),
        GlobalStatus::Begin
    );
    assert_eq!(w.tc.tc.status(tx.xid()), GlobalStatus::Begin);
    let msg = SeataMessage::GlobalReport(GlobalReportRequest {
        xid: "127.0.0.1:1:1".into(),
        extra_data: None,
        global_status: Some(GlobalStatus::Rollbacked),
    });
    match raw(w.tm.client(), "unknown", msg).await {
        SeataMessage::GlobalReportResponse(r) => {
            assert_eq!(r.global_status, GlobalStatus::Rollbacked)
        }
        other => panic!("answered {other:?}"),
    }
}
