//! The transaction in context (`meshline::rpc::tx`) against the in-memory TC: each of
//! Seata's six propagation modes, suspend and resume, commit and rollback by the
//! block's result and by a rollback rule, hooks in Seata's order, a panic inside the
//! block, a block dropped before its end, a block that outlives its timeout, and a
//! begin the TC refuses.

use crate::tx_world;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use meshline::rpc::TransactionError;
use meshline::rpc::message::{BranchType, GlobalStatus, TransactionExceptionCode};
use meshline::rpc::rm::ResourceManager;
use meshline::rpc::tx::{self, Ended, Propagation, Role, TransactionHook, TxError};
use tx_world::*;

const RESOURCE: &str = "tcc:account";

/// A TC, a TM and an RM whose phase two is recorded.
struct World {
    tcs: Vec<Tc>,
    tm: meshline::rpc::tm::TransactionManager,
    rm: ResourceManager,
    phase_two: Recorder,
}

async fn world1() -> World {
    let (hub, tcs) = world(1).await;
    let tm = tm(&hub, 1).await;
    let phase_two = Recorder::default();
    let rm = rm(&hub, "account", RESOURCE, phase_two.clone(), true, 1).await;
    World {
        tcs,
        tm,
        rm,
        phase_two,
    }
}

impl World {
    fn stat(
        &self,
        f: impl Fn(&meshline_example_tc::TcStats) -> &std::sync::atomic::AtomicU64,
    ) -> u64 {
        f(self.tcs[0].tc.stats()).load(Ordering::Relaxed)
    }

    /// Registers a TCC branch under the current transaction (what a service called
    /// inside it does), and returns its id.
    async fn branch(&self) -> i64 {
        let xid = tx::current_xid().expect("called inside a transaction");
        self.rm
            .branch_register(&xid, BranchType::TCC, RESOURCE, None, None)
            .await
            .unwrap()
    }
}

/// The hook moments, in order, of a transaction begun and then rolled back.
const ROLLED_BACK_MOMENTS: [&str; 5] = [
    "before_begin",
    "after_begin",
    "before_rollback",
    "after_rollback",
    "after_completion",
];

/// Hook calls, in order, as `moment xid`.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<String>>>);

impl Events {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
    /// The calls taken so far, each without its XID.
    fn moments(&self) -> Vec<String> {
        self.take()
            .iter()
            .map(|e| e.split(' ').next().unwrap().to_string())
            .collect()
    }
    fn push(&self, s: String) {
        self.0.lock().unwrap().push(s);
    }
}

