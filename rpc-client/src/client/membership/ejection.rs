//! Failure accrual: an endpoint whose calls keep failing leaves the picks for a while,
//! and a PING decides when it returns (outlier ejection, as Finagle, linkerd and Envoy
//! do it).
//!
//! Every call ends on its endpoint's stats as a success or a failure; a call that timed
//! out, whose connection failed after it was written, or that was answered with the
//! server's failure ([`Outcome::ServerFailure`]) is a failure. After
//! [`ClientOptions::eject_after_failures`](super::ClientOptions::eject_after_failures)
//! failures in a row the endpoint is taken out of the alive set (its connection stays
//! open) for [`ClientOptions::ejection_time`](super::ClientOptions::ejection_time),
//! doubled for each ejection in a row up to 30 s. Then a PING goes out on its
//! connection, and the client's classifier's probe request when it has one (Seata's: a
//! GlobalStatus, which reads the TC's store): answered, and the probe not with the
//! server's failure, the endpoint returns to the picks (and one more failure ejects it
//! again, for longer); the probe answered with the server's failure, it stays out for
//! the next, longer, ejection; unanswered, the connection is closed and the endpoint
//! reconnects like any other.
//!
//! At most [`OutlierDetection::max_ejection_percent`](crate::OutlierDetection::max_ejection_percent)
//! of the endpoints (half, by default) are ejected at once, and never the last one
//! alive: when everything fails, ejecting everything would only turn errors into "no
//! endpoint". The `outlier` module ejects by rate through the same door.

use std::sync::Arc;
use std::time::Duration;

use meshline_loadbalance::Edit;
use meshline_registry_core::InstanceKey;
use tokio::time::Instant;

use super::Membership;
use super::alive::{AliveEndpoint, EndpointState};
use super::state::Ejected;
use crate::client::metrics::Counter;
use crate::connection::Connection;
use crate::outcome::Outcome;

/// An ejection within this long of the endpoint's return counts as "in a row".
const IN_A_ROW: Duration = Duration::from_secs(60);

/// How long after a misdirected answer emptied the alive set new calls wait for the
/// registry to name a server, rather than failing at once: a raft cluster elects its
/// new leader within seconds (Seata's default election timeout is 1 s); a cluster that
/// names nobody for longer is down, and calls fail fast again.
const REDIRECT_HOLD: Duration = Duration::from_secs(10);

impl Membership {
    /// A call on `entry` failed: counted on its connection's failures in a row (kept
    /// while it is ejected, so a call picked before an ejection still counts, and its
    /// return needs a success to clear), and the endpoint is ejected when that reaches
    /// the limit.
    /// Returns the failures in a row, this one included.
    pub fn call_failed(self: &Arc<Self>, entry: &AliveEndpoint) -> u32 {
        let in_a_row = entry.failed();
        let limit = self.options.eject_after_failures;
        if limit > 0 && in_a_row >= limit {
            let why = format!("{in_a_row} failed calls in a row");
            self.eject(entry.instance.key(), &entry.connection, &why);
        }
        in_a_row
    }

    /// A call on `entry` was answered with the server's failure: counted as any failed
    /// call ([`call_failed`](Self::call_failed)), and when it starts a row of
    /// failures, the endpoint is rechecked after the ejection time, ejected or not.
    ///
    /// The recheck is what brings back an endpoint that the balancer, not the ejection,
    /// took out of use: P2C prices a server failure as a slow answer and stops picking
    /// the endpoint after one or two of them, too few to eject it; with no picks,
    /// nothing else would learn that it works again until the price decayed (a minute).
    pub fn server_failed(self: &Arc<Self>, entry: &AliveEndpoint) {
        if self.call_failed(entry) == 1 {
            let time = self.options.ejection_time;
            tokio::spawn(self.clone().recheck(entry.clone(), time));
        }
    }

