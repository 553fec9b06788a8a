//! A slow and lossy TC. Three TCs, each on
//! its own host; one is reached through a fault proxy that adds, in phase A, 50 ms of
//! delay plus up to 20 ms of jitter each way (a round trip of 100-140 ms, where the
//! others answer in well under a millisecond), and in phase B 5 % loss (a "lost" chunk
//! stalls its connection for a 200 ms retransmission, as TCP does).
//!
//! Eight callers keep calls going; one call in four carries an XID naming one of the
//! three TCs in turn. For each balancer and phase the test prints the throughput, the
//! p99 latency, each TC's share of the calls without an XID, and how many XID calls
//! reached the TC their XID names:
//! - round robin is the control: it gives the slow TC its third whatever it costs;
//! - the load-aware balancers (P2C, least-active, bounded-load) give it clearly less
//!   (the bounds, and why, are at [`SLOW_SHARE_MAX`]);
//! - with the `XID` balancer every XID call reaches the TC its XID names, the slow one
//!   included (misroutes = 0). The load-aware balancers do not route by XID (as none of
//!   Seata's balancers but `XID` does; bounded-load hashes the XID as its key): their
//!   misroutes are printed (about two in three), not asserted. `xid:<name>` routes by
//!   XID first and picks the rest with `<name>`: with `xid:P2C`, `xid:LeastActive...`
//!   and `xid:BoundedLoad` both hold, 0 misroutes and the slow TC's share of the calls
//!   without an XID under the same bound (their p99 carries the XID calls the slow TC
//!   owns, one call in twelve, so it is printed, not bounded);
//! - no call fails: nothing is lost to a slow or lossy path.
//!
//! Figures from a run are in docs/faults.md. Needs root, iproute2 and nftables (as
//! `half_open`); elsewhere it is skipped with the reason printed.
//!
//! runs one at a time: it measures shares and latencies of a flood of calls, but the
//! slow path it measures is 100 ms and more, and its callers leave two thirds of the
//! CPU idle (idle-priority work beside it left its figures in the range of runs
//! without it).

mod common;
mod support;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use meshline::rpc::message::{GlobalEndRequest, SeataMessage};
use meshline::rpc::{CallOptions, Payload, RpcClient};
use meshline::{EmptyProtection, Instance, WatchHub};
use meshline_testkit::net::{FaultProxy, Faults, skip_reason};
use support::hosted_tc::HostedTc;

const CALLERS: usize = 8;
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Time the balancer has to see the fault before the measured window.
const SETTLE: Duration = Duration::from_millis(500);
/// The measured window.
const WINDOW: Duration = Duration::from_secs(2);
/// Every this many calls of a caller, one carries an XID.
const XID_EVERY: u64 = 4;
/// The slow TC (index into the published list).
const SLOW: usize = 0;

/// Phase A: 50 ms each way, plus up to 20 ms.
fn slow() -> Faults {
    Faults {
        delay: Duration::from_millis(50),
        jitter: Duration::from_millis(20),
        ..Faults::default()
    }
}

/// Phase B: 5 % of chunks stall for a retransmission.
fn lossy() -> Faults {
    Faults {
        loss: 0.05,
        ..Faults::default()
    }
}

/// The largest share of the calls without an XID that a load-aware balancer may give the
/// slow TC, per phase; round robin, the control, gives it its third (measured 33-35 %).
/// The load-aware balancers see its latency (P2C's peak EWMA) or the calls it holds in
/// flight (least-active, bounded-load's cap): a TC whose calls take 100-140 ms where the
/// others answer in under a millisecond loses nearly every pick (measured 0.0-0.2 %), and
/// one that stalls about one call in ten for 200 ms likewise (measured 0.0-0.6 %).
const SLOW_SHARE_MAX: [(&str, f64); 2] = [("slow", 0.02), ("lossy", 0.05)];

/// The same bound for `xid:<name>` in the lossy phase, per inner balancer. There every
/// caller spends most of its time in the XID calls the lossy TC owns (one in twelve
/// calls, a tenth of them stalled 200 ms), so the in-flight counts least-active and
/// bounded-load read are low and bursty and the lossy TC, fast between stalls, wins a
/// few picks: measured in 15 full runs 1.9-2.5 % (least-active) and 2.8-5.1 %
/// (bounded-load), still far below round robin's third. P2C reads latency, not counts,
/// and keeps the plain form's bound (measured 0.0 %).
const XID_FIRST_LOSSY_SHARE_MAX: [(&str, f64); 3] = [
    ("xid:P2C", 0.05),
    ("xid:LeastActiveLoadBalance", 0.15),
    ("xid:BoundedLoad", 0.15),
];

