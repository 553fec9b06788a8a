//! The client's side of its call limits ([`crate::limits`]): the client-wide cap and
//! breaker a call passes before it is sent, the per-endpoint cap an attempt passes
//! before it uses an endpoint, and what a call's result tells the breaker.

use super::membership::Membership;
use super::membership::alive::AliveEndpoint;
use super::metrics::Counter;
use crate::error::RpcError;
use crate::limits::{
    Admission, Breaker, BreakerState, CallLimits, ConcurrencyLimit, LimitScope, OwnedPermit, Permit,
};
use crate::outcome::{Classifier, Outcome, outcome_of};
use crate::payload::Payload;

/// The client-wide limits of [`CallLimits`], as the calls pass them.
pub(crate) struct ClientLimits {
    in_flight: Option<ConcurrencyLimit>,
    breaker: Option<Breaker>,
}

/// A call let through the client-wide limits: its slot, and how the breaker admitted
/// it. Dropped, it leaves the slot and tells the breaker its outcome (a success unless
/// [`Pass::finish`] said otherwise: a call its caller dropped failed no server).
pub(crate) struct Pass<'a> {
    _slot: Option<Permit<'a>>,
    breaker: Option<(&'a Breaker, Admission)>,
    members: &'a Membership,
    failed: bool,
}

impl ClientLimits {
    pub fn new(limits: &CallLimits) -> ClientLimits {
        ClientLimits {
            in_flight: limits.max_in_flight.map(ConcurrencyLimit::new),
            breaker: limits.breaker.clone().map(Breaker::new),
        }
    }

    /// Lets a call through, or refuses it: the client has its limit of calls in flight
    /// ([`RpcError::LimitReached`]), or its breaker is open ([`RpcError::CircuitOpen`]).
    #[inline]
    pub fn admit<'a>(&'a self, members: &'a Membership) -> Result<Pass<'a>, RpcError> {
        let slot = match &self.in_flight {
            None => None,
            Some(limit) => Some(limit.try_enter().ok_or_else(|| {
                members.count(Counter::LimitRefused);
                RpcError::LimitReached {
                    target: members.target.clone(),
                    scope: LimitScope::Client,
                    limit: limit.cap(),
                }
            })?),
        };
        let breaker = match &self.breaker {
            None => None,
            Some(breaker) => {
                let (admitted, transition) = breaker.admit();
                if let Some(to) = transition {
                    changed(members, breaker, to);
                }
                let Some(admission) = admitted else {
                    members.count(Counter::CircuitRefused);
                    return Err(RpcError::CircuitOpen {
                        target: members.target.clone(),
                    });
                };
                Some((breaker, admission))
            }
        };
        Ok(Pass {
            _slot: slot,
            breaker,
            members,
            failed: false,
        })
    }

    /// The breaker's state (`None`: the client has none).
    pub fn breaker_state(&self) -> Option<BreakerState> {
        self.breaker.as_ref().map(Breaker::state)
    }
}

impl Pass<'_> {
    /// Whether the call's outcome is wanted (the client has a breaker).
    #[inline]
    pub fn judges(&self) -> bool {
        self.breaker.is_some()
    }

    /// Ends the call with `result`, read as the breaker reads it (see [`failed`]).
    pub fn finish<T>(mut self, result: &Result<T, RpcError>, answer: Option<&Payload>) {
        let classifier = self.members.options.classifier.as_ref();
        self.failed = failed(result, answer, classifier);
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        if let Some((breaker, admission)) = self.breaker
            && let Some(to) = breaker.record(admission, self.failed)
        {
            changed(self.members, breaker, to);
        }
    }
}

