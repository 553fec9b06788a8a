//! The behaviours every registry backend must show, written once and run by each
//! backend's test file against its real server (or double).
//!
//! A backend's test file implements [`Harness`] (make a client of the running server,
//! stop and restart the server), and where it can [`Crash`] (drop a client without
//! deregistering) and [`Garbage`] (write entries the client must skip, bypassing it).
//! Then [`conformance_tests!`](crate::conformance_tests) makes one `#[tokio::test]` per
//! behaviour:
//!
//! ```ignore
//! meshline_testkit::conformance_tests!(harness() => round_trip, drop_ends_watches,
//!     crash_removed_within_ttl, outage_stale_resync, garbage_skipped, empty_protection);
//! ```
//!
//! The behaviours:
//!
//! - [`round_trip`]: register on one client, see it on another client's watch and
//!   lookup, unregister, `close` deregisters at once, a closed client refuses work and
//!   its watches end.
//! - [`drop_ends_watches`]: dropping a client removes its members at once (well before
//!   their TTL) and ends its watches; a name watched again after its last watch was
//!   dropped still follows changes.
//! - [`crash_removed_within_ttl`]: a member is kept alive past its TTL; a crashed
//!   registrant is removed by expiry: not before the TTL could run out, not after it.
//! - [`outage_stale_resync`]: server down -> the watch goes stale and keeps its snapshot;
//!   server back -> connected again, our registration restored and kept alive, the watch
//!   follows changes.
//! - [`garbage_skipped`]: malformed entries are skipped (initial list and changes), the
//!   watch stays connected and keeps following.
//! - [`empty_protection`]: removals are applied while a member is left; the last
//!   removal is not applied (the last list is kept) with protection on.
//!
//! And the fault behaviours ([`faults`]), for the backends that implement their traits:
//!
//! - [`unreachable_is_named`] ([`Unreachable`]): a closed port is an error naming the
//!   address and the cause, within the backend's timeouts.
//! - [`refused_removal_retried`] and [`close_removes_a_refused_removal`]
//!   ([`RefuseRemoval`]): an unregister the registry refuses is not forgotten.
//! - [`secrets_never_shown`] ([`Secrets`]): a password or token never shows, at
//!   `trace`, through a refused login and a server restart.
//! - [`nearby_lists_other_clusters`] ([`SeataLayout`]): what `nearby` lists when the
//!   asked cluster is empty, and its error when the server is gone.
//!
//! Every wait is for a condition, bounded by what the protocol allows plus a margin a
//! loaded 2-core machine keeps; the few "nothing changes for a while" checks are over a
//! span the protocol defines (a TTL), and fail on any change within it.

use std::time::{Duration, Instant};

use meshline_registry_core::{Config, Health, Instance, RegistryError, RegistryService, Watch};

use crate::watch::{addrs, assert_unchanged_for, inst, wait_for, wait_health};

pub mod faults;
pub mod nearby;
pub use faults::{
    RefuseRemoval, Secrets, Unreachable, close_removes_a_refused_removal, refused_removal_retried,
    retry_bound, secrets_never_shown, unreachable_is_named,
};
pub use nearby::{SeataLayout, nearby_lists_other_clusters};

/// How long a change may take to reach another client's watch (push backends take
/// milliseconds, polling ones a period; the rest is margin for a loaded machine).
pub const DELIVERY: Duration = Duration::from_secs(10);

/// A removal within this after a deregistering call (`close`, drop) came from the
/// deregistration: clients made with [`Opts::long_ttl`] keep members for 30 s or more.
pub const LONG_TTL_FLOOR: Duration = Duration::from_secs(15);

/// How a behaviour wants a client set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opts {
    /// `registry.empty-protection`.
    pub empty_protection: bool,
    /// A registration lifetime (TTL, session timeout, lease) of at least 30 s, longer
    /// than any wait of the suite: only a real deregistration removes a member quickly.
    pub long_ttl: bool,
}

impl Opts {
    /// Short TTL, empty protection off.
    pub const PLAIN: Opts = Opts {
        empty_protection: false,
        long_ttl: false,
    };
    /// Short TTL, empty protection on.
    pub const PROTECTED: Opts = Opts {
        empty_protection: true,
        long_ttl: false,
    };
    /// Long TTL, empty protection off.
    pub const LONG_TTL: Opts = Opts {
        empty_protection: false,
        long_ttl: true,
    };
}

/// A backend's registration lifetime (TTL, session timeout, lease), as the suite sets
/// it.
#[derive(Debug, Clone, Copy)]
pub struct Lifetime {
    /// The key that sets it; `None` where there is none to set (a registration that
    /// lives with the client's connection, a read-only registry).
    pub key: Option<&'static str>,
    /// The value for the suite's clients, and the one (30 s or more) for
    /// [`Opts::long_ttl`].
    pub short: &'static str,
    /// See `short`.
    pub long: &'static str,
    /// `short` as a duration: members are kept alive well past it, and the suite holds
    /// "nothing changes" spans of it.
    pub ttl: Duration,
}

impl Lifetime {
    /// A lifetime set by `key`: `short` (which is `ttl`) and `long`.
    pub const fn set(
        key: &'static str,
        short: &'static str,
        long: &'static str,
        ttl: Duration,
    ) -> Self {
        Lifetime {
            key: Some(key),
            short,
            long,
            ttl,
        }
    }

    /// No key: `ttl` is the span the suite holds a registration (and the server down)
    /// for.
    pub const fn fixed(ttl: Duration) -> Self {
        Lifetime {
            key: None,
            short: "",
            long: "",
            ttl,
        }
    }
}

