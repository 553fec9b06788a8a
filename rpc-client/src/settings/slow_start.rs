//! [`SlowStartConfig`]: the `transport.slowStart*` keys (meshline's, named as Envoy
//! names its `slow_start_config` fields).

use std::time::Duration;

use meshline_registry_core::RegistryError;
use meshline_registry_core::config::SectionReader;

use super::set_present;
use crate::SlowStart;

/// The `transport.slowStart*` keys, each `None` when absent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SlowStartConfig {
    /// `transport.slowStartWindow` (unit required; `0s`: no slow start).
    pub window: Option<Duration>,
    /// `transport.slowStartAggression` (more than 0; 1: a straight line).
    pub aggression: Option<f64>,
    /// `transport.slowStartMinWeightPercent` (0 to 100).
    pub min_weight_percent: Option<u32>,
}

fn aggression(v: &str) -> Result<f64, String> {
    match v.trim().parse::<f64>() {
        Ok(a) if a.is_finite() && a > 0.0 => Ok(a),
        _ => Err("expected a number more than 0 (1.0: a straight ramp)".into()),
    }
}

impl SlowStartConfig {
    /// Reads the keys from the `transport` section; an invalid value is an error naming
    /// its key.
    pub(super) fn read(r: &SectionReader<'_>) -> Result<SlowStartConfig, RegistryError> {
        Ok(SlowStartConfig {
            window: r.parse(
                "slowStartWindow",
                meshline_registry_core::config::parse_duration_with_unit,
            )?,
            aggression: r.parse("slowStartAggression", aggression)?,
            min_weight_percent: r.parse("slowStartMinWeightPercent", super::percent)?,
        })
    }

    /// Sets the keys that are present: a window turns slow start on (`0s` off), the
    /// other two shape the ramp it has (or the one the window turns on).
    pub fn apply(&self, s: &mut Option<SlowStart>) {
        match self.window {
            Some(w) if w.is_zero() => *s = None,
            Some(w) => s.get_or_insert_with(|| SlowStart::over(w)).window = w,
            None => {}
        }
        if let Some(s) = s {
            set_present(&mut s.aggression, self.aggression);
            set_present(&mut s.min_weight_percent, self.min_weight_percent);
        }
    }
}
