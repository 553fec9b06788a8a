//! A Seata raft cluster changing its leader, as a client lives it. Three TCs; the raft
//! backend follows their metadata (served by the raft double, `storeMode` raft: only
//! the leader is listed); four callers begin transactions without pause. Then the
//! leader steps down (from now on it answers every transaction request `Failed` /
//! `NotRaftLeader` and applies nothing, as Seata's `RaftCoordinator` does) and the
//! metadata names a new leader, with a new term.
//!
//! Seata's own client rethrows a begin's `NotRaftLeader` as `BeginFailed` and leaves
//! the follower in its list until the metadata says otherwise. meshline reads the
//! answer as misdirected (`Outcome::Misdirected`): the follower is set aside at once,
//! the metadata is read again at once, and the begin, which nothing applied, is sent
//! again to the new leader. The test holds:
//!
//! - no begin fails, through the change;
//! - the first begin answered by the new leader comes within [`NEW_LEADER_WITHIN`]
//!   of the change;
//! - once a `NotRaftLeader` was read, no request goes to a follower: the old leader
//!   answers at most one per caller (the begins already sent when it stepped down),
//!   and the TCs that were always followers get none.

use crate::tx_world;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use meshline::rpc::ServerConfig;
use meshline_testkit::{RaftDouble, RaftDoubleOptions};
use tx_world::{quick_options, start_tc, tm_watching, until};

const CALLERS: usize = 4;
/// From the leader change to the first begin the new leader answers: the metadata read
/// (at once: the term moved, and the client asks), a connection and its RegisterTM.
const NEW_LEADER_WITHIN: Duration = Duration::from_millis(1500);

/// The TC port a begin's XID names (`ip:port:id`).
fn tc_of(xid: &str) -> Option<u16> {
    xid.split(':').nth(1)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_change_moves_every_begin_to_the_new_leader() {
    let mut tcs = Vec::new();
    for _ in 0..3 {
        tcs.push(start_tc(quick_options(), ServerConfig::default()).await);
    }
    let port = |i: usize| tcs[i].server.local_addr().port();
    let addr = |i: usize| format!("127.0.0.1:{}", port(i));
    let d = RaftDouble::start(RaftDoubleOptions::default()).unwrap();
    d.set_members("default", &[&addr(0), &addr(1), &addr(2)], Some(0));
    tcs[1].tc.raft_follower(true);
    tcs[2].tc.raft_follower(true);

    let config = meshline::ConfigLoader::new()
        .set("registry.type", "raft")
        .set("registry.raft.serverAddr", d.server_addr())
        .load()
        .unwrap();
    let registry = meshline::registry::from_config(&config).await.unwrap();
    let watch = registry.watch("default").await.unwrap();
    let tm = tm_watching(watch, "default", 1).await;

    // Every begin: when it was answered, and by which TC (or its error).
    type Log = Arc<Mutex<Vec<(Instant, Result<u16, String>)>>>;
    let log: Log = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut callers = Vec::new();
    for c in 0..CALLERS {
        let (tm, log, stop) = (tm.clone(), log.clone(), stop.clone());
        callers.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let r = tm
                    .begin(&format!("order-{c}-{n}"), Duration::from_secs(5))
                    .await
                    .map(|tx| tc_of(tx.xid()).unwrap_or(0))
                    .map_err(|e| e.to_string());
                log.lock().unwrap().push((Instant::now(), r));
            }
        }));
    }
    let begun = |i: usize| tcs[i].tc.stats().begun.load(Ordering::Relaxed);
    assert!(
        until(Duration::from_secs(5), || begun(0) >= 20).await,
        "never begins on the first leader"
    );

    // The leader steps down (and refuses a begin), another is elected, the metadata
    // says so.
    let refused = |i: usize| tcs[i].tc.stats().not_leader.load(Ordering::Relaxed);
    tcs[0].tc.raft_follower(true);
    assert!(
        until(Duration::from_secs(5), || refused(0) >= 1).await,
        "never a NotRaftLeader"
    );
    tcs[1].tc.raft_follower(false);
    let changed = Instant::now();
    d.set_leader("default", &addr(1));
    assert!(
        until(Duration::from_secs(5), || begun(1) >= 20).await,
        "never begins on the new leader"
    );
    stop.store(true, Ordering::Relaxed);
    for c in callers {
        c.await.unwrap();
    }

    let log = log.lock().unwrap();
    let failed: Vec<&String> = log.iter().filter_map(|(_, r)| r.as_ref().err()).collect();
    assert!(failed.is_empty(), "begins failed: {failed:?}");
    let first_on_new = log
        .iter()
        .filter(|(_, r)| *r == Ok(port(1)))
        .map(|(t, _)| *t)
        .min()
        .expect("the new leader answered no begin");
    let took = first_on_new.saturating_duration_since(changed);
    assert!(
        took <= NEW_LEADER_WITHIN,
        "the first begin on the new leader came {took:?} after the change"
    );
    assert!(
        (1..=CALLERS as u64).contains(&refused(0)),
        "the old leader answered {} NotRaftLeader (one per caller at most)",
        refused(0)
    );
    assert_eq!(refused(2), 0, "a follower was sent a request");
    assert!(tm.client().stats().misdirected >= 1);
    println!(
        "[raft_leader] first begin on the new leader {took:?} after the change; the old \
         leader refused {} begins; {} begins in all",
        refused(0),
        log.len()
    );
}
