//! Global transactions end to end: meshline's TM and RMs against the in-memory TC,
//! phase two seen at the RMs, locks, timeouts, batching on and off.

use crate::tx_world;

use std::sync::atomic::Ordering;
use std::time::Duration;

use meshline::rpc::TransactionError;
use meshline::rpc::message::{BranchStatus, BranchType, GlobalStatus, TransactionExceptionCode};
use tx_world::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_drives_phase_two_at_both_rms() {
    let (hub, tcs) = world(1).await;
    let tm = tm(&hub, 1).await;
    let (h1, h2) = (Recorder::default(), Recorder::default());
    let rm1 = rm(
        &hub,
        "stock",
        "jdbc:mysql://db-a/stock",
        h1.clone(),
        true,
        1,
    )
    .await;
    let rm2 = rm(&hub, "account", "tcc:account", h2.clone(), true, 1).await;

    let tx = tm
        .begin("place-order", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(
        tx.xid().starts_with(tcs[0].tc.xid_address()),
        "the XID names the TC that began it: {}",
        tx.xid()
    );
    let b1 = rm1
        .branch_register(
            tx.xid(),
            BranchType::AT,
            "jdbc:mysql://db-a/stock",
            Some("stock:1,2"),
            None,
        )
        .await
        .unwrap();
    let b2 = rm2
        .branch_register(
            tx.xid(),
            BranchType::TCC,
            "tcc:account",
            None,
            Some("{\"amount\":5}"),
        )
        .await
        .unwrap();
    assert_ne!(b1, b2);
    rm1.branch_report(
        tx.xid(),
        b1,
        BranchType::AT,
        "jdbc:mysql://db-a/stock",
        BranchStatus::PhaseOneDone,
        None,
    )
    .await
    .unwrap();
    assert_eq!(tx.status().await.unwrap(), GlobalStatus::Begin);
    assert_eq!(tcs[0].tc.locked_rows(), 2);

    assert_eq!(tx.commit().await.unwrap(), GlobalStatus::Committed);
    // Commit answers once phase two is done: both RMs were asked, once each.
    assert_eq!(h1.calls(), vec![Call::Commit(tx.xid().into(), b1)]);
    assert_eq!(h2.calls(), vec![Call::Commit(tx.xid().into(), b2)]);
    assert_eq!(tcs[0].tc.open_sessions(), 0);
    assert_eq!(tcs[0].tc.locked_rows(), 0);
    assert_eq!(
        tx.status().await.unwrap(),
        GlobalStatus::Finished,
        "a finished transaction is forgotten"
    );
    assert_eq!(tcs[0].tc.stats().committed.load(Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_undoes_the_last_branch_first() {
    let (hub, tcs) = world(1).await;
    let tm = tm(&hub, 1).await;
    // One recorder for both RMs: it sees the order of their rollbacks.
    let h = Recorder::default();
    let rm1 = rm(&hub, "stock", "db-a", h.clone(), true, 1).await;
    let rm2 = rm(&hub, "account", "db-b", h.clone(), true, 1).await;
    let tx = tm
        .begin("place-order", Duration::from_secs(30))
        .await
        .unwrap();
    let b1 = rm1
        .branch_register(tx.xid(), BranchType::AT, "db-a", Some("t:1"), None)
        .await
        .unwrap();
    let b2 = rm2
        .branch_register(tx.xid(), BranchType::AT, "db-b", Some("t:1"), None)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    assert_eq!(tx.rollback().await.unwrap(), GlobalStatus::Rollbacked);
    assert_eq!(
        h.calls(),
        vec![
            Call::Rollback(tx.xid().into(), b2),
            Call::Rollback(tx.xid().into(), b1)
        ]
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(tcs[0].tc.locked_rows(), 0);
    assert_eq!(tcs[0].tc.stats().rolled_back.load(Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_row_is_a_lock_conflict_until_its_transaction_ends() {
    let h = Recorder::default();
    let (_hub, tcs, tm, rm) = stock_world(1, h.clone()).await;
    let first = tm.begin("first", Duration::from_secs(30)).await.unwrap();
    let second = tm.begin("second", Duration::from_secs(30)).await.unwrap();
    rm.branch_register(first.xid(), BranchType::AT, "db-a", Some("stock:7"), None)
        .await
        .unwrap();

    let err = rm
        .branch_register(
            second.xid(),
            BranchType::AT,
            "db-a",
            Some("stock:8,7"),
            None,
        )
        .await
        .unwrap_err();
    match &err {
        TransactionError::Refused {
            exception,
            message,
            xid,
            ..
        } => {
            assert_eq!(*exception, TransactionExceptionCode::LockKeyConflict);
            assert_eq!(xid.as_deref(), Some(second.xid()));
            let m = message.as_deref().unwrap();
            assert!(
                m.contains("Global lock acquire failed") && m.contains("stock^^^7"),
                "{m}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err.exception_code(),
        TransactionExceptionCode::LockKeyConflict
    );
    // Nothing of the refused branch stays locked: stock:8 is free, stock:7 is not.
    assert!(
        rm.lock_query(BranchType::AT, "db-a", second.xid(), "stock:8")
            .await
            .unwrap()
    );
    assert!(
        !rm.lock_query(BranchType::AT, "db-a", second.xid(), "stock:7")
            .await
            .unwrap()
    );
    assert!(
        rm.lock_query(BranchType::AT, "db-a", first.xid(), "stock:7")
            .await
            .unwrap(),
        "its own row"
    );
    // Another resource's row 7 is another row.
    assert!(
        rm.lock_query(BranchType::AT, "db-b", second.xid(), "stock:7")
            .await
            .unwrap()
    );

    assert_eq!(first.commit().await.unwrap(), GlobalStatus::Committed);
    rm.branch_register(second.xid(), BranchType::AT, "db-a", Some("stock:7"), None)
        .await
        .expect("free once the holder committed");
    assert_eq!(second.rollback().await.unwrap(), GlobalStatus::Rollbacked);
    // The refused registration: its first attempt and the RM's retries
    // (`client.rm.lock.retryTimes`, 30 by default).
    assert_eq!(tcs[0].tc.stats().lock_conflicts.load(Ordering::Relaxed), 31);
    assert_eq!(tcs[0].tc.locked_rows(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_past_its_timeout_is_rolled_back() {
    let h = Recorder::default();
    let (_hub, tcs, tm, rm) = stock_world(1, h.clone()).await;

    // The TC's timeout: nobody commits, the TC rolls back on its own.
    let started = std::time::Instant::now();
    let tx = tm
        .begin("forgotten", Duration::from_millis(300))
        .await
        .unwrap();
    let b = rm
        .branch_register(tx.xid(), BranchType::AT, "db-a", Some("t:1"), None)
        .await
        .unwrap();
    let calls = h.wait_calls(1, Duration::from_secs(3)).await;
    assert_eq!(calls, vec![Call::Rollback(tx.xid().into(), b)]);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300),
        "rolled back before its timeout: {took:?}"
    );
    assert!(
        took < Duration::from_millis(300 + 500),
        "the 50 ms housekeeping took {took:?}"
    );
    assert!(
        until(Duration::from_secs(1), || tcs[0]
            .tc
            .stats()
            .timed_out
            .load(Ordering::Relaxed)
            == 1)
        .await
    );
    assert_eq!(tcs[0].tc.locked_rows(), 0);
    // A commit now finds it gone: Seata's TM calls that heuristic.
    let err = tm.commit(tx.xid()).await.unwrap_err();
    assert_eq!(
        err.exception_code(),
        TransactionExceptionCode::CommitHeuristic,
        "{err}"
    );
    assert_eq!(err.global_status(), Some(GlobalStatus::Finished));

    // The TM's own check: a transaction past its timeout is rolled back, not committed.
    let tx = tm.begin("slow", Duration::from_millis(200)).await.unwrap();
    let b = rm
        .branch_register(tx.xid(), BranchType::AT, "db-a", Some("t:2"), None)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await; // outlive the timeout on purpose
    let err = tx.commit().await.unwrap_err();
    assert_eq!(
        err.exception_code(),
        TransactionExceptionCode::TransactionTimeout,
        "{err}"
    );
    assert!(err.to_string().contains("rolled back instead"), "{err}");
    let calls = h.wait_calls(2, Duration::from_secs(3)).await;
    assert_eq!(calls[1], Call::Rollback(tx.xid().into(), b));
    assert!(!calls.iter().any(|c| matches!(c, Call::Commit(..))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batching_on_and_off_give_the_same_results() {
    async fn run(batch: bool) -> (usize, usize, u64, u64) {
        let (hub, tcs) = world(2).await;
        let tm = tm(&hub, 2).await;
        let (h1, h2) = (Recorder::default(), Recorder::default());
        let rm1 = rm(&hub, "stock", "db-a", h1.clone(), batch, 2).await;
        let rm2 = rm(&hub, "account", "db-b", h2.clone(), batch, 2).await;
        let mut tasks = Vec::new();
        for i in 0..64 {
            let (tm, rm1, rm2) = (tm.clone(), rm1.clone(), rm2.clone());
            tasks.push(tokio::spawn(async move {
                let tx = tm
                    .begin(&format!("order-{i}"), Duration::from_secs(30))
                    .await?;
                let key = format!("t:{i}");
                let (a, b) = tokio::join!(
                    rm1.branch_register(tx.xid(), BranchType::AT, "db-a", Some(&key), None),
                    rm2.branch_register(tx.xid(), BranchType::AT, "db-b", Some(&key), None),
                );
                a?;
                b?;
                // Every other one rolls back.
                if i % 2 == 0 {
                    tx.commit().await
                } else {
                    tx.rollback().await
                }
            }));
        }
        let mut committed = 0;
        let mut rolled_back = 0;
        for t in tasks {
            match t.await.unwrap().unwrap() {
                GlobalStatus::Committed => committed += 1,
                GlobalStatus::Rollbacked => rolled_back += 1,
                other => panic!("{other}"),
            }
        }
        assert_eq!(h1.calls().len(), 64);
        assert_eq!(h2.calls().len(), 64);
        let merged: u64 = tcs
            .iter()
            .map(|t| t.tc.stats().merged_frames.load(Ordering::Relaxed))
            .sum();
        let open: u64 = tcs
            .iter()
            .map(|t| t.tc.open_sessions() as u64 + t.tc.locked_rows() as u64)
            .sum();
        (committed, rolled_back, merged, open)
    }
    let (c_off, r_off, merged_off, open_off) = run(false).await;
    let (c_on, r_on, merged_on, open_on) = run(true).await;
    assert_eq!((c_off, r_off), (32, 32));
    assert_eq!((c_on, r_on), (c_off, r_off));
    assert_eq!((open_off, open_on), (0, 0));
    assert_eq!(merged_off, 0, "no MergedWarpMessage without batching");
    assert!(
        merged_on > 0,
        "64 concurrent registrations should have been merged at least once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_rm_is_retried_until_it_commits() {
    let h = Recorder {
        fail_first: std::sync::Arc::new(std::sync::Mutex::new(2)),
        ..Recorder::default()
    };
    let (_hub, tcs, tm, rm) = stock_world(1, h.clone()).await;
    let tx = tm.begin("flaky", Duration::from_secs(30)).await.unwrap();
    let b = rm
        .branch_register(tx.xid(), BranchType::AT, "db-a", None, None)
        .await
        .unwrap();
    // The first answer is a failure: the TM hears the TC will keep trying.
    assert_eq!(tx.commit().await.unwrap(), GlobalStatus::CommitRetrying);
    let calls = h.wait_calls(3, Duration::from_secs(3)).await;
    assert!(
        calls.iter().all(|c| *c == Call::Commit(tx.xid().into(), b)),
        "{calls:?}"
    );
    assert!(until(Duration::from_secs(2), || tcs[0].tc.open_sessions() == 0).await);
    assert_eq!(tx.status().await.unwrap(), GlobalStatus::Finished);
    assert_eq!(tcs[0].tc.stats().committed.load(Ordering::Relaxed), 1);
}