/// A backend under test with its running server.
///
/// The suite calls it from multi-thread tokio tests (the macro makes them so), so the
/// server's blocking restart runs in `tokio::task::block_in_place`.
#[allow(async_fn_in_trait)] // used from the tests' own runtime only
pub trait Harness {
    /// The backend's client type.
    type Registry: RegistryService;

    /// The backend's registration lifetime.
    const LIFETIME: Lifetime;

    /// How long a watch may take to be connected again after the server is back
    /// (reconnect backoff plus session setup and resync, with margin).
    const RESYNC_WITHIN: Duration;

    /// The backend's config for the running server (the test's timings), `extra` keys
    /// on top.
    fn config(&self, extra: &[(&str, &str)]) -> Config;

    /// A client made with `cfg`, or the error as the backend reports it.
    async fn connect_config(&self, cfg: &Config) -> Result<Self::Registry, RegistryError>;

    /// The running server (or double), for the outage.
    fn server(&mut self) -> &mut dyn Server;

    /// A new client of the running server, configured as `opts` asks.
    async fn connect(&self, opts: Opts) -> Self::Registry {
        let protection = if opts.empty_protection {
            "true"
        } else {
            "false"
        };
        let life = Self::LIFETIME;
        let mut keys = vec![("registry.empty-protection", protection)];
        if let Some(key) = life.key {
            keys.push((key, if opts.long_ttl { life.long } else { life.short }));
        }
        let cfg = self.config(&keys);
        self.connect_config(&cfg)
            .await
            .unwrap_or_else(|e| panic!("connect with {opts:?}: {e}"))
    }
}

/// A test server that can go down and come back on the same address: the real servers
/// of this crate (killed, restarted on the same ports and data dir) and the doubles
/// (every connection closed, restarted with no state).
pub trait Server: Send {
    /// Stops it abruptly.
    fn go_down(&mut self);
    /// Starts it again on the same address; returns once it answers.
    fn come_back(&mut self) -> crate::Result<()>;
}

macro_rules! server {
    ($down:ident: $($t:ty),*) => {$(
        impl Server for $t {
            fn go_down(&mut self) {
                <$t>::$down(self)
            }
            fn come_back(&mut self) -> crate::Result<()> {
                <$t>::restart(self)
            }
        }
    )*};
}
server!(kill: crate::Etcd, crate::ZooKeeper, crate::Redis, crate::Rnacos);
server!(stop: crate::ConsulDouble, crate::EurekaDouble, crate::RaftDouble, crate::NamingserverDouble);

/// A backend whose client can crash: stop without deregistering, as a killed process.
pub trait Crash: Harness {
    /// Ends `reg` without deregistering anything (the backends' `abandon`; the suite
    /// drops it afterwards, which then does nothing).
    fn crash(&self, reg: &Self::Registry);

    /// When the server removes a crashed registrant's members.
    fn expiry(&self) -> Expiry;
}

/// When a crashed registrant's members are removed by expiry, from the protocol.
#[derive(Debug, Clone, Copy)]
pub struct Expiry {
    /// Not before: the registration was last refreshed at most one refresh period
    /// before the crash, so it lives at least TTL minus that period (minus the server's
    /// clock granularity). A removal before this came from a deregistration.
    pub not_before: Duration,
    /// At the latest: TTL plus the server's expiry check period plus the watcher's
    /// poll period, plus a margin for a loaded machine.
    pub within: Duration,
}

impl Expiry {
    /// A registration refreshed at least twice per `ttl`, expired by a server that
    /// looks every `check` (and seen by watchers at once or within `check` too): not
    /// before half the TTL, at the latest the TTL plus `check` plus 2 s of margin.
    pub fn after(ttl: Duration, check: Duration) -> Expiry {
        Expiry {
            not_before: ttl / 2,
            within: ttl + check + Duration::from_secs(2),
        }
    }
}

/// A backend whose registry can hold entries its client must skip.
#[allow(async_fn_in_trait)]
pub trait Garbage: Harness {
    /// Writes entries under `cluster` the way the server stores members but malformed
    /// (bad address, port 0, undecodable value...), bypassing our client. Each `round`
    /// writes different entries, so the second call is a change the watch sees.
    async fn put_garbage(&self, cluster: &str, round: u32);
}

/// Makes one `#[tokio::test]` per named behaviour of [`crate::conformance`], each on a
/// fresh harness from `$harness` (an expression of a future, e.g. `harness()`), in a
/// module `conformance` (or the one named first: `mod secrets: secret_harness() =>
/// secrets_never_shown`, for a second harness in the same file). The tests run on a
/// 2-worker multi-thread runtime, except [`secrets_never_shown`], which needs the
/// current-thread one.
#[macro_export]
macro_rules! conformance_tests {
    (mod $module:ident: $harness:expr => $($behaviour:ident),+ $(,)?) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $( $crate::conformance_test!($harness, $behaviour); )+
        }
    };
    ($harness:expr => $($behaviour:ident),+ $(,)?) => {
        $crate::conformance_tests!(mod conformance: $harness => $($behaviour),+);
    };
}

/// One test of [`conformance_tests!`](crate::conformance_tests), on the runtime its
/// behaviour needs.
#[doc(hidden)]
#[macro_export]
macro_rules! conformance_test {
    ($harness:expr, secrets_never_shown) => {
        #[tokio::test]
        async fn secrets_never_shown() {
            let mut h = $harness.await;
            $crate::conformance::secrets_never_shown(&mut h).await;
        }
    };
    ($harness:expr, $behaviour:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $behaviour() {
            let mut h = $harness.await;
            $crate::conformance::$behaviour(&mut h).await;
        }
    };
}

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