/// The same bound for `xid:<name>` in the slow phase, per inner balancer. P2C and
/// least-active keep the plain forms' 2 % (measured in 15 full runs: 0.0 % and
/// 0.0-0.9 %). Bounded-load gets 5 %: a third of the XID calls are the slow TC's own
/// and hold its in-flight count at one or two, so bounded-load's cap (1.25 x the fair
/// share of a few calls in flight, by design blind to latency) lets a no-XID key that
/// hashes to it through whenever one of them has just returned: measured 0.1-2.3 % in
/// 15 full runs, 2.9 % once with another full run building beside it (614-642 calls/s:
/// about ten calls). What its bound guards is that the inner balancer picks the calls
/// without an XID, not Seata's random fallback (a third).
const XID_FIRST_SLOW_SHARE_MAX: [(&str, f64); 3] = [
    ("xid:P2C", 0.02),
    ("xid:LeastActiveLoadBalance", 0.02),
    ("xid:BoundedLoad", 0.05),
];

/// The p99 latency a load-aware balancer may show: below the fault's own cost (a round
/// trip of at least 100 ms in phase A, a 200 ms stall in phase B), which round robin's
/// p99 carries (measured 140 and 207 ms); the load-aware p99 was 0.5-0.9 ms.
const LOAD_AWARE_P99_MAX: Duration = Duration::from_millis(50);

struct Call {
    at: Duration,
    tc: usize,
    latency: Duration,
    named: Option<usize>,
}

/// What one balancer did in one phase's window.
struct Figures {
    rate: f64,
    shares: [f64; 3],
    p99: Duration,
    p99_slow: Duration,
    xid_calls: usize,
    xid_to_slow: usize,
    misroutes: usize,
    failures: Vec<String>,
}

fn p99(mut v: Vec<Duration>) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort_unstable();
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

async fn run(lb: &str, faults: Faults) -> Figures {
    let tcs = HostedTc::start_many(3);
    let proxy = FaultProxy::start(tcs[SLOW].addr()).expect("fault proxy");
    let mut instances: Vec<Instance> = tcs.iter().map(HostedTc::instance).collect();
    instances[SLOW] = Instance::new("127.0.0.1", proxy.addr().port()).unwrap();
    let hub = Arc::new(WatchHub::new("slow-tc", EmptyProtection::Apply));
    hub.publish("c", instances.clone());
    let client = RpcClient::builder()
        .watch(hub.subscribe("c"), "c")
        .load_balance_name(lb)
        .handshake(common::seata_tm())
        .configure(|o| o.request_timeout = CALL_TIMEOUT)
        .build()
        .await
        .unwrap();
    client.wait_alive(3, Duration::from_secs(5)).await.unwrap();
    proxy.set(faults);

    // An XID naming each TC, and its request.
    let xids: Arc<Vec<String>> = Arc::new(
        instances
            .iter()
            .map(|i| format!("{}:{}:2612341069705662465", i.host(), i.port()))
            .collect(),
    );
    let body = |xid: &str| {
        Payload::seata(&SeataMessage::GlobalStatus(GlobalEndRequest::new(xid))).unwrap()
    };
    let bodies: Arc<Vec<Payload>> = Arc::new(xids.iter().map(|x| body(x.as_str())).collect());
    let plain = body("10.0.0.1:8091:1");
    let instances = Arc::new(instances);

    let t0 = Instant::now();
    let calls: Arc<Mutex<Vec<Call>>> = Arc::default();
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let callers = common::Callers::start(CALLERS, |c, stop| {
        let (client, calls, failures) = (client.clone(), calls.clone(), failures.clone());
        let (xids, bodies, plain, instances) = (
            xids.clone(),
            bodies.clone(),
            plain.clone(),
            instances.clone(),
        );
        async move {
            let mut mine = Vec::new();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let named = n
                    .is_multiple_of(XID_EVERY)
                    .then(|| (c + (n / XID_EVERY) as usize) % 3);
                let (payload, opts) = match named {
                    Some(i) => (bodies[i].clone(), CallOptions::xid(&xids[i])),
                    None => (plain.clone(), CallOptions::new()),
                };
                let started = Instant::now();
                match client.call(payload, opts).await {
                    Ok(r) => mine.push(Call {
                        at: t0.elapsed(),
                        tc: instances
                            .iter()
                            .position(|i| i.key() == r.endpoint.key())
                            .expect("answered by a TC of the list"),
                        latency: started.elapsed(),
                        named,
                    }),
                    Err(e) => failures.lock().unwrap().push(e.to_string()),
                }
            }
            calls.lock().unwrap().extend(mine);
        }
    });
    tokio::time::sleep(SETTLE + WINDOW).await;
    callers.stop(CALL_TIMEOUT + Duration::from_secs(1)).await;
    client.shutdown(Duration::from_secs(1)).await;

    let calls = std::mem::take(&mut *calls.lock().unwrap());
    let window: Vec<&Call> = calls
        .iter()
        .filter(|c| c.at >= SETTLE && c.at < SETTLE + WINDOW)
        .collect();
    let mut per_tc = [0usize; 3];
    for c in window.iter().filter(|c| c.named.is_none()) {
        per_tc[c.tc] += 1;
    }
    let plain_total = per_tc.iter().sum::<usize>().max(1) as f64;
    let named: Vec<&&Call> = window.iter().filter(|c| c.named.is_some()).collect();
    let failures = std::mem::take(&mut *failures.lock().unwrap());
    Figures {
        rate: window.len() as f64 / WINDOW.as_secs_f64(),
        shares: per_tc.map(|n| n as f64 / plain_total),
        p99: p99(window.iter().map(|c| c.latency).collect()),
        p99_slow: p99(window
            .iter()
            .filter(|c| c.tc == SLOW)
            .map(|c| c.latency)
            .collect()),
        xid_calls: named.len(),
        xid_to_slow: named.iter().filter(|c| c.named == Some(SLOW)).count(),
        misroutes: named.iter().filter(|c| c.named != Some(c.tc)).count(),
        failures,
    }
}

