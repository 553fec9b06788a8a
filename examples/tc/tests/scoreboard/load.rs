//! The load every stack carries, and what is measured of it.
//!
//! Callers call in a loop, each waiting for its answer before the next: three calls
//! in four are GlobalBegins (no XID: the balancer chooses), the fourth a GlobalStatus
//! whose XID names one of the TCs the scenario calls stable, in turn (a read: both
//! stacks may hedge it). A call fails for the user when the stack returns an error or
//! the TC answers with the server's failure (Seata's classifier: `FailedStore`...); an
//! answer that is the caller's own failure (a GlobalStatus of an XID the TC does not
//! hold) is an answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use meshline::Instance;
use meshline::rpc::message::{GlobalBeginRequest, GlobalEndRequest, SeataMessage};
use meshline::rpc::{Classifier, Outcome, Payload};

use super::stacks::Stack;

/// One call as the user sees it.
#[derive(Clone)]
pub struct Req {
    /// The Seata message.
    pub payload: Payload,
    /// The XID it names, if any.
    pub xid: Option<String>,
    /// The TC the XID names (its address), to check where the answer came from.
    pub named: Option<String>,
}

impl Req {
    fn begin(n: u64) -> Req {
        let msg = SeataMessage::GlobalBegin(GlobalBeginRequest {
            timeout_ms: 60_000,
            transaction_name: Some(format!("order-{n}")),
        });
        Req {
            payload: Payload::seata(&msg).expect("encode"),
            xid: None,
            named: None,
        }
    }

    fn status(tc: &Instance, n: u64) -> Req {
        let xid = format!("{}:{}:{n}", tc.host(), tc.port());
        let msg = SeataMessage::GlobalStatus(GlobalEndRequest::new(&xid));
        Req {
            payload: Payload::seata(&msg).expect("encode"),
            xid: Some(xid),
            named: Some(tc.to_string()),
        }
    }

    /// Whether the request is a read (may be sent twice).
    pub fn idempotent(&self) -> bool {
        self.xid.is_some()
    }
}

/// What one call gave the user: when it started, how long it took, whether it failed,
/// and for an XID call whether the TC it names answered.
#[derive(Clone, Copy)]
pub struct Call {
    pub started: Instant,
    pub took: Duration,
    pub failed: bool,
    /// `Some(reached the named TC)` for a successful XID call.
    pub affinity: Option<bool>,
    /// The index (in the stable list) of the TC the XID names.
    pub named: Option<usize>,
}

/// Runs `callers` loops on each stack until `stop`, naming `stable` TCs in the XIDs;
/// every call is returned.
pub async fn drive(
    stacks: &[Stack],
    callers: usize,
    stable: &[Instance],
    stop: Arc<AtomicBool>,
) -> Vec<Call> {
    let classifier = Classifier::seata();
    let stable: Arc<Vec<Instance>> = Arc::new(stable.to_vec());
    let mut tasks = Vec::new();
    for (s, stack) in stacks.iter().enumerate() {
        for c in 0..callers {
            let (stack, stop, stable, classifier) = (
                stack.clone(),
                stop.clone(),
                stable.clone(),
                classifier.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut calls = Vec::new();
                let mut n = ((s * 1000 + c) as u64) << 32;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let named = (n.is_multiple_of(4) && !stable.is_empty())
                        .then(|| (n / 4) as usize % stable.len());
                    let req = match named {
                        Some(i) => Req::status(&stable[i], n),
                        None => Req::begin(n),
                    };
                    let want = req.named.clone();
                    let started = Instant::now();
                    let r = stack.call(req).await;
                    let took = started.elapsed();
                    let (failed, answered_by) = match r {
                        Ok((by, payload)) => (
                            classifier.classify(&payload) == Outcome::ServerFailure,
                            Some(by),
                        ),
                        Err(_) => (true, None),
                    };
                    let affinity = match (&want, &answered_by, failed) {
                        (Some(w), Some(by), false) => Some(*w == *by),
                        _ => None,
                    };
                    calls.push(Call {
                        started,
                        took,
                        failed,
                        affinity,
                        named,
                    });
                }
                calls
            }));
        }
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("caller"));
    }
    all
}

/// One stack's figures over a scenario's measured window (latencies: of the calls
/// that succeeded).
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub calls: usize,
    pub error_rate: f64,
    pub p50: Duration,
    pub p99: Duration,
    pub throughput: f64,
    /// XID calls answered by the TC they name, of the successful XID calls counted
    /// (`None`: none counted).
    pub affinity: Option<f64>,
    /// Failed calls, plus writes the stack sent again after an error that may have
    /// been delivered (each perhaps applied twice): what went wrong for the user.
    pub harmed: usize,
}

/// The figures of the calls started in `[from, from + span)`; XID calls naming a TC
/// inside one of its `outages` (stable index, from, to) are left out of the affinity.
pub fn row(
    calls: &[Call],
    from: Instant,
    span: Duration,
    outages: &[(usize, Instant, Instant)],
    risky_retries: u64,
) -> Row {
    let to = from + span;
    let window: Vec<&Call> = calls
        .iter()
        .filter(|c| c.started >= from && c.started < to)
        .collect();
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
    // Latencies of the calls that succeeded: a failed call is counted in the error
    // rate, and a stack that fails calls fast would otherwise look fast.
    for c in window.iter().filter(|c| !c.failed) {
        h.saturating_record(c.took.as_micros().max(1) as u64);
    }
    let failed = window.iter().filter(|c| c.failed).count();
    let counted: Vec<bool> = window
        .iter()
        .filter(|c| {
            !outages
                .iter()
                .any(|(tc, a, b)| c.named == Some(*tc) && c.started >= *a && c.started < *b)
        })
        .filter_map(|c| c.affinity)
        .collect();
    let affinity = (!counted.is_empty())
        .then(|| counted.iter().filter(|a| **a).count() as f64 / counted.len() as f64);
    Row {
        calls: window.len(),
        error_rate: failed as f64 / window.len().max(1) as f64,
        p50: Duration::from_micros(h.value_at_quantile(0.50)),
        p99: Duration::from_micros(h.value_at_quantile(0.99)),
        throughput: window.len() as f64 / span.as_secs_f64(),
        affinity,
        harmed: failed + risky_retries as usize,
    }
}
