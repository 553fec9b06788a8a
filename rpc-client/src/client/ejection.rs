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

use meshline_loadbalance::Edit;
use meshline_registry_core::InstanceKey;

use super::alive::{AliveEndpoint, EndpointState};
use super::membership::Inner;
use super::metrics::Counter;
use crate::connection::Connection;

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
    /// A call on `entry` failed: counted on its connection's failures in a row (kept
    /// while it is ejected, so a call picked before an ejection still counts, and its
    /// return needs a success to clear), and the endpoint is ejected when that reaches
    /// the limit.
    pub fn call_failed(self: &Arc<Self>, entry: &AliveEndpoint) {
        let in_a_row = entry.failed();
        let limit = self.options.eject_after_failures;
        if limit > 0 && in_a_row >= limit {
            self.eject(entry.instance.key(), &entry.connection, in_a_row);
        }
    }

    /// Takes `key` out of the picks, if it is alive on `connection` (not gone, not
    /// ejected already, not reconnected since the failing call was picked).
    fn eject(self: &Arc<Self>, key: &InstanceKey, connection: &Connection, in_a_row: u32) {
        let (generation, time, conn) = {
            let mut st = self.state();
            let alive = self.alive_now();
            let Some(entry) = alive
                .get(key)
                .filter(|e| e.connection.ptr_eq(connection))
                .cloned()
            else {
                return; // gone, ejected already, or on a newer connection
            };
            let total = alive.len() + st.ejected.len();
            if alive.len() <= 1 || (st.ejected.len() + 1) * 2 > total {
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
            st.ejected
                .insert(key.clone(), Ejected { entry, generation });
            self.publish_alive(&st, [Edit::Remove(key.clone())]);
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
                let back = Edit::Insert((*e.entry.instance).clone(), e.entry);
                self.publish_alive(&st, [back]);
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
