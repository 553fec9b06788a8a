//! The retry budget: how many requests may be sent again, as a share of the calls made.
//!
//! Retries multiply load exactly when a cluster can least take it: when every server is
//! struggling, a client that sends each unanswered request again up to its attempt limit
//! sends up to that many times its traffic. A budget caps those at a ratio of the calls
//! made over a window, plus a small floor per second for quiet clients (tower's
//! `TpsBudget`, linkerd's and Finagle's retry budget; Envoy's `retry_budget`). Every
//! balanced call deposits; a request sent again after no answer (the TM's commit and
//! rollback, and any caller through [`RpcClient::withdraw_retry`](crate::RpcClient::withdraw_retry))
//! withdraws. With the budget spent the caller keeps the failure it met.
//!
//! A request that was **not written** is not counted: it never left this client, so
//! sending it to another endpoint adds nothing to any server's load. It is failover, as
//! a connection pool re-queues a request its dead connection never sent (Envoy's pool
//! does not count that as a retry either), and `max_attempts` bounds it per call. Taking
//! it from the budget would fail exactly the calls a dead TC left queued (hundreds at
//! once, when it dies under load) while a live TC could answer every one of them.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tower::retry::budget::{Budget, TpsBudget};

/// The budget's settings (`transport.retryBudget*`; tower's defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryBudget {
    /// Retries allowed per call made, in percent (`transport.retryBudgetPercent`, 20:
    /// one retry for every five calls). At most 1000.
    pub percent: f32,
    /// Retries allowed per second whatever the calls (`transport.retryBudgetMinPerSecond`,
    /// 10): a client that has made few calls may still retry.
    pub min_per_second: u32,
    /// How long a call counts toward the budget (`transport.retryBudgetTtl`, 10 s;
    /// 1 s to 60 s).
    pub ttl: Duration,
}

impl Default for RetryBudget {
    fn default() -> Self {
        RetryBudget {
            percent: 20.0,
            min_per_second: 10,
            ttl: Duration::from_secs(10),
        }
    }
}

/// Calls counted per deposit into the budget.
///
/// A deposit into tower's budget takes a lock and reads the clock (about 50 ns, a
/// sixth of the client's own work per call, and a lock every caller shares); one
/// deposit worth [`BATCH`] calls every [`BATCH`] calls costs a counter increment per
/// call instead. What it loses is at most `BATCH - 1` calls not yet counted, against
/// windows of thousands.
const BATCH: u32 = 16;

/// A client's budget at run time.
pub(crate) struct Retries {
    budget: TpsBudget,
    calls: AtomicU32,
}

impl Retries {
    pub fn new(b: &RetryBudget) -> Self {
        // tower's bounds (it panics outside them); the settings reader refuses values
        // outside them first, so the clamp only guards a budget set in code.
        let ttl = b.ttl.clamp(Duration::from_secs(1), Duration::from_secs(60));
        let ratio = (b.percent / 100.0).clamp(0.0, 10.0) * BATCH as f32;
        Retries {
            budget: TpsBudget::new(ttl, b.min_per_second, ratio),
            calls: AtomicU32::new(0),
        }
    }

    /// A call was made.
    #[inline]
    pub fn deposit(&self) {
        if self.calls.fetch_add(1, Ordering::Relaxed) % BATCH == BATCH - 1 {
            self.budget.deposit();
        }
    }

    /// Whether one more retry may be sent (and, if so, it is counted).
    pub fn withdraw(&self) -> bool {
        self.budget.withdraw()
    }
}

impl std::fmt::Debug for Retries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Retries")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A budget of `percent` with no floor (only calls earn retries), after `calls`
    /// calls have deposited into it.
    fn deposited(percent: f32, calls: usize) -> Retries {
        let r = Retries::new(&RetryBudget {
            percent,
            min_per_second: 0,
            ..RetryBudget::default()
        });
        for _ in 0..calls {
            r.deposit();
        }
        r
    }

    /// A ratio of 50 % over a batch of calls: 32 calls deposit two batches, worth 16
    /// retries, beside the floor; with no floor and no ratio nothing is ever granted.
    #[tokio::test]
    async fn deposits_in_batches_grant_the_ratio_of_the_calls() {
        let none = deposited(0.0, 100);
        assert!(!none.withdraw());
        let half = deposited(50.0, 15);
        assert!(!half.withdraw(), "15 calls: no batch deposited yet");
        for _ in 0..17 {
            half.deposit();
        }
        let granted = (0..100).filter(|_| half.withdraw()).count();
        assert_eq!(granted, 16, "half of 32 calls");
    }
}
