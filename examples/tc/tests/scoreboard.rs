//! The resilience scoreboard: eight fault scenarios, each run with meshline's client and
//! with tower's stack built on the same rpc-client connections, one after the other in
//! the same test (`scoreboard/stacks.rs` says how each stack is set up).
//!
//! Each run: the scenario's TCs, each on a host of its own (a network namespace; the
//! frozen one a `tc-server` process), listed in a registry; eight callers (sixteen
//! clients of one caller in the reconnect storm) call for [`WARM`], the fault happens,
//! and the calls started in the [`MEASURE`] after it are counted
//! (`scoreboard/load.rs` says which calls, and what fails). Per run: the user-visible
//! error rate, p50 and p99 of every call, throughput, and the share of XID calls
//! answered by the TC they name.
//!
//! Bounds, per scenario:
//! - meshline harms no more calls than tower: failed calls, plus (tower's) writes sent
//!   again after an error that may have been delivered, each a transaction perhaps
//!   begun twice. tower's retry has no way to tell those apart, and it is how it shows
//!   no errors when a TC vanishes mid-call; meshline reports such a call as "may have
//!   been delivered" instead. Give or take one call per caller: a fault catches at
//!   most that many in flight, and how many each stack had on the faulty TC at that
//!   instant is chance.
//! - XID calls reach the TC they name: 100 %.
//! - meshline's p99 at most [`P99_RATIO`] of tower's, each stack's best round against
//!   the other's (both stacks run the same rounds).
//!
//! Each scenario runs [`ROUNDS`] round with each stack, in turn; the harm and affinity
//! bounds hold in every round. The 1 % tail of a sub-millisecond call on this shared
//! 2-core machine moves between runs by more than the stacks differ in the quiet
//! scenarios (a whole run slowed 1.5-2x now and then, both stacks alike), so when the
//! best rounds miss the p99 bound, up to [`EXTRA_ROUNDS`] more rounds of both stacks
//! are run before it fails: a stack that is slower fails every round, a slow moment of
//! the machine does not last that long.
//!
//! Needs root, iproute2 and nftables (scripts/test.sh installs them); elsewhere it is
//! skipped with the reason printed (under CI=true it fails instead).
//!
//! runs alone: it measures latencies under load.

mod common;
#[path = "scoreboard/load.rs"]
mod load;
#[path = "scoreboard/scenarios.rs"]
mod scenarios;
#[path = "scoreboard/stacks.rs"]
mod stacks;
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use meshline::{EmptyProtection, WatchHub};
use meshline_testkit::net::skip_reason;

use load::Row;
use scenarios::{Cluster, Scenario};
use stacks::{Kind, Stack};

/// Calls before the fault (estimates and hedging latencies warm).
const WARM: Duration = Duration::from_millis(1500);
/// The window measured, from the fault.
const MEASURE: Duration = Duration::from_secs(4);
/// Each scenario runs this many times with each stack, in turn.
const ROUNDS: usize = 1;
/// Rounds added, one at a time, while the best p99s miss [`P99_RATIO`].
const EXTRA_ROUNDS: usize = 3;
/// meshline's best p99 at most this share of tower's.
const P99_RATIO: f64 = 0.8;