impl TransactionHook for Events {
    fn before_begin(&self) {
        self.push("before_begin".into());
    }
    fn after_begin(&self, xid: &str) {
        self.push(format!("after_begin {xid}"));
    }
    fn before_commit(&self, xid: &str) {
        self.push(format!("before_commit {xid}"));
    }
    fn after_commit(&self, xid: &str) {
        self.push(format!("after_commit {xid}"));
    }
    fn before_rollback(&self, xid: &str) {
        self.push(format!("before_rollback {xid}"));
    }
    fn after_rollback(&self, xid: &str) {
        self.push(format!("after_rollback {xid}"));
    }
    fn after_completion(&self, xid: Option<&str>) {
        self.push(format!("after_completion {}", xid.unwrap_or("-")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_begins_and_commits_and_a_nested_required_joins() {
    let w = &world1().await;
    let events = Events::default();
    let outer = w.tm.transactional("place-order").hook(events.clone());
    let (xid, b1, b2) = outer
        .run(|tx| async {
            let tx = tx.expect("REQUIRED with none current begins one");
            assert_eq!(tx.role(), Role::Launcher);
            assert_eq!(tx::current_xid().as_deref(), Some(tx.xid()));
            let b1 = w.branch().await;
            // A nested REQUIRED block joins: same XID, and it neither commits nor
            // calls its own hooks.
            let inner_events = Events::default();
            let b2 =
                w.tm.transactional("reserve-stock")
                    .hook(inner_events.clone())
                    .run(|inner| async move {
                        assert_eq!(inner.map(|c| c.xid().to_string()), tx::current_xid());
                        Ok::<_, String>(w.branch().await)
                    })
                    .await
                    .unwrap();
            assert!(
                inner_events.take().is_empty(),
                "a joined block calls no hooks"
            );
            assert_eq!(w.stat(|s| &s.begun), 1, "the nested block began nothing");
            Ok::<_, String>((tx.xid().to_string(), b1, b2))
        })
        .await
        .unwrap();
    assert!(tx::current().is_none(), "nothing current after the block");
    assert_eq!(w.stat(|s| &s.committed), 1);
    let mut calls = w.phase_two.wait_calls(2, Duration::from_secs(5)).await;
    calls.sort_by_key(|c| format!("{c:?}"));
    assert_eq!(
        calls,
        vec![Call::Commit(xid.clone(), b1), Call::Commit(xid.clone(), b2)]
    );
    assert_eq!(
        events.take(),
        vec![
            "before_begin".to_string(),
            format!("after_begin {xid}"),
            format!("before_commit {xid}"),
            format!("after_commit {xid}"),
            format!("after_completion {xid}"),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_rolls_back_where_the_transaction_began_even_from_a_nested_block() {
    let w = &world1().await;
    let events = Events::default();
    let r: Result<(), TxError<String>> = w
        .tm
        .transactional("place-order")
        .hook(events.clone())
        .run(|_| async {
            w.branch().await;
            let inner: Result<(), TxError<String>> =
                w.tm.transactional("reserve-stock")
                    .run(|_| async { Err("out of stock".to_string()) })
                    .await;
            match inner {
                Err(TxError::Failed {
                    error,
                    ended: Ended::LeftToLauncher,
                }) => Err(error),
                other => panic!("the nested block must leave the rollback to the outer: {other:?}"),
            }
        })
        .await;
    let Err(TxError::Failed {
        error,
        ended: Ended::RolledBack(status),
    }) = r
    else {
        panic!("rolled back with the block's error, got {r:?}");
    };
    assert_eq!(error, "out of stock");
    assert_eq!(status, GlobalStatus::Rollbacked);
    assert_eq!(w.stat(|s| &s.rolled_back), 1);
    assert_eq!(w.stat(|s| &s.committed), 0);
    let calls = w.phase_two.wait_calls(1, Duration::from_secs(5)).await;
    assert!(matches!(calls[0], Call::Rollback(..)), "{calls:?}");
    assert_eq!(events.moments(), ROLLED_BACK_MOMENTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requires_new_suspends_the_outer_transaction_and_ends_its_own() {
    let w = &world1().await;
    let r: Result<(), TxError<&str>> =
        w.tm.transactional("place-order")
            .run(|outer| async move {
                let outer = outer.unwrap().xid().to_string();
                let inner_xid =
                    w.tm.transactional("audit-log")
                        .propagation(Propagation::RequiresNew)
                        .run(|inner| async move {
                            let inner = inner.unwrap();
                            assert_eq!(inner.role(), Role::Launcher);
                            assert_eq!(tx::current_xid().as_deref(), Some(inner.xid()));
                            w.branch().await;
                            Ok::<_, &str>(inner.xid().to_string())
                        })
                        .await
                        .unwrap();
                assert_ne!(inner_xid, outer, "a new transaction");
                assert_eq!(
                    tx::current_xid(),
                    Some(outer),
                    "the outer transaction is current again"
                );
                assert_eq!(
                    w.stat(|s| &s.committed),
                    1,
                    "the inner one committed on its own"
                );
                w.branch().await;
                Err("payment refused")
            })
            .await;
    assert!(
        matches!(
            r,
            Err(TxError::Failed {
                ended: Ended::RolledBack(_),
                ..
            })
        ),
        "{r:?}"
    );
    assert_eq!(w.stat(|s| &s.begun), 2);
    assert_eq!(
        w.stat(|s| &s.committed),
        1,
        "the outer rollback leaves the inner commit"
    );
    assert_eq!(w.stat(|s| &s.rolled_back), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_supported_runs_outside_and_resumes_the_outer_transaction() {
    let w = &world1().await;
    let outer =
        w.tm.transactional("place-order")
            .run(|outer| async move {
                let outer = outer.unwrap().xid().to_string();
                let r: Result<(), TxError<&str>> =
                    w.tm.transactional("report")
                        .propagation(Propagation::NotSupported)
                        .run(|none| async move {
                            assert!(none.is_none());
                            assert_eq!(tx::current_xid(), None, "suspended");
                            Err("report failed")
                        })
                        .await;
                assert!(
                    matches!(
                        r,
                        Err(TxError::Failed {
                            ended: Ended::NoTransaction,
                            ..
                        })
                    ),
                    "{r:?}"
                );
                assert_eq!(
                    tx::current_xid().as_deref(),
                    Some(outer.as_str()),
                    "resumed"
                );
                Ok::<_, &str>(outer)
            })
            .await
            .unwrap();
    assert!(!outer.is_empty());
    assert_eq!(w.stat(|s| &s.begun), 1);
    assert_eq!(
        w.stat(|s| &s.committed),
        1,
        "the block's error did not touch the outer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supports_joins_one_and_begins_none() {
    let w = &world1().await;
    let supports =
        w.tm.transactional("read")
            .propagation(Propagation::Supports);
    let alone = supports
        .run(|tx| async move { Ok::<_, ()>((tx.is_none(), tx::current_xid())) })
        .await
        .unwrap();
    assert_eq!(alone, (true, None));
    assert_eq!(w.stat(|s| &s.begun), 0, "SUPPORTS begins nothing");
    let joined =
        w.tm.transactional("place-order")
            .run(|outer| async {
                let outer = outer.unwrap().xid().to_string();
                let seen = supports
                    .run(|tx| async move { Ok::<_, ()>(tx.map(|c| c.xid().to_string())) })
                    .await
                    .unwrap();
                Ok::<_, ()>((outer, seen))
            })
            .await
            .unwrap();
    assert_eq!(Some(joined.0), joined.1);
    assert_eq!(w.stat(|s| &s.begun), 1);
}

/// A block's future, boxed (so one helper makes blocks for every test).
type Block =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Option<String>, ()>> + Send>>;

/// A block that records that it ran, and returns the XID it saw.
fn marked(
    ran: &Arc<Mutex<Vec<&'static str>>>,
    name: &'static str,
) -> impl FnOnce(Option<tx::Current>) -> Block {
    let ran = ran.clone();
    move |tx| {
        Box::pin(async move {
            ran.lock().unwrap().push(name);
            Ok(tx.map(|c| c.xid().to_string()))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_runs_alone_and_refuses_a_current_transaction() {
    let w = &world1().await;
    let never = w.tm.transactional("n").propagation(Propagation::Never);
    let ran = Arc::new(Mutex::new(Vec::new()));
    assert_eq!(never.run(marked(&ran, "alone")).await.unwrap(), None);
    let (outer, inside) =
        w.tm.transactional("place-order")
            .run(|outer| async {
                let outer = outer.unwrap().xid().to_string();
                Ok::<_, ()>((outer, never.run(marked(&ran, "inside")).await))
            })
            .await
            .unwrap();
    match inside {
        Err(TxError::Existing { xid }) => assert_eq!(xid, outer),
        other => panic!("NEVER inside a transaction: {other:?}"),
    }
    assert_eq!(
        *ran.lock().unwrap(),
        ["alone"],
        "the refused block did not run"
    );
    assert_eq!(w.stat(|s| &s.begun), 1, "NEVER begins nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mandatory_joins_a_current_transaction_and_refuses_its_absence() {
    let w = &world1().await;
    let mandatory = w.tm.transactional("m").propagation(Propagation::Mandatory);
    let ran = Arc::new(Mutex::new(Vec::new()));
    let r = mandatory.run(marked(&ran, "alone")).await;
    assert!(matches!(r, Err(TxError::NoTransaction)), "{r:?}");
    let (outer, inside) =
        w.tm.transactional("place-order")
            .run(|outer| async {
                let outer = outer.unwrap().xid().to_string();
                Ok::<_, ()>((outer, mandatory.run(marked(&ran, "inside")).await))
            })
            .await
            .unwrap();
    assert_eq!(inside.unwrap(), Some(outer), "joined");
    assert_eq!(
        *ran.lock().unwrap(),
        ["inside"],
        "the refused block did not run"
    );
    assert_eq!(w.stat(|s| &s.begun), 1, "MANDATORY begins nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_bound_from_a_request_joins_and_never_ends_the_transaction() {
    let w = &world1().await;
    let global = w.tm.begin("remote", Duration::from_secs(30)).await.unwrap();
    let r: Result<(), TxError<&str>> = tx::with_xid(global.xid(), Some(BranchType::TCC), async {
        let c = tx::current().unwrap();
        assert_eq!(
            (c.role(), c.branch_type()),
            (Role::Participant, Some(BranchType::TCC))
        );
        assert!(
            !tx::register_hook(Events::default()),
            "hooks run where it began"
        );
        w.tm.transactional("handler")
            .run(|_| async {
                w.branch().await;
                Err("refused")
            })
            .await
    })
    .await;
    assert!(
        matches!(
            r,
            Err(TxError::Failed {
                ended: Ended::LeftToLauncher,
                ..
            })
        ),
        "{r:?}"
    );
    assert_eq!(w.stat(|s| &s.begun), 1);
    assert_eq!(
        w.stat(|s| &s.rolled_back),
        0,
        "the participant rolled nothing back"
    );
    assert_eq!(w.tcs[0].tc.status(global.xid()), GlobalStatus::Begin);
    assert_eq!(global.commit().await.unwrap(), GlobalStatus::Committed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_rule_commits_on_the_errors_it_names() {
    let w = &world1().await;
    #[derive(Debug, PartialEq)]
    enum OrderError {
        OutOfStock,
        Db,
    }
    let t = w.tm.transactional("place-order");
    let rule = |e: &OrderError| *e != OrderError::OutOfStock;
    let r = t
        .run_with(rule, |_| async {
            w.branch().await;
            Err::<(), _>(OrderError::OutOfStock)
        })
        .await;
    assert!(
        matches!(
            r,
            Err(TxError::Failed {
                error: OrderError::OutOfStock,
                ended: Ended::Committed(GlobalStatus::Committed)
            })
        ),
        "{r:?}"
    );
    let r = t
        .run_with(rule, |_| async { Err::<(), _>(OrderError::Db) })
        .await;
    assert!(
        matches!(
            r,
            Err(TxError::Failed {
                error: OrderError::Db,
                ended: Ended::RolledBack(_)
            })
        ),
        "{r:?}"
    );
    assert_eq!(
        (w.stat(|s| &s.committed), w.stat(|s| &s.rolled_back)),
        (1, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_inside_the_block_rolls_back_and_goes_on_unwinding() {
    let w = Arc::new(world1().await);
    let events = Events::default();
    let xid = Arc::new(Mutex::new(String::new()));
    let (w2, events2, xid2) = (w.clone(), events.clone(), xid.clone());
    let task = tokio::spawn(async move {
        let w = w2;
        let r: Result<(), TxError<()>> =
            w.tm.transactional("place-order")
                .hook(events2)
                .run(|tx| async {
                    *xid2.lock().unwrap() = tx.unwrap().xid().to_string();
                    w.branch().await;
                    panic!("bug in the business code");
                })
                .await;
        unreachable!("the block panicked, so run must not return: {r:?}");
    });
    let e = task.await.unwrap_err();
    assert!(e.is_panic(), "the panic goes on: {e:?}");
    assert_eq!(
        w.stat(|s| &s.rolled_back),
        1,
        "rolled back before the panic went on"
    );
    let xid = xid.lock().unwrap().clone();
    assert_eq!(w.tcs[0].tc.status(&xid), GlobalStatus::Finished);
    let ev = events.take();
    assert_eq!(
        ev[2..],
        [
            format!("before_rollback {xid}"),
            format!("after_rollback {xid}"),
            format!("after_completion {xid}")
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_dropped_before_its_end_is_rolled_back() {
    let w = &world1().await;
    let events = Events::default();
    let begun = Arc::new(tokio::sync::Notify::new());
    let b = begun.clone();
    let t = w.tm.transactional("place-order").hook(events.clone());
    let run = t.run(|_| async {
        w.branch().await;
        b.notify_one();
        std::future::pending::<Result<(), ()>>().await
    });
    // The caller gives up once the block is under way (a request timeout, a
    // cancelled task).
    tokio::select! {
        _ = run => panic!("the block never ends"),
        _ = begun.notified() => {}
    }
    let calls = w.phase_two.wait_calls(1, Duration::from_secs(5)).await;
    assert!(matches!(calls[0], Call::Rollback(..)), "{calls:?}");
    assert!(
        until(Duration::from_secs(5), || events.0.lock().unwrap().len()
            == 5)
        .await
    );
    assert_eq!(w.stat(|s| &s.rolled_back), 1);
    let ev = events.take();
    assert!(
        ev[2].starts_with("before_rollback") && ev[4].starts_with("after_completion"),
        "{ev:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_that_outlives_its_timeout_is_rolled_back_instead_of_committed() {
    let w = &world1().await;
    let events = Events::default();
    let r: Result<(), TxError<()>> =
        w.tm.transactional("slow")
            .timeout(Duration::from_millis(300))
            .hook(events.clone())
            .run(|_| async {
                let started = std::time::Instant::now();
                w.branch().await;
                // Until the TC has timed it out and the 300 ms have passed here too (the
                // block began after the TM's begin: past it here, past it for the TM).
                let outlived = until(Duration::from_secs(10), || {
                    w.stat(|s| &s.timed_out) == 1 && started.elapsed() > Duration::from_millis(300)
                })
                .await;
                assert!(outlived, "the TC never timed the transaction out");
                Ok(())
            })
            .await;
    let Err(TxError::CommitFailed {
        error: None,
        commit,
    }) = r
    else {
        panic!("a commit refused for the timeout: {r:?}");
    };
    assert_eq!(
        commit.exception_code(),
        TransactionExceptionCode::TransactionTimeout,
        "{commit}"
    );
    assert_eq!(w.stat(|s| &s.committed), 0);
    assert_eq!(events.moments(), ROLLED_BACK_MOMENTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_begin_runs_nothing_and_completes_the_hooks() {
    let w = &world1().await;
    w.tcs[0].tc.fail_store(true);
    let events = Events::default();
    let ran = Arc::new(Mutex::new(false));
    let r: Result<(), TxError<()>> =
        w.tm.transactional("place-order")
            .hook(events.clone())
            .run(|_| async {
                *ran.lock().unwrap() = true;
                Ok(())
            })
            .await;
    match r {
        Err(TxError::Begin(TransactionError::Refused { exception, .. })) => {
            assert_eq!(exception, TransactionExceptionCode::FailedStore)
        }
        other => panic!("begin refused: {other:?}"),
    }
    assert!(!*ran.lock().unwrap());
    assert_eq!(events.take(), ["before_begin", "after_completion -"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_registered_inside_the_block_runs_at_its_commit() {
    let w = &world1().await;
    let events = Events::default();
    let e = events.clone();
    let xid =
        w.tm.transactional("place-order")
            .run(|tx| async move {
                assert!(
                    tx::register_hook(e),
                    "registered on the transaction begun here"
                );
                // A nested REQUIRED block registers on the same transaction.
                w.tm.transactional("inner")
                    .run(|_| async { Ok::<_, ()>(tx::register_hook(Events::default())) })
                    .await
                    .unwrap()
                    .then_some(())
                    .unwrap();
                Ok::<_, ()>(tx.unwrap().xid().to_string())
            })
            .await
            .unwrap();
    assert_eq!(
        events.take(),
        [
            format!("before_commit {xid}"),
            format!("after_commit {xid}"),
            format!("after_completion {xid}")
        ]
    );
}
