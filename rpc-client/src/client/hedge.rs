//! Hedging: a call marked idempotent ([`CallOptions::idempotent`]) that has not been
//! answered after the client's recent latency percentile is sent a second time, to
//! another endpoint, and the first good answer wins (tower's `hedge`, gRPC's hedging
//! policy, Finagle's backup requests). One slow server then costs a caller the
//! percentile, not the server's stall.
//!
//! - **Only idempotent calls**: the caller says so per call; the TM's GlobalStatus and
//!   the RM's GlobalLockQuery are marked (reads). Never a write: a commit sent twice is
//!   two commits.
//! - **The delay**: the `percentile` (95 by default) of the latencies of the client's
//!   idempotent calls over the last full period (10 s; `latency`); with fewer than 20
//!   answers in it, no hedge is sent (no basis for a delay).
//! - **Bounded by the retry budget**: each hedge withdraws from it
//!   ([`RetryBudget`](crate::RetryBudget)); with the budget spent the call just waits.
//! - **The first good answer wins**: the hedge goes to another endpoint than the first
//!   request's. An answer from it is taken only when the classifier reads it as a
//!   success; anything else (an error, the caller's or the server's failure) waits for
//!   the first request's answer. So a TC that does not share its store (Seata's file
//!   mode) answering "no such transaction" to a GlobalStatus it was not the home of
//!   never beats the home TC's answer. The first request's answer is taken as it is;
//!   when it fails without an answer, the hedge's result is the call's.
//! - **Never away from the TC an XID names**: under a balancer that routes by XID
//!   (`XID`, `xid:<name>`; [`LoadBalance::routes_by_xid`]), a call carrying an XID is
//!   not hedged. Seata's TC answers a GlobalStatus of a transaction it does not hold
//!   with success (`Finished`, `DefaultCore.getStatus`), so in file or raft mode a
//!   hedge to another TC would be answered at once, wrongly, and win; choosing XID
//!   routing is saying the transaction's calls belong to its TC. Under a balancer that
//!   ignores XIDs any TC was going to answer (a shared store), and the read is hedged.
//!
//! [`LoadBalance::routes_by_xid`]: meshline_loadbalance::LoadBalance::routes_by_xid

mod latency;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use meshline_registry_core::{Instance, InstanceKey};

use super::metrics::Counter;
use super::{CallOptions, RpcClient};
use crate::connection::SendKind;
use crate::error::RpcError;
use crate::outcome::{Outcome, outcome_of};
use crate::payload::Payload;
use latency::Latencies;

/// Hedging's settings (`transport.hedge=true`, `transport.hedgePercentile`).
#[derive(Debug, Clone, PartialEq)]
pub struct Hedging {
    /// The latency percentile (0 to 100, 95 by default) after which an idempotent call
    /// is sent again.
    pub percentile: f64,
    /// The period latencies are read over (10 s): the delay is the percentile of the
    /// last full period's idempotent calls.
    pub period: Duration,
    /// Answers a period must hold before its percentile is a delay (20); with fewer, no
    /// hedge is sent.
    pub min_samples: u64,
}

impl Default for Hedging {
    fn default() -> Self {
        Hedging {
            percentile: 95.0,
            period: Duration::from_secs(10),
            min_samples: 20,
        }
    }
}

/// A client's hedging: its settings and its recent latencies.
pub(super) struct Hedger {
    settings: Hedging,
    latencies: Latencies,
}

impl Hedger {
    pub fn new(settings: &Hedging) -> Hedger {
        Hedger {
            settings: settings.clone(),
            latencies: Latencies::new(settings.period),
        }
    }
}

type Sent = Result<(Arc<Instance>, Option<Payload>), RpcError>;

/// Which of the two requests ended first, and how.
enum First {
    Primary(Sent),
    Hedge(Sent),
}

impl RpcClient {
    /// Whether a call may be hedged (module docs): marked idempotent, and not bound by
    /// its XID to one TC.
    #[inline]
    pub(super) fn may_hedge(&self, opts: &CallOptions<'_>) -> bool {
        opts.is_idempotent()
            && !(opts.pick_request().xid_str().is_some()
                && self.inner().balancer.load_balance().routes_by_xid())
    }

    /// An idempotent request call of a hedging client (module docs).
    pub(super) async fn hedged(
        &self,
        hedger: &Hedger,
        payload: Payload,
        opts: &CallOptions<'_>,
        wait: bool,
    ) -> Sent {
        let started = tokio::time::Instant::now();
        let first_pick = OnceLock::new();
        let delay = hedger
            .latencies
            .percentile(hedger.settings.percentile, hedger.settings.min_samples);
        let primary = self.balanced(
            payload.clone(),
            opts,
            SendKind::Request,
            wait,
            Some(&first_pick),
        );
        tokio::pin!(primary);
        let result = match delay {
            None => primary.await,
            Some(delay) => {
                let early = tokio::select! {
                    r = &mut primary => Some(r),
                    _ = tokio::time::sleep(delay) => None,
                };
                match early {
                    Some(r) => r,
                    None => {
                        self.race(primary.as_mut(), payload, opts, wait, first_pick.get())
                            .await
                    }
                }
            }
        };
        if result.is_ok() {
            hedger.latencies.record(started.elapsed());
        }
        result
    }

    /// The hedge sent beside the first request still waiting (`primary`), and the
    /// answer the module docs say wins.
    async fn race(
        &self,
        mut primary: std::pin::Pin<&mut impl std::future::Future<Output = Sent>>,
        payload: Payload,
        opts: &CallOptions<'_>,
        wait: bool,
        first: Option<&InstanceKey>,
    ) -> Sent {
        if !self.handle.retries.withdraw() {
            self.inner().count(Counter::RetriesRefused);
            return primary.await;
        }
        self.inner().count(Counter::Hedges);
        let mut keys = self.caller_exclusions(opts.pick_request().exclusions());
        keys.extend(first.cloned());
        let mut hedge_opts = CallOptions::route(opts.pick_request().excluding(&keys[..]));
        if let Some(t) = opts.timeout() {
            hedge_opts = hedge_opts.with_timeout(t);
        }
        let hedge = self.balanced(payload, &hedge_opts, SendKind::Request, wait, None);
        tokio::pin!(hedge);
        let first_done = tokio::select! {
            r = &mut primary => First::Primary(r),
            r = &mut hedge => First::Hedge(r),
        };
        match first_done {
            First::Primary(Ok(answer)) => Ok(answer),
            // No answer from the first request: the hedge's result is the call's.
            First::Primary(Err(first_error)) => match hedge.await {
                Ok(answer) => {
                    self.inner().count(Counter::HedgesWon);
                    Ok(answer)
                }
                Err(_) => Err(first_error),
            },
            First::Hedge(Ok(answer)) if self.reads_as_success(answer.1.as_ref()) => {
                self.inner().count(Counter::HedgesWon);
                Ok(answer)
            }
            First::Hedge(_) => primary.await,
        }
    }

    /// Whether an answer is a success by the client's classifier (every answer is,
    /// without one).
    fn reads_as_success(&self, answer: Option<&Payload>) -> bool {
        outcome_of(self.inner().options.classifier.as_ref(), answer) == Outcome::Success
    }
}