async fn run(scenario: Scenario, kind: Kind) -> Row {
    let mut cluster = Cluster::start(scenario);
    let hub = WatchHub::new("scoreboard", EmptyProtection::Apply);
    hub.publish("c", cluster.initial());
    let (clients, callers) = scenario.clients();
    let mut stacks = Vec::new();
    for _ in 0..clients {
        stacks.push(Stack::build(kind, hub.subscribe("c"), common::seata_tm()).await);
    }
    let want = cluster.initial().len();
    for s in &stacks {
        s.client()
            .wait_alive(want, Duration::from_secs(10))
            .await
            .expect("every TC connected");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let driver = {
        let (stacks, stable, stop) = (stacks.clone(), cluster.stable(), stop.clone());
        tokio::spawn(async move { load::drive(&stacks, callers, &stable, stop).await })
    };
    tokio::time::sleep(WARM).await;
    let fault_at = Instant::now();
    cluster.fault(&hub).await;
    tokio::time::sleep((fault_at + MEASURE).saturating_duration_since(Instant::now())).await;
    stop.store(true, Ordering::Relaxed);
    let calls = tokio::time::timeout(stacks::CALL_TIMEOUT * 3, driver)
        .await
        .expect("a caller hung")
        .expect("callers");
    cluster.heal();
    let risky: u64 = stacks.iter().map(Stack::risky_retries).sum();
    for s in &stacks {
        s.client().shutdown(Duration::from_millis(200)).await;
    }
    load::row(&calls, fault_at, MEASURE, &cluster.outages, risky)
}

fn line(scenario: Scenario, kind: Kind, r: &Row) -> String {
    format!(
        "{:<42} {:<8} error {:>7.3} %  harmed {:>5}  p50 {:>6.2} ms  p99 {:>6.2} ms  {:>6.0} calls/s  XID affinity {}",
        scenario.name(),
        kind.name(),
        r.error_rate * 100.0,
        r.harmed,
        r.p50.as_secs_f64() * 1000.0,
        r.p99.as_secs_f64() * 1000.0,
        r.throughput,
        r.affinity
            .map_or("-".to_string(), |a| format!("{:.1} %", a * 100.0)),
    )
}

/// The scenarios' tests run one at a time (the harness would run them at once): each
/// measures latencies under load.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Runs `scenario` with meshline, then with tower; records the figures and holds the
/// bounds (module docs).
async fn compare(scenario: Scenario) {
    if skip_reason().is_some() {
        return; // why was printed (and under CI=true it fails instead)
    }
    let _turn = ONE_AT_A_TIME.lock().await;
    let name = scenario.name();
    let (clients, callers) = scenario.clients();
    let mut report = Vec::new();
    let (mut best_ours, mut best_theirs) = (Duration::MAX, Duration::MAX);
    let ratio =
        |ours: Duration, theirs: Duration| ours.as_secs_f64() / theirs.as_secs_f64().max(1e-6);
    for round in 1..=ROUNDS + EXTRA_ROUNDS {
        if round > ROUNDS && ratio(best_ours, best_theirs) <= P99_RATIO {
            break;
        }
        let ours = run(scenario, Kind::Meshline).await;
        let theirs = run(scenario, Kind::Tower).await;
        best_ours = best_ours.min(ours.p99);
        best_theirs = best_theirs.min(theirs.p99);
        let lines = format!(
            "{}\n{}",
            line(scenario, Kind::Meshline, &ours),
            line(scenario, Kind::Tower, &theirs)
        );
        report.push(lines.clone());
        assert!(
            ours.calls >= 1000,
            "{name}, round {round}: meshline made only {} calls\n{lines}",
            ours.calls
        );
        assert!(
            ours.harmed <= theirs.harmed + clients * callers,
            "{name}, round {round}: meshline harmed {} calls, tower {}\n{lines}",
            ours.harmed,
            theirs.harmed
        );
        if let Some(a) = ours.affinity {
            assert!(
                a == 1.0,
                "{name}, round {round}: meshline's XID calls reached the TC they name \
                 {:.2} % of the time\n{lines}",
                a * 100.0
            );
        }
    }
    let rounds = report.len();
    let ratio = ratio(best_ours, best_theirs);
    report.push(format!(
        "{name:<42} best p99 of {rounds} round{}: meshline {:.2} ms, tower {:.2} ms, ratio {ratio:.2}",
        if rounds == 1 { "" } else { "s" },
        best_ours.as_secs_f64() * 1000.0,
        best_theirs.as_secs_f64() * 1000.0
    ));
    let report = report.join("\n");
    meshline_testkit::figures::report("scoreboard", &report);
    assert!(
        ratio <= P99_RATIO,
        "{name}: meshline's best p99 is {ratio:.2} of tower's after {rounds} rounds \
         (bound {P99_RATIO})\n{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_tc() {
    compare(Scenario::SlowTc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_failing_tc() {
    compare(Scenario::FastFailingTc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_tc() {
    compare(Scenario::HalfOpenTc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_tc() {
    compare(Scenario::FrozenTc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_tc_joining() {
    compare(Scenario::ColdTcJoining).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_the_tcs_failing_at_once() {
    compare(Scenario::HalfFailing).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_every_tc() {
    compare(Scenario::RollingRestart).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_storm() {
    compare(Scenario::ReconnectStorm).await;
}
