//! Keeping per-entry registrations alive, for the backends whose registry renews each
//! entry on its own (Consul's TTL checks, Eureka's leases): a renewal of every entry
//! each period, a re-registration of an entry the registry lost (it restarted empty),
//! and a backoff while renewals fail. Written once here; each backend says only how to
//! renew one entry and how to write it again.

use std::future::Future;
use std::time::Duration;

use super::{Lifecycle, Registrations};
use crate::Backoff;

/// What renewing one registration found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    /// The registry renewed it.
    Renewed,
    /// The registry no longer knows it (it answered 404, e.g. after a restart that
    /// lost its state): it must be registered again.
    Lost,
    /// The renewal failed, for this reason (logged); the round is retried sooner.
    Failed(String),
}

impl Lifecycle {
    /// Keeps every entry of `regs` alive until the client closes: each `period`,
    /// `renew` each one; an entry the registry lost is written again with `rewrite`,
    /// unless an unregister took it meanwhile (the registrations lock is held across
    /// that check and the write, so an unregister cannot fall between them). After any
    /// failure the next round comes sooner, on a backoff from 100 ms up to `period`.
    pub async fn keep_alive<V, R, RF, W, WF>(
        &self,
        regs: &Registrations<V>,
        period: Duration,
        mut renew: R,
        mut rewrite: W,
    ) where
        V: Clone + Send,
        R: FnMut(String, V) -> RF,
        RF: Future<Output = Renewal>,
        W: FnMut(String, V) -> WF,
        WF: Future<Output = Result<(), String>>,
    {
        let period = period.max(Duration::from_millis(50));
        let mut backoff = Backoff::new(Duration::from_millis(100), period);
        let mut delay = period;
        let kind = self.kind();
        loop {
            if !self.sleep(delay).await {
                return;
            }
            let mut failed = false;
            for (entry, value) in regs.snapshot().await {
                match renew(entry.clone(), value.clone()).await {
                    Renewal::Renewed => {}
                    Renewal::Lost => {
                        let held = regs.lock().await;
                        if !held.contains_key(&entry) {
                            continue;
                        }
                        let written = rewrite(entry.clone(), value).await;
                        drop(held);
                        match written {
                            Ok(()) => tracing::info!(
                                registry = kind,
                                entry,
                                "the registry had lost our registration; registered it again"
                            ),
                            Err(error) => {
                                failed = true;
                                tracing::warn!(
                                    registry = kind,
                                    entry,
                                    error,
                                    "re-registration failed; retrying"
                                );
                            }
                        }
                    }
                    Renewal::Failed(error) => {
                        failed = true;
                        tracing::warn!(registry = kind, entry, error, "renewal failed; retrying");
                    }
                }
            }
            delay = if failed {
                backoff.next_delay()
            } else {
                backoff.reset();
                period
            };
        }
    }
}