fn line(lb: &str, phase: &str, f: &Figures) -> String {
    format!(
        "{lb:<26} {phase:<5}: {:>6.0} calls/s, p99 {:>6.1} ms (slow TC's calls {:>6.1} ms), \
         shares of calls without an XID: slow {:>5.1} %, others {:>5.1} % / {:>5.1} %; \
         XID calls {} ({} naming the slow TC), misrouted {}; failed {}",
        f.rate,
        f.p99.as_secs_f64() * 1e3,
        f.p99_slow.as_secs_f64() * 1e3,
        100.0 * f.shares[SLOW],
        100.0 * f.shares[1],
        100.0 * f.shares[2],
        f.xid_calls,
        f.xid_to_slow,
        f.misroutes,
        f.failures.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_aware_balancers_move_calls_off_a_slow_or_lossy_tc_and_xids_still_reach_their_tc() {
    if skip_reason().is_some() {
        return; // why was printed (and under CI=true it fails instead)
    }
    let mut report = Vec::new();
    let mut broken = Vec::new();
    for (phase, faults) in [("slow", slow()), ("lossy", lossy())] {
        let max = SLOW_SHARE_MAX.iter().find(|(p, _)| *p == phase).unwrap().1;
        for lb in ["RoundRobinLoadBalance", "XID"]
            .into_iter()
            .chain(common::LOAD_AWARE)
        {
            let f = run(lb, faults).await;
            let l = line(lb, phase, &f);
            eprintln!("{l}");
            if !f.failures.is_empty() {
                broken.push(format!(
                    "{l}: failures {:?}",
                    &f.failures[..f.failures.len().min(3)]
                ));
            }
            if f.rate < 50.0 {
                broken.push(format!("{l}: too few calls to judge"));
            }
            match lb {
                // The control: the fault would not show without it.
                "RoundRobinLoadBalance" if !(0.30..=0.37).contains(&f.shares[SLOW]) => {
                    broken.push(format!("{l}: round robin should give the slow TC ~1/3"));
                }
                "XID" if f.misroutes != 0 || f.xid_to_slow == 0 => {
                    broken.push(format!(
                        "{l}: every XID call must reach the TC its XID names"
                    ));
                }
                "P2C" | "LeastActiveLoadBalance" | "BoundedLoad" => {
                    if f.shares[SLOW] >= max {
                        broken.push(format!(
                            "{l}: the slow TC's share must stay below {:.0} %",
                            100.0 * max
                        ));
                    }
                    if f.p99 >= LOAD_AWARE_P99_MAX {
                        broken.push(format!("{l}: p99 must stay below {LOAD_AWARE_P99_MAX:?}"));
                    }
                }
                // XID routing first, the load-aware pick for the rest: both hold.
                xid_first if xid_first.starts_with("xid:") => {
                    let bounds = if phase == "lossy" {
                        XID_FIRST_LOSSY_SHARE_MAX
                    } else {
                        XID_FIRST_SLOW_SHARE_MAX
                    };
                    let max = bounds.iter().find(|(n, _)| *n == xid_first).unwrap().1;
                    if f.misroutes != 0 || f.xid_to_slow == 0 {
                        broken.push(format!(
                            "{l}: every XID call must reach the TC its XID names"
                        ));
                    }
                    if f.shares[SLOW] >= max {
                        broken.push(format!(
                            "{l}: the slow TC's share must stay below {:.0} %",
                            100.0 * max
                        ));
                    }
                }
                _ => {}
            }
            report.push(l);
        }
    }
    meshline_testkit::figures::report("slow_tc", &report.join("\n"));
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
