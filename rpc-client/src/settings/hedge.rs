//! [`HedgeConfig`]: the `transport.hedge*` keys (meshline's).

use meshline_registry_core::RegistryError;
use meshline_registry_core::config::SectionReader;

use crate::Hedging;

/// The `transport.hedge*` keys, each `None` when absent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HedgeConfig {
    /// `transport.hedge` (`true`: idempotent calls are hedged).
    pub hedge: Option<bool>,
    /// `transport.hedgePercentile` (more than 0, less than 100).
    pub percentile: Option<f64>,
}

fn percentile(v: &str) -> Result<f64, String> {
    match v.trim().parse::<f64>() {
        Ok(p) if p > 0.0 && p < 100.0 => Ok(p),
        _ => Err("expected a percentile more than 0 and less than 100 (such as 95)".into()),
    }
}

impl HedgeConfig {
    /// Reads the keys from the `transport` section; an invalid value is an error naming
    /// its key.
    pub(super) fn read(r: &SectionReader<'_>) -> Result<HedgeConfig, RegistryError> {
        Ok(HedgeConfig {
            hedge: r.parse("hedge", super::parse_bool)?,
            percentile: r.parse("hedgePercentile", percentile)?,
        })
    }

    /// Sets the keys that are present: `transport.hedge` turns hedging on or off, the
    /// percentile applies to hedging that is on.
    pub fn apply(&self, h: &mut Option<Hedging>) {
        match self.hedge {
            Some(true) if h.is_none() => *h = Some(Hedging::default()),
            Some(false) => *h = None,
            _ => {}
        }
        if let (Some(h), Some(p)) = (h, self.percentile) {
            h.percentile = p;
        }
    }
}
