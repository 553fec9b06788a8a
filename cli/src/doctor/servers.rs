//! Step 4: every member the registry listed, checked as the client would use it: TCP
//! connect, a Seata PING answered by a PONG, and the RegisterTM handshake, each with
//! its round-trip time or its error (`meshline::rpc::probe`).

use std::time::Duration;

use meshline::Config;
use meshline::Instance;
use meshline::rpc::probe::probe;
use meshline::rpc::transport::TransportOptions;
use meshline::rpc::{RegisterTmRequest, SeataRegistration};

use super::report::{ServerResult, Step, StepKind, ms};

/// At most this many members are probed (a registry that lists thousands is itself a
/// finding; the first ones tell enough).
const MAX_PROBED: usize = 32;

/// How long each step of a probe may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(3);

/// Probes `members` (up to [`MAX_PROBED`]) and describes them.
pub async fn check(
    config: &Config,
    group: &str,
    members: &[Instance],
) -> (Vec<ServerResult>, Step) {
    // An invalid transport key is step 1's to report; the probe uses the defaults then.
    let transport = TransportOptions::from_config(config).unwrap_or_default();
    let handshake = SeataRegistration::tm(RegisterTmRequest {
        version: env!("CARGO_PKG_VERSION").into(),
        application_id: config.application_id.clone(),
        transaction_service_group: group.to_string(),
        extra_data: None,
    })
    .with_timeout(STEP_TIMEOUT);
    // Concurrently, in order of the list; each probe is bounded by its step deadlines.
    let mut tasks = tokio::task::JoinSet::new();
    for (i, m) in members.iter().take(MAX_PROBED).enumerate() {
        let (m, transport, handshake) = (m.clone(), transport.clone(), handshake.clone());
        tasks.spawn(async move {
            let r = probe(
                m.host(),
                m.port(),
                &transport,
                Some(&handshake),
                STEP_TIMEOUT,
            )
            .await;
            let result = ServerResult {
                address: m.to_string(),
                connect: r.connect,
                ping: r.ping,
                register: r.handshake,
            };
            (i, result)
        });
    }
    let mut results: Vec<(usize, ServerResult)> = Vec::new();
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(r) => results.push(r),
            Err(e) => tracing::warn!(error = %e, "a probe task failed"),
        }
    }
    results.sort_by_key(|(i, _)| *i);
    let results: Vec<ServerResult> = results.into_iter().map(|(_, r)| r).collect();
    let accepted = results.iter().filter(|r| r.accepted()).count();
    let mut step = if accepted > 0 {
        Step::ok(
            StepKind::Servers,
            format!("{accepted} of {} TC(s) accepted RegisterTM", results.len()),
        )
    } else {
        Step::failed(
            StepKind::Servers,
            format!("none of {} TC(s) accepted RegisterTM", results.len()),
        )
    };
    if members.len() > MAX_PROBED {
        step = step.evidence(format!(
            "{} members listed; the first {MAX_PROBED} probed",
            members.len()
        ));
    }
    let mut down = false;
    let mut refused = false;
    for r in &results {
        step = step.evidence(line(r));
        down |= r.connect.is_err() || matches!(r.ping, Some(Err(_)));
        refused |= matches!(r.register, Some(Err(_)));
    }
    // Fixes for the members that failed, also when another one accepted: a client
    // keeps trying them, and a stale registration hides real capacity problems.
    {
        if down {
            step = step.fix(
                "a TC that does not answer: start it, or remove its stale registration (a crashed \
                 TC stays listed until its registration expires)",
            );
        }
        if refused {
            step = step.fix(
                "a TC that refuses RegisterTM: check that client and TC versions are compatible \
                 and the TC's authentication settings (a refusal names the TC's version)",
            );
        }
    }
    (results, step)
}

/// One server's line: `✓ 10.0.0.1:8091 connect 0.3 ms, PING/PONG 0.4 ms, RegisterTM 1.1 ms`.
fn line(r: &ServerResult) -> String {
    let mark = if r.accepted() { '✓' } else { '✗' };
    let mut parts = Vec::new();
    match &r.connect {
        Ok(d) => parts.push(format!("connect {} ms", ms(*d))),
        Err(e) => parts.push(e.clone()),
    }
    match &r.ping {
        Some(Ok(d)) => parts.push(format!("PING/PONG {} ms", ms(*d))),
        Some(Err(e)) => parts.push(format!("PING: {e}")),
        None => {}
    }
    match &r.register {
        Some(Ok(d)) => parts.push(format!("RegisterTM accepted in {} ms", ms(*d))),
        Some(Err(e)) => parts.push(format!("RegisterTM: {e}")),
        None => {}
    }
    format!("{mark} {}: {}", r.address, parts.join(", "))
}
