//! [`LimitsConfig`]: the `transport.*` keys of a client's call limits (meshline's; see
//! [`crate::limits`]).

use std::time::Duration;

use meshline_registry_core::RegistryError;
use meshline_registry_core::config::SectionReader;

use super::set_present;
use crate::limits::{BreakerSettings, CallLimits};

/// The `transport.*` keys of the call limits, each `None` when absent (the
/// [`CallLimits`] default, everything off, stays).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LimitsConfig {
    /// `transport.maxInFlight` (`0`: no cap).
    pub max_in_flight: Option<usize>,
    /// `transport.maxInFlightPerEndpoint` (`0`: no cap).
    pub max_in_flight_per_endpoint: Option<usize>,
    /// `transport.breaker` (`true`: the client has a circuit breaker).
    pub breaker: Option<bool>,
    /// `transport.breakerWindow` (unit required, more than zero).
    pub breaker_window: Option<Duration>,
    /// `transport.breakerMinRequests` (at least 1).
    pub breaker_min_requests: Option<u32>,
    /// `transport.breakerFailureRatio` (more than 0, at most 1).
    pub breaker_failure_ratio: Option<f64>,
    /// `transport.breakerCoolDown` (unit required, more than zero).
    pub breaker_cool_down: Option<Duration>,
    /// `transport.breakerProbes` (at least 1).
    pub breaker_probes: Option<u32>,
}

fn at_least_one(v: &str) -> Result<u32, String> {
    match v.trim().parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("expected a whole number, at least 1".into()),
    }
}

fn ratio(v: &str) -> Result<f64, String> {
    match v.trim().parse::<f64>() {
        Ok(r) if r > 0.0 && r <= 1.0 => Ok(r),
        _ => Err("expected a share more than 0 and at most 1 (such as 0.5)".into()),
    }
}

impl LimitsConfig {
    /// Reads the keys from the `transport` section; an invalid value is an error naming
    /// its key.
    pub(super) fn read(r: &SectionReader<'_>) -> Result<LimitsConfig, RegistryError> {
        Ok(LimitsConfig {
            max_in_flight: r.optional_number("maxInFlight")?,
            max_in_flight_per_endpoint: r.optional_number("maxInFlightPerEndpoint")?,
            breaker: r.parse("breaker", super::parse_bool)?,
            breaker_window: super::positive(r, "breakerWindow")?,
            breaker_min_requests: r.parse("breakerMinRequests", at_least_one)?,
            breaker_failure_ratio: r.parse("breakerFailureRatio", ratio)?,
            breaker_cool_down: super::positive(r, "breakerCoolDown")?,
            breaker_probes: r.parse("breakerProbes", at_least_one)?,
        })
    }

    /// Sets in `l` every key that is present. The breaker's settings apply to the
    /// breaker `transport.breaker=true` turns on (or to the one `l` already has).
    pub fn apply(&self, l: &mut CallLimits) {
        if let Some(n) = self.max_in_flight {
            l.max_in_flight = (n > 0).then_some(n);
        }
        if let Some(n) = self.max_in_flight_per_endpoint {
            l.max_in_flight_per_endpoint = (n > 0).then_some(n);
        }
        match self.breaker {
            Some(true) if l.breaker.is_none() => l.breaker = Some(BreakerSettings::default()),
            Some(false) => l.breaker = None,
            _ => {}
        }
        if let Some(b) = &mut l.breaker {
            set_present(&mut b.window, self.breaker_window);
            set_present(&mut b.min_requests, self.breaker_min_requests);
            set_present(&mut b.failure_ratio, self.breaker_failure_ratio);
            set_present(&mut b.cool_down, self.breaker_cool_down);
            set_present(&mut b.probes, self.breaker_probes);
        }
    }
}
