//! Slow start: a connection that just joined the alive set (a new endpoint, or one
//! back after a restart or a lost connection) takes a share of the calls that ramps up
//! over a window, as Envoy's `slow_start_config` ramps a host's weight, instead of its
//! full share at once while its caches, JIT and pools are cold.
//!
//! Only a connection joining a warm client ramps: one whose alive set has not been
//! empty for at least the window. The first connections of a client that is starting,
//! and those of a whole cluster coming back together, take their full share at once,
//! as Envoy exempts the hosts of a cluster's first load: there is no warm endpoint to
//! carry their share.
//!
//! The ramp is applied to the pick, not to the balancer's weights, so it holds for
//! every balancer alike (weighted or not, load-aware or not) and costs no rebuild: when
//! a pick lands on an endpoint still in its window, it keeps the pick with probability
//! `factor(age)` (below), and otherwise the call gets one second pick with that
//! endpoint excluded (kept when nothing else would take it). An endpoint whose normal
//! share is `s` draws about `factor × s`.
//!
//! A call that names an XID is never turned away: the balancer may have routed it by
//! that XID (the `XID` balancer, the `xid:` forms), and a transaction's calls must
//! reach the TC that began it. The `xid:` forms' fallback (a call without an XID, a
//! begin) ramps like any other pick.

use std::time::Duration;

use meshline_loadbalance::{PickRequest, Picked};
use meshline_registry_core::InstanceKey;

use super::RpcClient;
use super::membership::alive::AliveEndpoint;

/// Slow start's settings (`transport.slowStart*`; see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct SlowStart {
    /// How long the ramp lasts (`transport.slowStartWindow`, unit required; `0s` or
    /// absent: no slow start).
    pub window: Duration,
    /// Envoy's aggression (`transport.slowStartAggression`, 1.0: a straight line; more
    /// than 1 ramps faster early on).
    pub aggression: f64,
    /// The share an endpoint takes from its first moment, in percent
    /// (`transport.slowStartMinWeightPercent`, 10).
    pub min_weight_percent: u32,
}

impl SlowStart {
    /// A ramp over `window` with Envoy's defaults (aggression 1, from 10 %).
    pub fn over(window: Duration) -> SlowStart {
        SlowStart {
            window,
            aggression: 1.0,
            min_weight_percent: 10,
        }
    }

    /// The share of its normal traffic an endpoint alive for `age` takes: Envoy's
    /// `max(min_weight_percent / 100, (age / window) ^ (1 / aggression))`, and 1 from
    /// the end of the window on.
    pub fn factor(&self, age: Duration) -> f64 {
        if age >= self.window {
            return 1.0;
        }
        let t = age.as_secs_f64() / self.window.as_secs_f64();
        let aggression = if self.aggression > 0.0 {
            self.aggression
        } else {
            1.0
        };
        let floor = f64::from(self.min_weight_percent.min(100)) / 100.0;
        t.powf(1.0 / aggression).clamp(floor, 1.0)
    }
}

impl RpcClient {
    /// One attempt's pick: the balancer's (with `excluded` when the call has excluded
    /// endpoints already), then slow start's second chance (module docs).
    #[inline]
    pub(super) fn pick(
        &self,
        route: &PickRequest<'_>,
        excluded: Option<&[InstanceKey]>,
    ) -> Option<Picked<AliveEndpoint>> {
        let inner = self.inner();
        let picked = match excluded {
            None => inner.balancer.pick(route),
            Some(keys) => inner.balancer.pick(&route.excluding(keys)),
        }?;
        let Some(ramp) = &inner.options.slow_start else {
            return Some(picked);
        };
        let Some(since) = picked.payload().ramp_from else {
            return Some(picked);
        };
        let age = since.elapsed();
        if age >= ramp.window || route.xid_str().is_some() || fastrand::f64() < ramp.factor(age) {
            return Some(picked);
        }
        let mut keys = match excluded {
            Some(keys) => keys.to_vec(),
            None => self.caller_exclusions(route.exclusions()),
        };
        keys.push(picked.endpoint().key().clone());
        match inner.balancer.pick(&route.excluding(&keys[..])) {
            Some(other) => {
                picked.into_guard().cancel();
                Some(other)
            }
            None => Some(picked),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_ramp_is_envoys() {
        let linear = SlowStart::over(1000 * MS);
        assert_eq!(
            linear.factor(Duration::ZERO),
            0.1,
            "the floor from the start"
        );
        assert_eq!(linear.factor(50 * MS), 0.1);
        assert!((linear.factor(500 * MS) - 0.5).abs() < 1e-9);
        assert!((linear.factor(900 * MS) - 0.9).abs() < 1e-9);
        assert_eq!(linear.factor(1000 * MS), 1.0);
        assert_eq!(linear.factor(5000 * MS), 1.0);
        // Aggression 2: the square root of the elapsed share, faster early on.
        let eager = SlowStart {
            aggression: 2.0,
            ..linear.clone()
        };
        assert!((eager.factor(250 * MS) - 0.5).abs() < 1e-9);
        // A floor of 0 starts from nothing; one over 100 is 100.
        let bare = SlowStart {
            min_weight_percent: 0,
            ..linear.clone()
        };
        assert_eq!(bare.factor(Duration::ZERO), 0.0);
        let full = SlowStart {
            min_weight_percent: 250,
            ..linear
        };
        assert_eq!(full.factor(Duration::ZERO), 1.0);
    }
}