    /// After `time`, while `entry`'s row of failures goes on and it is still in the
    /// picks on the same connection: asks whether it works (a PING and the probe
    /// request). Answered well, the row ends and its price starts again
    /// ([`restart_price`](Self::restart_price)); answered with the server's failure, asked again after twice as long.
    /// An ejected endpoint is left to the ejection's own probe; a success on a call, or
    /// the connection's end, ends the recheck.
    async fn recheck(self: Arc<Self>, entry: AliveEndpoint, mut time: Duration) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(time) => {}
                _ = self.shutdown.cancelled() => return,
                _ = entry.connection.closed() => return,
            }
            let in_the_picks = self
                .alive_now()
                .get(entry.instance.key())
                .is_some_and(|e| e.connection.ptr_eq(&entry.connection));
            if entry.failures_in_a_row() == 0 || !in_the_picks {
                return;
            }
            match self.answers_well(&entry.connection).await {
                Ok(rtt) => {
                    let _ = entry.succeeded();
                    self.restart_price(entry.instance.key(), rtt);
                    tracing::info!(endpoint = %entry.instance, ?rtt, "endpoint that answered with the server's failure works again");
                    return;
                }
                Err(Unanswered::ServerFailure) => {
                    time = time
                        .saturating_mul(2)
                        .min(self.options.outlier.max_ejection_time)
                }
                // The connection's own liveness deals with a silent peer.
                Err(Unanswered::Ping(_)) => return,
            }
        }
    }

    /// Takes `key` out of the picks, if it is alive on `connection` (not gone, not
    /// ejected already, not reconnected since the failing call was picked) and the cap
    /// allows; `why` says what it did.
    pub(super) fn eject(self: &Arc<Self>, key: &InstanceKey, connection: &Connection, why: &str) {
        self.take_out(key, connection, why, false);
    }

    /// `entry` answered that another server serves its requests
    /// ([`Outcome::Misdirected`]): out of the picks at once, whatever the ejection cap
    /// (sending to it is useless even when it is the last one listed), for an
    /// ejection time like any ejection, and the registry is asked to read the cluster
    /// again now: it names the server that does serve.
    pub fn set_aside(self: &Arc<Self>, entry: &AliveEndpoint, why: &str) {
        self.count(Counter::Misdirected);
        self.refresher.request();
        self.take_out(entry.instance.key(), &entry.connection, why, true);
    }

    /// While an answer that said another server serves has left the alive set empty,
    /// for at most [`REDIRECT_HOLD`]: a call that finds no endpoint then waits (within
    /// its timeout) for the registry to name one, rather than failing at once.
    pub fn awaits_redirect(&self) -> bool {
        self.state()
            .redirected_at
            .is_some_and(|t| t.elapsed() < REDIRECT_HOLD)
    }

    /// Takes `key` out of the picks (see [`eject`](Self::eject)); `misdirected`: set
    /// aside ([`set_aside`](Self::set_aside)), whatever the cap.
    fn take_out(
        self: &Arc<Self>,
        key: &InstanceKey,
        connection: &Connection,
        why: &str,
        misdirected: bool,
    ) {
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
            if !misdirected
                && !self
                    .options
                    .outlier
                    .may_eject(st.ejected.len(), alive.len())
            {
                tracing::debug!(endpoint = %key, why, "failing, but not ejected: too few endpoints would be left");
                return;
            }
            let Some(slot) = st.endpoints.get_mut(key) else {
                return;
            };
            slot.ejections = match slot.returned_at {
                Some(t) if t.elapsed() < IN_A_ROW => slot.ejections + 1,
                _ => 1,
            };
            let time = self.ejection_time(slot.ejections);
            slot.state = EndpointState::Ejected(format!(
                "{why}; a PING decides in {time:?} whether it returns"
            ));
            let generation = slot.generation;
            let conn = entry.connection.clone();
            st.ejected
                .insert(key.clone(), Ejected { entry, generation });
            if misdirected {
                // Cleared by the publish below when another endpoint is left.
                st.redirected_at = Some(Instant::now());
            }
            self.publish_alive(&mut st, [Edit::Remove(key.clone())]);
            (generation, time, conn)
        };
        self.count(Counter::Ejections);
        tracing::warn!(endpoint = %key, why, ?time, "endpoint ejected from the picks");
        self.schedule_probe(key.clone(), generation, time, conn);
    }

    /// The ejection is over: a PING on the endpoint's connection decides.
    async fn probe_ejected(self: &Arc<Self>, key: InstanceKey, generation: u64) {
        let conn = {
            let st = self.state();
            match st.ejected.get(&key) {
                Some(e) if e.generation == generation => e.entry.connection.clone(),
                _ => return,
            }
        };
        match self.answers_well(&conn).await {
            Err(Unanswered::ServerFailure) => {
                // Alive, but still failing: out for the next, longer, ejection.
                let Some(time) = self.extend_ejection(&key, generation) else {
                    return;
                };
                tracing::info!(endpoint = %key, ?time, "ejected endpoint answered the probe request with the server's failure; staying out");
                self.schedule_probe(key, generation, time, conn);
            }
            Ok(rtt) => {
                let mut st = self.state();
                let Some(e) = st.ejected.remove(&key) else {
                    return;
                };
                if e.generation != generation || e.entry.connection.is_closed() {
                    return;
                }
                if let Some(slot) = st.slot_mut(&key, generation) {
                    slot.state = EndpointState::Alive;
                    slot.returned_at = Some(Instant::now());
                }
                let back = Edit::Insert((*e.entry.instance).clone(), e.entry);
                self.publish_alive(&mut st, [back]);
                self.restart_price(&key, rtt);
                tracing::info!(endpoint = %key, ?rtt, "ejected endpoint answered a PING; back in the picks");
            }
            Err(Unanswered::Ping(e)) => {
                tracing::warn!(endpoint = %key, error = %e, "ejected endpoint did not answer a PING; closing its connection");
                conn.close_with(format!(
                    "ejected after failed calls, then no answer to a PING: {e}"
                ));
            }
        }
    }

    /// Whether the endpoint on `conn` works again: a PING answered, then the probe
    /// request ([`works`](Self::works)); `Ok` is the PING's round trip. Each waits the
    /// probe window (1 s without a probe).
    async fn answers_well(&self, conn: &Connection) -> Result<Duration, Unanswered> {
        let timeout = self
            .options
            .probe
            .map_or(Duration::from_secs(1), |p| p.after + p.timeout);
        let rtt = conn
            .ping(timeout)
            .await
            .map_err(|e| Unanswered::Ping(e.to_string()))?;
        self.works(conn, timeout).await.map(|()| rtt)
    }

    /// Whether the endpoint can work again, as far as the protocol can tell: the
    /// classifier's probe request ([`Classify::probe`](crate::Classify::probe)), sent
    /// on `conn`, is answered with anything but the server's failure. Without a probe
    /// request, the PING that came before is all there is to ask. A probe that gets no
    /// answer is a PING unanswered.
    async fn works(&self, conn: &Connection, timeout: Duration) -> Result<(), Unanswered> {
        let Some(classifier) = &self.options.classifier else {
            return Ok(());
        };
        let Some(probe) = classifier.probe() else {
            return Ok(());
        };
        let answer = conn
            .call(probe, timeout)
            .await
            .map_err(|e| Unanswered::Ping(format!("probe request: {e}")))?;
        match classifier.classify(&answer) {
            // A server that says another one serves (a raft follower) stays out too.
            Outcome::ServerFailure | Outcome::Misdirected => Err(Unanswered::ServerFailure),
            Outcome::Success | Outcome::CallerFailure => Ok(()),
        }
    }

    /// The endpoint, still ejected, stays out again for the next ejection time of its
    /// row (doubled); `None` when it is no longer ejected under `generation`.
    fn extend_ejection(&self, key: &InstanceKey, generation: u64) -> Option<Duration> {
        let mut st = self.state();
        match st.ejected.get(key) {
            Some(e) if e.generation == generation => {}
            _ => return None,
        }
        let slot = st.slot_mut(key, generation)?;
        slot.ejections += 1;
        let time = self.ejection_time(slot.ejections);
        slot.state = EndpointState::Ejected(format!(
            "answers with the server's failure; asked again in {time:?}"
        ));
        drop(st);
        self.count(Counter::Ejections);
        Some(time)
    }

    /// The latency estimate of `key`, priced while it failed, starts again at its
    /// costliest peer's estimate (`rtt`, what its PING took, when no peer has one): it
    /// takes a share of the latency-led picks at once instead of being starved by the
    /// old price, and its own answers take over. Not the cheapest peer's: then it would
    /// win every draw until its first answers came back, draw every caller's call at
    /// once, and the queueing of that burst would price it out again for seconds.
    pub(crate) fn restart_price(&self, key: &InstanceKey, rtt: Duration) {
        let snapshot = self.balancer.snapshot();
        let peers = snapshot
            .endpoints()
            .iter()
            .filter(|e| e.key() != key)
            .filter_map(|e| e.stats().latency_estimate())
            .max();
        if let Some(endpoint) = snapshot.endpoint(key) {
            endpoint.stats().restart_estimate(peers.unwrap_or(rtt));
        }
    }

    /// How long the `n`-th ejection in a row lasts: the first ejection time doubled
    /// for each one before it, at most the longest ejection
    /// ([`OutlierDetection::max_ejection_time`](crate::OutlierDetection::max_ejection_time)).
    fn ejection_time(&self, n: u32) -> Duration {
        let factor = 1u32 << n.saturating_sub(1).min(16);
        self.options
            .ejection_time
            .saturating_mul(factor)
            .min(self.options.outlier.max_ejection_time)
    }

    /// After `time`, asks whether the ejected endpoint may return (`probe_ejected`),
    /// unless the client stops or the connection closes first.
    fn schedule_probe(
        self: &Arc<Self>,
        key: InstanceKey,
        generation: u64,
        time: Duration,
        conn: Connection,
    ) {
        let inner = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(time) => {}
                _ = inner.shutdown.cancelled() => return,
                _ = conn.closed() => return,
            }
            inner.probe_ejected(key, generation).await;
        });
    }
}

/// Why an ejected endpoint does not return.
enum Unanswered {
    /// The PING (or the probe request) got no answer: the connection is closed.
    Ping(String),
    /// The probe request was answered with the server's failure.
    ServerFailure,
}
