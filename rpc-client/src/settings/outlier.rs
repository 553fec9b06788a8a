//! [`OutlierConfig`]: the outlier-detection keys of `transport.*` (meshline's, named as
//! Envoy names its `outlier_detection` fields).

use std::time::Duration;

use meshline_registry_core::RegistryError;
use meshline_registry_core::config::SectionReader;

use super::set_present;
use crate::OutlierDetection;

/// The `transport.*` keys of outlier detection, each `None` when absent (the
/// [`OutlierDetection`] default stays).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OutlierConfig {
    /// `transport.outlierInterval` (unit required; `0s`: rates never judged).
    pub interval: Option<Duration>,
    /// `transport.successRateStdevFactor` (a decimal such as `1.9`; `0`: off).
    pub success_rate_stdev_factor: Option<f64>,
    /// `transport.successRateMinimumHosts`.
    pub success_rate_minimum_hosts: Option<usize>,
    /// `transport.successRateRequestVolume`.
    pub success_rate_request_volume: Option<u64>,
    /// `transport.failurePercentageThreshold` (0 to 100; `0`: off).
    pub failure_percentage_threshold: Option<u32>,
    /// `transport.failurePercentageMinimumHosts`.
    pub failure_percentage_minimum_hosts: Option<usize>,
    /// `transport.failurePercentageRequestVolume`.
    pub failure_percentage_request_volume: Option<u64>,
    /// `transport.maxEjectionPercent` (0 to 100).
    pub max_ejection_percent: Option<u32>,
    /// `transport.maxEjectionTime` (unit required, more than zero).
    pub max_ejection_time: Option<Duration>,
}

fn factor(v: &str) -> Result<f64, String> {
    match v.trim().parse::<f64>() {
        Ok(f) if f.is_finite() && f >= 0.0 => Ok(f),
        _ => Err("expected a number of standard deviations, 0 or more (such as 1.9)".into()),
    }
}

impl OutlierConfig {
    /// Reads the keys from the `transport` section; an invalid value is an error naming
    /// its key.
    pub(super) fn read(r: &SectionReader<'_>) -> Result<OutlierConfig, RegistryError> {
        let duration = meshline_registry_core::config::parse_duration_with_unit;
        Ok(OutlierConfig {
            interval: r.parse("outlierInterval", duration)?,
            success_rate_stdev_factor: r.parse("successRateStdevFactor", factor)?,
            success_rate_minimum_hosts: r.optional_number("successRateMinimumHosts")?,
            success_rate_request_volume: r.optional_number("successRateRequestVolume")?,
            failure_percentage_threshold: r.parse("failurePercentageThreshold", super::percent)?,
            failure_percentage_minimum_hosts: r.optional_number("failurePercentageMinimumHosts")?,
            failure_percentage_request_volume: r
                .optional_number("failurePercentageRequestVolume")?,
            max_ejection_percent: r.parse("maxEjectionPercent", super::percent)?,
            max_ejection_time: super::positive(r, "maxEjectionTime")?,
        })
    }

    /// Sets in `o` every key that is present.
    pub fn apply(&self, o: &mut OutlierDetection) {
        set_present(&mut o.interval, self.interval);
        if let Some(v) = self.success_rate_stdev_factor {
            o.success_rate_stdev_factor = (v > 0.0).then_some(v);
        }
        set_present(
            &mut o.success_rate_minimum_hosts,
            self.success_rate_minimum_hosts,
        );
        set_present(
            &mut o.success_rate_request_volume,
            self.success_rate_request_volume,
        );
        if let Some(v) = self.failure_percentage_threshold {
            o.failure_percentage_threshold = (v > 0).then_some(v);
        }
        set_present(
            &mut o.failure_percentage_minimum_hosts,
            self.failure_percentage_minimum_hosts,
        );
        set_present(
            &mut o.failure_percentage_request_volume,
            self.failure_percentage_request_volume,
        );
        set_present(&mut o.max_ejection_percent, self.max_ejection_percent);
        set_present(&mut o.max_ejection_time, self.max_ejection_time);
    }
}
