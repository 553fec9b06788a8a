//! How the in-memory TC answers MergedWarpMessages: result by result in
//! BatchResultMessages for clients of Seata 1.5.0 or later (so a merged begin is not
//! held back by a merged commit waiting for phase two), one positional
//! MergeResultMessage for older clients or with batch responses off.
//!
//! The TM side is a raw connection speaking rpc-client's codec, so the test decides
//! exactly what shares a merged frame and sees every answer frame; the RM is
//! meshline's, with a phase-two handler that holds each commit until the test lets it
//! go.

use crate::tx_world;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use meshline::rpc::codec::{CODEC_SEATA, Frame, FrameCodec, HeadMap, MessageType};
use meshline::rpc::message::{
    BranchCommitRequest, BranchRollbackRequest, BranchStatus, BranchType, GlobalBeginRequest,
    GlobalEndRequest, GlobalStatus, MergedWarpMessage, RegisterTmRequest, SeataMessage,
};
use meshline::rpc::rm::{BranchHandler, ResourceManager, async_trait};
use meshline::rpc::{SEATA_VERSION, ServerConfig};
use meshline_example_tc::TcOptions;
use tokio::net::TcpStream;
use tokio::sync::{Notify, Semaphore};
use tokio_util::codec::Framed;
use tx_world::*;

type Raw = Framed<TcpStream, FrameCodec>;

/// A phase-two handler that holds every commit until [`Gate::open`], and tells when a
/// commit arrived.
#[derive(Clone)]
struct Gate {
    permits: Arc<Semaphore>,
    arrived: Arc<Notify>,
}

impl Gate {
    fn new() -> Self {
        Gate {
            permits: Arc::new(Semaphore::new(0)),
            arrived: Arc::new(Notify::new()),
        }
    }

    fn open(&self) {
        self.permits.add_permits(1000);
    }
}

#[async_trait]
impl BranchHandler for Gate {
    async fn branch_commit(&self, _: BranchCommitRequest) -> Result<BranchStatus, String> {
        self.arrived.notify_one();
        let permit = self.permits.acquire().await.map_err(|e| e.to_string())?;
        permit.forget();
        Ok(BranchStatus::PhaseTwoCommitted)
    }

    async fn branch_rollback(&self, _: BranchRollbackRequest) -> Result<BranchStatus, String> {
        Ok(BranchStatus::PhaseTwoRollbacked)
    }
}

/// A TC with `options`, an RM of `db-a` answering phase two through `gate`.
async fn world_with(options: TcOptions, gate: &Gate) -> (Tc, ResourceManager) {
    let tc = start_tc(options, ServerConfig::default()).await;
    let hub = Arc::new(meshline::WatchHub::new(
        "test",
        meshline::EmptyProtection::Apply,
    ));
    publish(&hub, std::slice::from_ref(&tc));
    let rm = ResourceManager::builder()
        .watch(hub.subscribe("c"), "c")
        .transaction_service_group(GROUP)
        .application_id("stock")
        .resource("db-a")
        .handler(gate.clone())
        .load_balance_name("XID")
        .connected(1)
        .await;
    (tc, rm)
}

fn frame(msg_type: MessageType, id: u32, msg: &SeataMessage) -> Frame {
    Frame {
        msg_type,
        codec: CODEC_SEATA,
        compressor: 0,
        request_id: id,
        head: HeadMap::new(),
        body: msg.encode().unwrap(),
    }
}

/// The next answer frame: its id and message.
async fn answer(c: &mut Raw) -> (u32, SeataMessage) {
    let f = tokio::time::timeout(Duration::from_secs(5), c.next())
        .await
        .expect("an answer within 5 s")
        .expect("the connection is open")
        .expect("a frame");
    assert_eq!(f.msg_type, MessageType::Response);
    (f.request_id, SeataMessage::decode(&f.body).unwrap())
}

/// The next answer, which must be the BatchResultMessage of frame `frame` for the
/// requests `msg_ids`: its results, in their order.
async fn batch_answer(c: &mut Raw, frame: u32, msg_ids: &[i32]) -> Vec<SeataMessage> {
    match answer(c).await {
        (id, SeataMessage::BatchResult(b)) if id == frame => {
            assert_eq!(b.msg_ids, msg_ids);
            b.results
        }
        other => panic!("{other:?}"),
    }
}

