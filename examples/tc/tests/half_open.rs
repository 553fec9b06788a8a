//! A TC whose host vanishes mid-load
//! without a FIN or a RST (its network namespace blackholed by nftables), with three
//! TCs each on its own host.
//!
//! Measured on main before the probe and failure accrual: with round robin, 8 callers
//! and a 2 s call timeout, throughput fell from ~12,000 calls/s to 8 calls/s for 14.5 s
//! (every caller waited out its timeout on the silent TC in turn) until the 15 s read
//! idle took it out. Now, for round robin, XID routing without an XID, and P2C, with
//! the client's default settings:
//! - the live TCs carry at least 90 % of the pre-cut throughput in the second that
//!   starts 1 s after the cut (each a median of 100 ms slices: see [`median_rate`]);
//! - the silent TC leaves the alive set within 3 s (in practice in under one);
//! - calls in flight on it fail as "may have been delivered" within their timeout, and
//!   no caller hangs;
//! - when the link is restored, it returns.
//!
//! The rate is judged on one run, or, when that run misses the bound, on the median of
//! three: one window of one second on a shared 2-core VM moves by more than the 10 %
//! the bound leaves (a run kept 87 % with no fault and no CPU stolen, next to runs at
//! 100-150 %), while the fault this test names (callers waiting on the silent TC, 8
//! calls/s) and any fault that costs the rate on every run miss it in all three. Every
//! other bound holds on every run. Each run prints the share of the CPU the VM's host
//! took in the two windows ([`StealSampler`]), to tell a slow machine from slow code.
//!
//! Needs root, iproute2 and nftables (scripts/test.sh installs them; CI runs as root);
//! elsewhere it is skipped with the reason printed.
//!
//! runs alone: it measures calls per second before and after the cut.

mod common;
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use meshline::rpc::message::{GlobalEndRequest, SeataMessage};
use meshline::rpc::{CallOptions, Payload, RpcClient, RpcError};
use meshline::{EmptyProtection, WatchHub};
use meshline_testkit::net::skip_reason;
use meshline_testkit::steal::StealSampler;
use support::hosted_tc::HostedTc;

const CALLERS: usize = 8;
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Runs the rate is judged on when the first one misses the bound (their median).
const RUNS_WHEN_MISSED: usize = 3;

/// What one run saw.
struct Run {
    pre_rate: f64,
    post_rate: f64,
    left_after: Duration,
    returned_after: Option<Duration>,
    failures: Vec<(Duration, String)>,
    /// The share of CPU ticks the host took in the pre-cut and the post-cut window.
    stolen: (f64, f64),
}

