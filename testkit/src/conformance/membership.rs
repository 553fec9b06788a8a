//! The membership behaviours: what every backend's registrations and watches do
//! through registration, removal, drop, crash, outage, garbage and empty protection.

use std::time::{Duration, Instant};

use meshline_registry_core::{Health, Instance, RegistryError, RegistryService, Watch};

use super::{Crash, DELIVERY, Garbage, Harness, LONG_TTL_FLOOR, Opts};
use crate::watch::{addrs, assert_unchanged_for, inst, wait_for, wait_health};

const CLUSTER: &str = "conformance";

/// Waits for the watch of a closed or dropped registry to end with
/// [`RegistryError::Closed`] (snapshots not yet read may come first).
async fn assert_watch_ends(w: &mut Watch, what: &str) {
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Err(e) = w.next().await {
                return e;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: the watch did not end within 5 s"));
    assert!(
        matches!(ended, RegistryError::Closed { .. }),
        "{what}: the watch ended with {ended} instead of Closed"
    );
}

/// Polls a fresh `lookup` until it lists exactly `want` (any order), or panics.
async fn lookup_until<R: RegistryService>(reg: &R, want: &[&str], within: Duration, what: &str) {
    let mut want: Vec<String> = want.iter().map(|a| inst(a).to_string()).collect();
    want.sort();
    let deadline = Instant::now() + within;
    loop {
        let got = reg.lookup(CLUSTER).await;
        let mut listed: Vec<String> = match &got {
            Ok(l) => l.iter().map(|i| i.to_string()).collect(),
            Err(_) => Vec::new(),
        };
        listed.sort();
        if got.is_ok() && listed == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: lookup did not list {want:?} within {within:?}; last: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn sorted(list: &[&str]) -> Vec<String> {
    let mut v: Vec<Instance> = list.iter().map(|a| inst(a)).collect();
    v.sort_by(|x, y| x.key().cmp(y.key()));
    v.iter().map(|i| i.to_string()).collect()
}

/// Register -> another client's watch and lookup -> unregister; `close` deregisters at
/// once (a long TTL: only the deregistration removes it within the wait), a closed
/// client refuses to register, and a closed client's watch ends.
pub async fn round_trip<H: Harness>(h: &mut H) {
    let registrant = h.connect(Opts::LONG_TTL).await;
    let watcher = h.connect(Opts::PLAIN).await;
    assert_eq!(registrant.kind(), watcher.kind());
    // A cluster nobody registered in: empty, not an error.
    assert!(watcher.lookup(CLUSTER).await.unwrap().is_empty());
    let mut w = watcher.watch(CLUSTER).await.unwrap();
    assert!(w.next().await.unwrap().is_empty());

    let a = inst("127.0.0.1:8091");
    let b = inst("[::1]:8092");
    registrant.register(CLUSTER, &a).await.unwrap();
    registrant.register(CLUSTER, &b).await.unwrap();
    let s = wait_for(&mut w, DELIVERY, "a and b", |s| s.len() == 2).await;
    assert_eq!(addrs(&s), sorted(&["127.0.0.1:8091", "[::1]:8092"]));
    lookup_until(
        &watcher,
        &["127.0.0.1:8091", "[::1]:8092"],
        DELIVERY,
        "both",
    )
    .await;
    // Registering again is harmless.
    registrant.register(CLUSTER, &a).await.unwrap();
    // Another cluster is unaffected.
    assert!(
        watcher
            .lookup("conformance-other")
            .await
            .unwrap()
            .is_empty()
    );

    registrant.unregister(CLUSTER, &a).await.unwrap();
    let s = wait_for(&mut w, DELIVERY, "only b", |s| s.len() == 1).await;
    assert_eq!(addrs(&s), vec!["[::1]:8092"]);
    // Empty protection off: the last removal is applied.
    registrant.unregister(CLUSTER, &b).await.unwrap();
    wait_for(&mut w, DELIVERY, "empty", |s| s.is_empty()).await;

    registrant.register(CLUSTER, &a).await.unwrap();
    wait_for(&mut w, DELIVERY, "a again", |s| s.len() == 1).await;
    let t = Instant::now();
    registrant.close().await.unwrap();
    wait_for(&mut w, DELIVERY, "empty after close", |s| s.is_empty()).await;
    assert!(
        t.elapsed() < LONG_TTL_FLOOR,
        "close removed our member only after {:?}: by expiry, not by deregistration",
        t.elapsed()
    );
    let refused = registrant.register(CLUSTER, &a).await;
    assert!(
        matches!(refused, Err(RegistryError::Closed { .. })),
        "register on a closed client: {refused:?}"
    );
    watcher.close().await.unwrap();
    assert_watch_ends(&mut w, "closed watcher").await;
}

/// Dropping a client (no `close`) removes its members at once, not after their (long)
/// TTL, and ends its watches; a name whose last watch was dropped can be watched again
/// and follows changes.
pub async fn drop_ends_watches<H: Harness>(h: &mut H) {
    let doomed = h.connect(Opts::LONG_TTL).await;
    let watcher = h.connect(Opts::PLAIN).await;
    doomed.register(CLUSTER, &inst("10.8.8.8:1")).await.unwrap();
    let mut own = doomed.watch(CLUSTER).await.unwrap();
    let mut w = watcher.watch(CLUSTER).await.unwrap();
    wait_for(&mut w, DELIVERY, "registered", |s| s.len() == 1).await;
    wait_for(&mut own, DELIVERY, "own watch sees it", |s| s.len() == 1).await;

    // A watch dropped, and the name watched again: still live.
    let mut other = watcher.watch("conformance-dropped").await.unwrap();
    assert!(other.next().await.unwrap().is_empty());
    drop(other);
    let mut again = watcher.watch("conformance-dropped").await.unwrap();
    assert!(again.next().await.unwrap().is_empty());
    let t = Instant::now();
    let feeder = h.connect(Opts::PLAIN).await;
    feeder
        .register("conformance-dropped", &inst("10.8.8.9:1"))
        .await
        .unwrap();
    wait_for(&mut again, DELIVERY, "a change after re-watching", |s| {
        s.len() == 1
    })
    .await;
    tracing::info!(after = ?t.elapsed(), "re-watched name followed a change");
    feeder.close().await.unwrap();

    let t = Instant::now();
    drop(doomed);
    wait_for(&mut w, DELIVERY, "removed on drop", |s| s.is_empty()).await;
    assert!(
        t.elapsed() < LONG_TTL_FLOOR,
        "removed only after {:?}: by expiry, not by the drop",
        t.elapsed()
    );
    assert_watch_ends(&mut own, "the dropped client's watch").await;
    watcher.close().await.unwrap();
}

/// A member is kept alive for twice its TTL (the watch does not change at all); then
/// its registrant crashes and the member is removed by expiry: not before the TTL could
/// run out (else it was deregistered), and within the protocol's bound. The other
/// registrant's member stays.
pub async fn crash_removed_within_ttl<H: Crash>(h: &mut H) {
    let stable = h.connect(Opts::PLAIN).await;
    let doomed = h.connect(Opts::PLAIN).await;
    let watcher = h.connect(Opts::PLAIN).await;
    stable.register(CLUSTER, &inst("10.3.3.1:1")).await.unwrap();
    doomed.register(CLUSTER, &inst("10.3.3.2:1")).await.unwrap();
    let mut w = watcher.watch(CLUSTER).await.unwrap();
    wait_for(&mut w, DELIVERY, "both", |s| s.len() == 2).await;
    assert_unchanged_for(&mut w, H::LIFETIME.ttl * 2, "kept alive past the TTL").await;
    lookup_until(
        &watcher,
        &["10.3.3.1:1", "10.3.3.2:1"],
        DELIVERY,
        "both kept",
    )
    .await;

    let exp = h.expiry();
    let started = Instant::now();
    h.crash(&doomed);
    drop(doomed);
    // Wait past the bound, so a late removal is measured and reported, then judged.
    let s = wait_for(
        &mut w,
        exp.within + DELIVERY,
        "the crashed member gone",
        |s| s.len() == 1,
    )
    .await;
    let took = started.elapsed();
    tracing::info!(?took, ?exp, "crashed registrant removed");
    assert_eq!(addrs(&s), vec!["10.3.3.1:1"], "the wrong member went");
    assert!(
        took >= exp.not_before,
        "removed {took:?} after the crash, before its TTL could run out ({:?}): \
         the crash deregistered it",
        exp.not_before
    );
    assert!(
        took <= exp.within,
        "removed {took:?} after the crash, later than {:?}",
        exp.within
    );
    stable.close().await.unwrap();
    watcher.close().await.unwrap();
}

/// Server down: the watch goes stale within 10 s and keeps its snapshot (no change at
/// all while down, longer than the TTL); server back: connected again, our registration
/// restored (a fresh client lists it) and kept alive past its TTL, and the watch follows
/// a new change.
pub async fn outage_stale_resync<H: Harness>(h: &mut H) {
    let registrant = h.connect(Opts::PROTECTED).await;
    let watcher = h.connect(Opts::PROTECTED).await;
    let me = inst("10.1.1.1:8091");
    registrant.register(CLUSTER, &me).await.unwrap();
    let mut w = watcher.watch(CLUSTER).await.unwrap();
    wait_for(&mut w, DELIVERY, "registered", |s| s.len() == 1).await;
    // Registering again moves the registry's history along (Consul's index, etcd's
    // revision) past what a restarted server has: the resync must not depend on it.
    for _ in 0..20 {
        registrant.register(CLUSTER, &me).await.unwrap();
    }
    let before = addrs(&w.current());

    h.server().go_down();
    let health = wait_health(&mut w, Duration::from_secs(10), false).await;
    assert!(matches!(health, Health::Stale { .. }), "{health:?}");
    // Down for longer than the TTL: the last snapshot is kept, unchanged.
    assert_unchanged_for(
        &mut w,
        H::LIFETIME.ttl + Duration::from_secs(1),
        "kept while down",
    )
    .await;
    assert_eq!(addrs(&w.current()), before);
    assert!(!w.health().is_connected(), "still down, still stale");

    let t = Instant::now();
    let server = h.server();
    tokio::task::block_in_place(|| server.come_back()).expect("restart the server");
    wait_health(&mut w, H::RESYNC_WITHIN, true).await;
    tracing::info!(after = ?t.elapsed(), "watch resynced after the restart");
    let probe = h.connect(Opts::PLAIN).await;
    lookup_until(
        &probe,
        &["10.1.1.1:8091"],
        H::RESYNC_WITHIN,
        "registration restored",
    )
    .await;
    let s = wait_for(&mut w, DELIVERY, "the member after resync", |s| {
        addrs(s) == vec!["10.1.1.1:8091"]
    })
    .await;
    assert_eq!(addrs(&s), before);
    // Kept alive again: nothing changes for twice the TTL.
    assert_unchanged_for(&mut w, H::LIFETIME.ttl * 2, "kept alive after the restart").await;
    lookup_until(&probe, &["10.1.1.1:8091"], DELIVERY, "still registered").await;
    // The watch is live: a new member shows up.
    registrant
        .register(CLUSTER, &inst("10.1.1.2:8091"))
        .await
        .unwrap();
    let s = wait_for(&mut w, DELIVERY, "new member after resync", |s| {
        s.len() == 2
    })
    .await;
    assert_eq!(addrs(&s), vec!["10.1.1.1:8091", "10.1.1.2:8091"]);
    assert!(w.health().is_connected());
    for r in [registrant, watcher, probe] {
        r.close().await.unwrap();
    }
}

/// Garbage written before the watch starts and while it runs is skipped: the watch and
/// lookups list only the real members, stay connected, and keep following changes.
pub async fn garbage_skipped<H: Garbage>(h: &mut H) {
    let registrant = h.connect(Opts::PLAIN).await;
    let watcher = h.connect(Opts::PLAIN).await;
    h.put_garbage(CLUSTER, 0).await;
    registrant
        .register(CLUSTER, &inst("10.0.0.1:8091"))
        .await
        .unwrap();
    let mut w = watcher.watch(CLUSTER).await.unwrap();
    let s = wait_for(&mut w, DELIVERY, "the member", |s| !s.is_empty()).await;
    assert_eq!(addrs(&s), vec!["10.0.0.1:8091"], "garbage listed");
    lookup_until(
        &watcher,
        &["10.0.0.1:8091"],
        DELIVERY,
        "lookup skips garbage",
    )
    .await;

    // Garbage arriving through the watch, then a good member: it arrives, alone.
    h.put_garbage(CLUSTER, 1).await;
    registrant
        .register(CLUSTER, &inst("10.0.0.5:8091"))
        .await
        .unwrap();
    let s = wait_for(&mut w, DELIVERY, "the second member", |s| s.len() >= 2).await;
    assert_eq!(
        addrs(&s),
        vec!["10.0.0.1:8091", "10.0.0.5:8091"],
        "garbage listed"
    );
    assert!(w.health().is_connected(), "garbage made the watch stale");
    lookup_until(
        &watcher,
        &["10.0.0.1:8091", "10.0.0.5:8091"],
        DELIVERY,
        "lookup skips new garbage",
    )
    .await;
    registrant.close().await.unwrap();
    watcher.close().await.unwrap();
}

/// With empty protection, removals that leave a member are applied; the removal of the
/// last member is not: the watch keeps it while an unprotected watcher of the same
/// registry sees the cluster empty, and the next change follows it with no empty
/// snapshot in between (one revision step).
pub async fn empty_protection<H: Harness>(h: &mut H) {
    let registrant = h.connect(Opts::LONG_TTL).await;
    let protected = h.connect(Opts::PROTECTED).await;
    let plain = h.connect(Opts::PLAIN).await;
    let (a, b) = (inst("10.6.0.1:1"), inst("10.6.0.2:1"));
    registrant.register(CLUSTER, &a).await.unwrap();
    registrant.register(CLUSTER, &b).await.unwrap();
    let mut pw = protected.watch(CLUSTER).await.unwrap();
    let mut uw = plain.watch(CLUSTER).await.unwrap();
    wait_for(&mut pw, DELIVERY, "both", |s| s.len() == 2).await;
    wait_for(&mut uw, DELIVERY, "both", |s| s.len() == 2).await;

    registrant.unregister(CLUSTER, &a).await.unwrap();
    let kept = wait_for(&mut pw, DELIVERY, "a removed", |s| s.len() == 1).await;
    assert_eq!(addrs(&kept), vec!["10.6.0.2:1"]);
    wait_for(&mut uw, DELIVERY, "a removed", |s| s.len() == 1).await;

    registrant.unregister(CLUSTER, &b).await.unwrap();
    wait_for(&mut uw, DELIVERY, "empty, unprotected", |s| s.is_empty()).await;
    lookup_until(&protected, &[], DELIVERY, "the registry is empty").await;
    // The protected watch sees the same registry for a while and keeps its list.
    assert_unchanged_for(&mut pw, Duration::from_secs(2), "protected list kept").await;
    assert_eq!(addrs(&pw.current()), vec!["10.6.0.2:1"]);

    // The next change replaces the kept list in one step: no empty snapshot between.
    let c = inst("10.6.0.3:1");
    registrant.register(CLUSTER, &c).await.unwrap();
    let s = wait_for(&mut pw, DELIVERY, "c", |s| addrs(s) == vec!["10.6.0.3:1"]).await;
    assert_eq!(
        s.revision(),
        kept.revision() + 1,
        "an empty list was applied in between"
    );
    for r in [registrant, protected, plain] {
        r.close().await.unwrap();
    }
}
