//! The naming client's liveness rule against a server that stops answering (rnacos
//! under `SIGSTOP`: its sockets stay open, nothing is answered, no reset), on loopback:
//!
//! 1. A stall shorter than `HEALTH_TRIES` unanswered checks (a GC pause) keeps the
//!    connection: the stall is timed to start 0.5 s before a health check (the client
//!    checks `HEALTH_PERIOD` after each answer, and R's log at `trace` shows each
//!    answer), so that check goes unanswered, the next is sent at once and answered
//!    when the server resumes. R's log must show the unanswered check and no
//!    connection lost. (With one try the connection would be left at the first.)
//! 2. A longer stall is left within `HEALTH_PERIOD + HEALTH_TRIES x HEALTH_TIMEOUT`,
//!    the log naming the unanswered checks; when the server resumes, R connects again
//!    and its registration is listed again.
//!
//! A test binary of its own (a process-wide subscriber captures R's log). It times a
//! stall to a fraction of a second, so `scripts/run-tests.py` runs it on its own,
//! never beside other tests (its marker: "runs one at a time: timed stalls"; an
//! idle-priority compile may run beside it, and a test that wakes takes the CPU from it
//! at once).

use std::time::{Duration, Instant};

use meshline_registry_core::RegistryService;
use meshline_registry_nacos::{HEALTH_PERIOD, HEALTH_TIMEOUT, HEALTH_TRIES, NacosRegistry};
use meshline_testkit::Rnacos;
use meshline_testkit::watch::{LogBuf, addrs, inst, wait_for};

const ME: &str = "10.6.6.6:8091";
/// The client's note of one health check's answer (`src/grpc/conn.rs`, `trace`).
const ANSWERED: &str = "kind=\"HealthCheckRequest\"";
const UNANSWERED: &str = "a health check went unanswered";
const LOST: &str = "connection lost";

/// How many lines of `logs` contain `what`.
fn count(logs: &LogBuf, what: &str) -> usize {
    logs.text().lines().filter(|l| l.contains(what)).count()
}

/// Waits for one more line containing `what` than `before`; returns when it came.
/// (The log buffer has no notification: it is read every 5 ms.)
async fn next_line(logs: &LogBuf, what: &str, before: usize, within: Duration) -> Instant {
    let from = Instant::now();
    loop {
        if count(logs, what) > before {
            return Instant::now();
        }
        assert!(
            from.elapsed() < within,
            "no new line with {what:?} within {within:?}:\n{}",
            logs.text()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_stall_keeps_the_connection_and_a_long_one_is_left() {
    let logs = LogBuf::global("meshline_registry_nacos=trace");
    let mut server = Rnacos::start().expect("start rnacos");
    let r = NacosRegistry::connect(&server.registry_config(&[]))
        .await
        .unwrap();
    r.register("default", &inst(ME)).await.unwrap();

    // 1. A stall of 2.7 s from 0.5 s before a check: that check goes unanswered (1.5 s),
    // the next, sent at once, is answered at the resume, 0.8 s before its deadline.
    let answered = next_line(&logs, ANSWERED, count(&logs, ANSWERED), 2 * HEALTH_PERIOD).await;
    tokio::time::sleep_until((answered + HEALTH_PERIOD - Duration::from_millis(500)).into()).await;
    let (unanswered, lost) = (count(&logs, UNANSWERED), count(&logs, LOST));
    server.pause().expect("SIGSTOP");
    // The stall itself: its length is the fault under test.
    tokio::time::sleep(Duration::from_millis(2700)).await;
    server.resume().expect("SIGCONT");
    // Two more answered checks after the resume.
    let after = count(&logs, ANSWERED);
    next_line(&logs, ANSWERED, after + 1, 3 * HEALTH_PERIOD).await;
    assert_eq!(
        count(&logs, LOST),
        lost,
        "a 2.7 s stall cost the connection:\n{}",
        logs.text()
    );
    assert!(
        count(&logs, UNANSWERED) > unanswered,
        "the stall was not noticed (no unanswered check), so it proves nothing:\n{}",
        logs.text()
    );

    // 2. A stall of 8 s: left within the rule's bound, then back after the resume.
    let bound = HEALTH_PERIOD + HEALTH_TIMEOUT * HEALTH_TRIES + Duration::from_millis(500);
    let lost = count(&logs, LOST);
    server.pause().expect("SIGSTOP");
    let paused = Instant::now();
    let left = next_line(&logs, LOST, lost, bound + Duration::from_secs(1)).await;
    let left_after = left - paused;
    let line = logs
        .text()
        .lines()
        .rfind(|l| l.contains(LOST))
        .unwrap_or_default()
        .to_string();
    assert!(
        line.contains(&format!(
            "no answer to {HEALTH_TRIES} health checks in a row"
        )),
        "{line}"
    );
    assert!(
        left_after <= bound,
        "left {left_after:?} after the stall began"
    );
    tokio::time::sleep_until((paused + Duration::from_secs(8)).into()).await;
    server.resume().expect("SIGCONT");
    let resumed = Instant::now();
    let observer = NacosRegistry::connect(&server.registry_config(&[]))
        .await
        .unwrap();
    let mut w = observer.watch("default").await.unwrap();
    wait_for(
        &mut w,
        Duration::from_secs(8).saturating_sub(resumed.elapsed()),
        "R's registration listed again after the resume",
        |s| addrs(s).iter().any(|a| a == ME),
    )
    .await;
    meshline_testkit::figures::report(
        "nacos_stall",
        &format!(
            "a 2.7 s stall kept the connection; an 8 s stall left {left_after:?} after it \
             began (bound {bound:?}); the registration listed again {:?} after the resume",
            resumed.elapsed()
        ),
    );
    drop(w);
    observer.close().await.unwrap();
    r.close().await.unwrap();
}