async fn run(lb: &str) -> Run {
    let steal = StealSampler::start(Duration::from_millis(50)).expect("/proc/stat");
    let tcs = HostedTc::start_many(3);
    let hub = Arc::new(WatchHub::new("half-open", EmptyProtection::Apply));
    hub.publish("c", tcs.iter().map(HostedTc::instance).collect());
    // The client's defaults, but for faster reconnects once the link is back (the
    // return is checked with these; the defaults back off up to 10 s).
    let client = RpcClient::builder()
        .watch(hub.subscribe("c"), "c")
        .load_balance_name(lb)
        .handshake(common::seata_tm())
        .configure(|o| {
            o.request_timeout = CALL_TIMEOUT;
            o.connect_timeout = Duration::from_millis(500);
            o.backoff_initial = Duration::from_millis(100);
            o.backoff_max = Duration::from_millis(500);
        })
        .build()
        .await
        .unwrap();
    client.wait_alive(3, Duration::from_secs(5)).await.unwrap();
    let victim = tcs[0].instance();

    let t0 = Instant::now();
    let done: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let failures: Arc<Mutex<Vec<(Duration, String)>>> = Arc::default();
    let body = Payload::seata(&SeataMessage::GlobalStatus(GlobalEndRequest::new(
        "10.0.0.1:8091:1",
    )))
    .unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let callers = common::Callers::start(CALLERS, |_, stop| {
        let (client, done, failures, body, calls) = (
            client.clone(),
            done.clone(),
            failures.clone(),
            body.clone(),
            calls.clone(),
        );
        async move {
            let mut mine = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let r = client.call(body.clone(), CallOptions::new()).await;
                calls.fetch_add(1, Ordering::Relaxed);
                match r {
                    Ok(_) => mine.push(t0.elapsed()),
                    Err(e) => {
                        assert!(
                            started.elapsed() <= CALL_TIMEOUT + Duration::from_millis(500),
                            "a call hung for {:?}: {e}",
                            started.elapsed()
                        );
                        failures.lock().unwrap().push((t0.elapsed(), e.to_string()));
                        if !matches!(
                            e,
                            RpcError::MaybeDelivered { .. } | RpcError::Timeout { .. }
                        ) {
                            panic!("unexpected error: {e}");
                        }
                    }
                }
            }
            done.lock().unwrap().extend(mine);
        }
    });
    // Warm-up and the pre-cut window.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cut = t0.elapsed();
    tcs[0].host.cut().unwrap();
    let left = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            if client.alive().get(victim.key()).is_none() {
                return t0.elapsed() - cut;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or(Duration::MAX);
    tokio::time::sleep((cut + Duration::from_secs(2)).saturating_sub(t0.elapsed())).await;
    callers.stop(CALL_TIMEOUT + Duration::from_secs(1)).await;
    // The link comes back: so does the TC.
    tcs[0].host.restore().unwrap();
    let restored = Instant::now();
    let returned = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if client.alive().get(victim.key()).is_some() {
                return restored.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .ok();
    let done = done.lock().unwrap().clone();
    let pre = median_rate(&done, cut - Duration::from_secs(2), cut);
    let post = median_rate(
        &done,
        cut + Duration::from_secs(1),
        cut + Duration::from_secs(2),
    );
    client.shutdown(Duration::from_secs(1)).await;
    let window = |from: Duration, to: Duration| steal.stolen(t0 + from, t0 + to).unwrap_or(1.0);
    let stolen = (
        window(cut - Duration::from_secs(2), cut),
        window(cut + Duration::from_secs(1), cut + Duration::from_secs(2)),
    );
    let failures = failures
        .lock()
        .unwrap()
        .iter()
        .map(|(t, e)| (t.saturating_sub(cut), e.clone()))
        .collect();
    Run {
        pre_rate: pre,
        post_rate: post,
        left_after: left,
        returned_after: returned,
        failures,
        stolen,
    }
}

/// The rate of calls completed in `[from, to)`, in calls per second: the median of its
/// 100 ms slices. A median, not the mean: on a shared 2-core machine a stall of a
/// tenth of a second (another process's burst) takes 10 % off a one-second count on its
/// own, whichever side of the cut it falls on, while the fault this test names takes
/// the rate of every slice after the cut down to a few calls.
fn median_rate(done: &[Duration], from: Duration, to: Duration) -> f64 {
    const SLICE: Duration = Duration::from_millis(100);
    let slices = ((to - from).as_millis() / SLICE.as_millis()) as usize;
    let mut counts = vec![0u32; slices];
    for t in done.iter().filter(|t| **t >= from && **t < to) {
        let i = ((*t - from).as_millis() / SLICE.as_millis()) as usize;
        if let Some(c) = counts.get_mut(i) {
            *c += 1;
        }
    }
    counts.sort_unstable();
    let mid = counts.len() / 2;
    let median = if counts.len().is_multiple_of(2) {
        (f64::from(counts[mid - 1]) + f64::from(counts[mid])) / 2.0
    } else {
        f64::from(counts[mid])
    };
    median / SLICE.as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_tc_costs_the_live_ones_under_a_second_with_every_balancer() {
    if skip_reason().is_some() {
        return; // why was printed (and under CI=true it fails instead)
    }
    let mut report = Vec::new();
    for lb in ["RoundRobinLoadBalance", "XID", "P2C"] {
        let mut kept = Vec::new();
        for run_no in 1..=RUNS_WHEN_MISSED {
            let r = run(lb).await;
            let ratio = r.post_rate / r.pre_rate;
            let line = format!(
                "{lb}: pre-cut {:.0} calls/s, second 1-2 after the cut {:.0} calls/s ({:.0} %), \
                 left the alive set {:?} after the cut, returned {:?} after the restore, \
                 {} calls failed, host took {:.0} % / {:.0} % of the CPU (run {run_no})",
                r.pre_rate,
                r.post_rate,
                100.0 * ratio,
                r.left_after,
                r.returned_after,
                r.failures.len(),
                100.0 * r.stolen.0,
                100.0 * r.stolen.1,
            );
            eprintln!("{line}");
            judge_all_but_rate(lb, &r, &line);
            report.push(line);
            kept.push(ratio);
            if run_no == 1 && ratio >= 0.9 {
                break;
            }
        }
        kept.sort_by(f64::total_cmp);
        let median = kept[kept.len() / 2];
        assert!(
            median >= 0.9,
            "{lb}: the live TCs kept {:?} of the pre-cut rate (median {:.0} %, bound 90 %)\n{}",
            kept.iter()
                .map(|k| format!("{:.0} %", 100.0 * k))
                .collect::<Vec<_>>(),
            100.0 * median,
            report.join("\n")
        );
    }
    meshline_testkit::figures::report("half_open", &report.join("\n"));
}

/// The bounds every run must hold, whatever the host took.
fn judge_all_but_rate(lb: &str, r: &Run, line: &str) {
    assert!(r.pre_rate > 100.0, "{line}");
    assert!(r.left_after <= Duration::from_secs(3), "{line}");
    assert!(
        r.returned_after.is_some(),
        "{line}: the TC did not return after the restore"
    );
    // Every failure is a call that was on the silent TC: "may have been delivered",
    // within the call timeout of the cut.
    for (at, e) in &r.failures {
        assert!(
            e.contains("may have been delivered") || e.contains("no response within"),
            "{lb}: {e}"
        );
        assert!(
            *at <= CALL_TIMEOUT + Duration::from_millis(500),
            "{lb}: failed {at:?} after the cut: {e}"
        );
    }
}