/// Whether a call's result counts against the cluster: it timed out, its connection
/// failed after it was written, no endpoint could take it or every one failed before
/// it was written, a queue never made room, or the server answered with its own
/// failure. The caller's own failure in an answer, and the client's own refusals and
/// local errors (a frame too long, shutting down), are not the cluster's.
fn failed<T>(
    result: &Result<T, RpcError>,
    answer: Option<&Payload>,
    classifier: Option<&Classifier>,
) -> bool {
    match result {
        Ok(_) => outcome_of(classifier, answer) == Outcome::ServerFailure,
        Err(e) => matches!(
            e,
            RpcError::Timeout { .. }
                | RpcError::MaybeDelivered { .. }
                | RpcError::NotWritten { .. }
                | RpcError::NoEndpoint { .. }
                | RpcError::RetriesExhausted { .. }
                | RpcError::Overloaded { .. }
        ),
    }
}

/// Logs and reports a breaker's change of state.
fn changed(members: &Membership, breaker: &Breaker, to: BreakerState) {
    metrics::gauge!("meshline_rpc_breaker_state", "target" => members.target.clone())
        .set(to.gauge());
    match to {
        BreakerState::Open => tracing::warn!(
            target_group = %members.target,
            cool_down = ?breaker.settings().cool_down,
            "circuit open: most recent calls failed; calls are refused until the cool-down ends"
        ),
        BreakerState::HalfOpen => {
            tracing::info!(target_group = %members.target, "circuit half-open: probing")
        }
        BreakerState::Closed => tracing::info!(target_group = %members.target, "circuit closed"),
    }
}

/// A slot on `entry` under its per-endpoint cap: `Ok(None)` when it has none,
/// `Err(cap)` when it is at its cap.
#[inline]
pub(crate) fn enter_endpoint(entry: &AliveEndpoint) -> Result<Option<OwnedPermit>, usize> {
    match &entry.limit {
        None => Ok(None),
        Some(limit) => limit.try_enter_owned().map(Some).ok_or(limit.cap()),
    }
}

/// The error of a call that found every candidate endpoint at its cap.
pub(crate) fn endpoints_at_cap(members: &Membership, cap: usize) -> RpcError {
    members.count(Counter::LimitRefused);
    RpcError::LimitReached {
        target: members.target.clone(),
        scope: LimitScope::Endpoint,
        limit: cap,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// What each result tells the breaker: the cluster's failures count, the caller's
    /// own and the client's own do not.
    #[test]
    fn failures_of_the_cluster_count_and_nothing_else() {
        let by_head = Classifier::new(|a: &Payload| match a.head.get("outcome") {
            Some("server") => Outcome::ServerFailure,
            Some("caller") => Outcome::CallerFailure,
            _ => Outcome::Success,
        });
        let answer = |o: &str| Payload::new(&b"x"[..]).with_head("outcome", o);
        let ok: Result<(), RpcError> = Ok(());
        for (o, want) in [("server", true), ("caller", false), ("ok", false)] {
            let a = answer(o);
            assert_eq!(failed(&ok, Some(&a), Some(&by_head)), want, "{o}");
            // Without a classifier every answer is a success.
            assert!(!failed(&ok, Some(&a), None), "{o}");
        }
        let target = || "c".to_string();
        let counted = [
            RpcError::Timeout {
                after: Duration::from_secs(1),
                endpoint: None,
            },
            RpcError::NoEndpoint { target: target() },
            RpcError::RetriesExhausted {
                attempts: 3,
                last: "x".into(),
            },
            RpcError::Overloaded {
                endpoint: "e".into(),
                queued_bytes: 0,
                waited: None,
            },
        ];
        for e in counted {
            assert!(failed::<()>(&Err(e), None, Some(&by_head)));
        }
        let not_counted = [
            RpcError::Shutdown,
            RpcError::CircuitOpen { target: target() },
            RpcError::LimitReached {
                target: target(),
                scope: LimitScope::Endpoint,
                limit: 1,
            },
            RpcError::Config("bad".into()),
        ];
        for e in not_counted {
            let text = e.to_string();
            assert!(!failed::<()>(&Err(e), None, Some(&by_head)), "{text}");
        }
    }
}
