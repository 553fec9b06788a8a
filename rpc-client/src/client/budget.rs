//! The retry budget: how many calls may be sent again, as a share of the calls made.
//!
//! Retries multiply load exactly when a cluster can least take it: when every server is
//! struggling, a client that retries each failure up to its attempt limit sends up to
//! that many times its traffic. A budget caps retries at a ratio of the calls made over
//! a window, plus a small floor per second for quiet clients (tower's `TpsBudget`,
//! linkerd's and Finagle's retry budget; Envoy's `retry_budget`). Every balanced call
//! deposits; a request not written that would go to another endpoint, and a TM's commit
//! or rollback sent again after no answer, withdraw. With the budget spent the call
//! fails with what it met ([`RpcError::RetryBudgetExhausted`](crate::RpcError::RetryBudgetExhausted)),
//! still known not delivered where it was not written.

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

/// A client's budget at run time.
pub(crate) struct Retries(TpsBudget);

impl Retries {
    pub fn new(b: &RetryBudget) -> Self {
        // tower's bounds (it panics outside them); the settings reader refuses values
        // outside them first, so the clamp only guards a budget set in code.
        let ttl = b.ttl.clamp(Duration::from_secs(1), Duration::from_secs(60));
        let ratio = (b.percent / 100.0).clamp(0.0, 10.0);
        Retries(TpsBudget::new(ttl, b.min_per_second, ratio))
    }

    /// A call was made.
    #[inline]
    pub fn deposit(&self) {
        self.0.deposit();
    }

    /// Whether one more retry may be sent (and, if so, it is counted).
    pub fn withdraw(&self) -> bool {
        self.0.withdraw()
    }
}

impl std::fmt::Debug for Retries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Retries")
    }
}