/// A raw TM connection registered with `version`.
async fn tm_registered(tc: &Tc, version: &str) -> Raw {
    let mut c = Framed::new(
        TcpStream::connect(tc.server.local_addr()).await.unwrap(),
        FrameCodec::default(),
    );
    let reg = SeataMessage::RegisterTm(RegisterTmRequest {
        version: version.into(),
        application_id: "order-service".into(),
        transaction_service_group: GROUP.into(),
        extra_data: None,
    });
    c.send(frame(MessageType::Request, 1, &reg)).await.unwrap();
    match answer(&mut c).await {
        (1, SeataMessage::RegisterTmResponse(r)) => assert!(r.identified),
        other => panic!("{other:?}"),
    }
    c
}

/// Begins a transaction alone (frame id `id`) and registers one `db-a` branch in it.
async fn begin_with_branch(c: &mut Raw, id: u32, rm: &ResourceManager) -> String {
    let begin = SeataMessage::GlobalBegin(GlobalBeginRequest {
        timeout_ms: 30_000,
        transaction_name: Some("first".into()),
    });
    c.send(frame(MessageType::Request, id, &begin))
        .await
        .unwrap();
    let xid = match answer(c).await {
        (got, SeataMessage::GlobalBeginResponse(r)) if got == id => r.xid.unwrap(),
        other => panic!("{other:?}"),
    };
    rm.branch_register(&xid, BranchType::AT, "db-a", Some("t:1"), None)
        .await
        .unwrap();
    xid
}

