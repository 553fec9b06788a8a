//! Failure accrual: an endpoint whose calls keep failing leaves the picks for a while,
//! and a PING decides when it returns (outlier ejection, as Finagle, linkerd and Envoy
//! do it).
//!
//! Every call ends on its endpoint's stats as a success or a failure; a call that timed
//! out, or whose connection failed after it was written, is a failure. After
//! [`ClientOptions::eject_after_failures`](super::ClientOptions::eject_after_failures)
//! failures in a row the endpoint is taken out of the alive set (its connection stays
//! open) for [`ClientOptions::ejection_time`](super::ClientOptions::ejection_time),
//! doubled for each ejection in a row up to 30 s. Then a PING goes out on its
//! connection: answered, the endpoint returns to the picks (and one more failure ejects
//! it again, for longer); unanswered, the connection is closed and the endpoint
//! reconnects like any other.
//!
//! At most half the endpoints are ejected at once, and never the last one alive: when
//! everything fails, ejecting everything would only turn errors into "no endpoint".

use std::sync::Arc;
use std::time::{Duration, Instant};

use meshline_registry_core::InstanceKey;

use super::alive::{AliveEndpoint, EndpointState};
use super::membership::Inner;
use super::metrics::Counter;

/// Longest ejection.
const MAX_EJECTION: Duration = Duration::from_secs(30);
/// An ejection within this long of the endpoint's return counts as "in a row".
const IN_A_ROW: Duration = Duration::from_secs(60);

/// An endpoint out of the picks.
pub(crate) struct Ejected {
    pub entry: AliveEndpoint,
    pub generation: u64,
}

impl Inner {
    /// A call on `key` failed with `in_a_row` failures in a row now on its stats: eject
    /// the endpoint when that reaches the limit.
    pub fn call_failed(self: &Arc<Self>, key: &InstanceKey, in_a_row: u32) {
        let limit = self.options.eject_after_failures;
        if limit > 0 && in_a_row >= limit {
            self.eject(key, in_a_row);
        }
    }

    /// A call on an ejected endpoint failed (it was picked before the ejection):
    /// counted on it, so its return needs a success to clear.
    pub fn ejected_failed(&self, key: &InstanceKey) {
        if let Some(e) = self.state().ejected.get(key) {
            e.entry.failed();
        }
    }

    fn eject(self: &Arc<Self>, key: &InstanceKey, in_a_row: u32) {
        let (generation, time, conn) = {
            let mut st = self.state();
            let Some(entry) = st.alive.get(key).cloned() else {
                return; // gone, or ejected already
            };
            let total = st.alive.len() + st.ejected.len();
            if st.alive.len() <= 1 || (st.ejected.len() + 1) * 2 > total {
                tracing::debug!(endpoint = %key, in_a_row, "failing, but not ejected: too few endpoints would be left");
                return;
            }
            let Some(slot) = st.endpoints.get_mut(key) else {
                return;
            };
            slot.ejections = match slot.returned_at {
                Some(t) if t.elapsed() < IN_A_ROW => slot.ejections + 1,
                _ => 1,
            };
            let factor = 1u32 << (slot.ejections - 1).min(16);
            let time = self
                .options
                .ejection_time
                .saturating_mul(factor)
                .min(MAX_EJECTION);
            slot.state = EndpointState::Ejected(format!(
                "{in_a_row} failed calls in a row; a PING decides in {time:?} whether it returns"
            ));
            let generation = slot.generation;
            let conn = entry.connection.clone();
            st.alive.remove(key);
            st.ejected
                .insert(key.clone(), Ejected { entry, generation });
            self.publish_alive(&st);
            (generation, time, conn)
        };
        self.count(Counter::Ejections);
        tracing::warn!(endpoint = %key, in_a_row, ?time, "endpoint ejected from the picks after failed calls");
        let inner = self.clone();
        let key = key.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(time) => {}
                _ = inner.shutdown.cancelled() => return,
                _ = conn.closed() => return,
            }
            inner.probe_ejected(key, generation).await;
        });
    }

    /// The ejection is over: a PING on the endpoint's connection decides.
    async fn probe_ejected(&self, key: InstanceKey, generation: u64) {
        let conn = {
            let st = self.state();
            match st.ejected.get(&key) {
                Some(e) if e.generation == generation => e.entry.connection.clone(),
                _ => return,
            }
        };
        let timeout = self
            .options
            .probe
            .map_or(Duration::from_secs(1), |p| p.after + p.timeout);
        match conn.ping(timeout).await {
            Ok(rtt) => {
                let mut st = self.state();
                let Some(e) = st.ejected.remove(&key) else {
                    return;
                };
                if e.generation != generation || e.entry.connection.is_closed() {
                    return;
                }
                if let Some(slot) = Inner::slot_mut(&mut st, &key, generation) {
                    slot.state = EndpointState::Alive;
                    slot.returned_at = Some(Instant::now());
                }
                st.alive.insert(key.clone(), e.entry);
                self.publish_alive(&st);
                tracing::info!(endpoint = %key, ?rtt, "ejected endpoint answered a PING; back in the picks");
            }
            Err(e) => {
                tracing::warn!(endpoint = %key, error = %e, "ejected endpoint did not answer a PING; closing its connection");
                conn.close_with(format!(
                    "ejected after failed calls, then no answer to a PING: {e}"
                ));
            }
        }
    }
}