/// One-way MergedWarpMessage, frame id 10: commit `xid` (request id 21), then begin
/// another transaction (request id 22).
fn commit_and_begin(xid: &str) -> Frame {
    let merged = SeataMessage::Merged(MergedWarpMessage {
        msgs: vec![
            SeataMessage::GlobalCommit(GlobalEndRequest {
                xid: xid.into(),
                extra_data: None,
            }),
            SeataMessage::GlobalBegin(GlobalBeginRequest {
                timeout_ms: 30_000,
                transaction_name: Some("second".into()),
            }),
        ],
        msg_ids: vec![21, 22],
    });
    frame(MessageType::Oneway, 10, &merged)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merged_begin_is_answered_while_the_commit_beside_it_is_in_phase_two() {
    let gate = Gate::new();
    let (tc, rm) = world_with(quick_options(), &gate).await;
    let mut c = tm_registered(&tc, SEATA_VERSION).await;
    let xid = begin_with_branch(&mut c, 2, &rm).await;

    c.send(commit_and_begin(&xid)).await.unwrap();
    // The begin's answer comes while the commit is held in phase two (the gate is shut
    // until after this answer): a BatchResultMessage for the merged frame (id 10) with
    // the begin's result under its own request id.
    match &batch_answer(&mut c, 10, &[22]).await[..] {
        [SeataMessage::GlobalBeginResponse(r)] => {
            assert!(r.result.is_success(), "{r:?}");
            let second = r.xid.as_deref().unwrap();
            assert_ne!(second, xid);
            assert_eq!(tc.tc.status(second), GlobalStatus::Begin);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(tc.tc.status(&xid), GlobalStatus::Committing);
    let stats = tc.tc.stats();
    assert_eq!(stats.batch_results.load(Ordering::Relaxed), 1);

    // Phase two goes on: the commit's answer follows, for the same frame id.
    gate.open();
    match &batch_answer(&mut c, 10, &[21]).await[..] {
        [SeataMessage::GlobalCommitResponse(r)] => {
            assert!(r.result.is_success(), "{r:?}");
            assert_eq!(r.global_status, GlobalStatus::Committed);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(stats.batch_results.load(Ordering::Relaxed), 2);
    assert_eq!(stats.merge_results.load(Ordering::Relaxed), 0);
    assert_eq!(stats.merged_frames.load(Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_ready_together_share_one_batch_result() {
    let gate = Gate::new();
    gate.open();
    let (tc, rm) = world_with(quick_options(), &gate).await;
    let mut c = tm_registered(&tc, "1.5.0").await;
    let xid = begin_with_branch(&mut c, 2, &rm).await;
    // Three requests the TC answers without waiting on anyone: all ready in the first
    // round, so one answer carries the three, each beside its own request id.
    let status = |xid: &str| {
        SeataMessage::GlobalStatus(GlobalEndRequest {
            xid: xid.into(),
            extra_data: None,
        })
    };
    let merged = SeataMessage::Merged(MergedWarpMessage {
        msgs: vec![
            status(&xid),
            SeataMessage::GlobalBegin(GlobalBeginRequest::default()),
            status("127.0.0.1:1:404"),
        ],
        msg_ids: vec![31, 32, 33],
    });
    c.send(frame(MessageType::Oneway, 11, &merged))
        .await
        .unwrap();
    match &batch_answer(&mut c, 11, &[31, 32, 33]).await[..] {
        [
            SeataMessage::GlobalStatusResponse(s1),
            SeataMessage::GlobalBeginResponse(begin),
            SeataMessage::GlobalStatusResponse(s3),
        ] => {
            assert_eq!(s1.global_status, GlobalStatus::Begin);
            assert!(begin.xid.is_some());
            assert_eq!(s3.global_status, GlobalStatus::Finished);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(tc.tc.stats().batch_results.load(Ordering::Relaxed), 1);
}

/// Old clients (before 1.5.0, or no version) and a TC with batch responses off: one
/// MergeResultMessage, results by position, sent once the held commit is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_clients_and_batch_responses_off_get_one_merge_result_in_order() {
    for (batch_send_response, version) in [(true, "1.4.2"), (true, ""), (false, SEATA_VERSION)] {
        let case = format!("batch responses {batch_send_response}, client version {version:?}");
        let gate = Gate::new();
        let options = TcOptions {
            batch_send_response,
            ..quick_options()
        };
        let (tc, rm) = world_with(options, &gate).await;
        let mut c = tm_registered(&tc, version).await;
        let xid = begin_with_branch(&mut c, 2, &rm).await;
        c.send(commit_and_begin(&xid)).await.unwrap();

        // The commit reached the RM, so the begin served beside it is done; nothing
        // is answered until the commit is.
        let arrived = gate.arrived.notified();
        tokio::time::timeout(Duration::from_secs(5), arrived)
            .await
            .unwrap_or_else(|_| panic!("{case}: no phase two"));
        let stats = tc.tc.stats();
        assert_eq!(stats.merge_results.load(Ordering::Relaxed), 0, "{case}");
        gate.open();
        match answer(&mut c).await {
            (10, SeataMessage::MergeResult(m)) => match &m.msgs[..] {
                [
                    SeataMessage::GlobalCommitResponse(commit),
                    SeataMessage::GlobalBeginResponse(begin),
                ] => {
                    assert_eq!(commit.global_status, GlobalStatus::Committed, "{case}");
                    assert!(begin.result.is_success(), "{case}: {begin:?}");
                    assert_ne!(begin.xid.as_deref(), Some(xid.as_str()), "{case}");
                }
                other => panic!("{case}: {other:?}"),
            },
            other => panic!("{case}: {other:?}"),
        }
        assert_eq!(stats.merge_results.load(Ordering::Relaxed), 1, "{case}");
        assert_eq!(stats.batch_results.load(Ordering::Relaxed), 0, "{case}");
    }
}

/// meshline's own TM with batching on: a begin merged with a commit held in phase two
/// returns while the commit still waits.
#[tokio::test(flavor = "current_thread")]
async fn a_batching_tm_begins_while_its_merged_commit_waits_for_phase_two() {
    let gate = Gate::new();
    let (tc, rm) = world_with(quick_options(), &gate).await;
    let hub = Arc::new(meshline::WatchHub::new(
        "test",
        meshline::EmptyProtection::Apply,
    ));
    publish(&hub, std::slice::from_ref(&tc));
    let tm = meshline::rpc::tm::TransactionManager::builder()
        .watch(hub.subscribe("c"), "c")
        .transaction_service_group(GROUP)
        .load_balance_name("XID")
        .configure(|o| o.transport.batch = Some(meshline::rpc::BatchOptions::default()))
        .connected(1)
        .await;
    let first = tm.begin("first", Duration::from_secs(30)).await.unwrap();
    rm.branch_register(first.xid(), BranchType::AT, "db-a", Some("t:1"), None)
        .await
        .unwrap();
    let merged_before = tc.tc.stats().merged_frames.load(Ordering::Relaxed);

    // Commit and begin are queued in the same turn of this (only) thread, so the
    // connection's writer merges them into one frame.
    let commit = first.commit();
    let begin = tm.begin("second", Duration::from_secs(30));
    tokio::pin!(commit);
    let second = tokio::time::timeout(Duration::from_secs(5), async {
        tokio::select! {
            r = &mut commit => panic!("the commit ended while its phase two was held: {r:?}"),
            r = begin => r.unwrap(),
        }
    })
    .await
    .expect("the begin is answered while the commit beside it waits");
    assert_eq!(
        tc.tc.stats().merged_frames.load(Ordering::Relaxed),
        merged_before + 1,
        "commit and begin went in one merged frame"
    );
    assert_eq!(tc.tc.status(second.xid()), GlobalStatus::Begin);
    assert_eq!(tc.tc.status(first.xid()), GlobalStatus::Committing);
    gate.open();
    assert_eq!(commit.await.unwrap(), GlobalStatus::Committed);
    assert_eq!(second.rollback().await.unwrap(), GlobalStatus::Rollbacked);
}
