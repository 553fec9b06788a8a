//! `client.rm.*`: what the RM does with a lock conflict and with its phase-one reports,
//! as Seata's `ConnectionProxy` and `LockRetryController` do.

use std::time::Duration;

use meshline_registry_core::{Config, RegistryError};

/// The `client.rm.*` keys meshline acts on, with Seata's defaults (`DefaultValues`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RmConfig {
    /// Wait between two branch registrations refused `LockKeyConflict`
    /// (`client.rm.lock.retryInterval`, 10 ms).
    pub lock_retry_interval: Duration,
    /// Registrations sent again after a `LockKeyConflict`, the first not counted
    /// (`client.rm.lock.retryTimes`, 30): 31 attempts in all by default. A
    /// `LockKeyConflictFailFast` (the row's holder is rolling back) is not retried.
    pub lock_retry_times: u32,
    /// Attempts of a phase-one report that fails (`client.rm.reportRetryCount`, 5).
    pub report_retry_count: u32,
    /// Whether a successful phase one is reported at all (`client.rm.reportSuccessEnable`,
    /// false: the TC learns of it at phase two); a failed one always is.
    pub report_success_enable: bool,
    /// Seata `client.rm.*` keys present in the configuration that meshline accepts
    /// without acting on them, each with why (reported once when an RM is built).
    pub inert: Vec<String>,
    /// Keys under `client.rm` nobody knows (reported as unknown).
    pub warnings: Vec<String>,
}

impl Default for RmConfig {
    fn default() -> Self {
        RmConfig {
            lock_retry_interval: Duration::from_millis(10),
            lock_retry_times: 30,
            report_retry_count: 5,
            report_success_enable: false,
            inert: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

/// Seata's `client.rm.*` keys for what meshline's RM does not have, and why each has
/// no effect here.
const INERT: &[(&str, &str)] = &[
    (
        "lock.retryPolicyBranchRollbackOnConflict",
        "it chooses between two lock-retry loops of Seata's SQL proxy (by the connection's autocommit); meshline's RM has no SQL proxy and always retries as client.rm.lock.* say",
    ),
    (
        "asyncCommitBufferLimit",
        "the AT undo-log cleanup queue of Seata's data source proxy",
    ),
    (
        "tableMetaCheckEnable",
        "table metadata of Seata's SQL proxy",
    ),
    (
        "tableMetaCheckerInterval",
        "table metadata of Seata's SQL proxy",
    ),
    ("sqlParserType", "Seata's SQL parser"),
    (
        "sagaBranchRegisterEnable",
        "Seata's saga state machine engine",
    ),
    ("sagaJsonParser", "Seata's saga state machine engine"),
    (
        "sagaRetryPersistModeUpdate",
        "Seata's saga state machine engine",
    ),
    (
        "sagaCompensatePersistModeUpdate",
        "Seata's saga state machine engine",
    ),
    (
        "tccActionInterceptorOrder",
        "Seata's Spring TCC interceptor",
    ),
    ("branchExecutionTimeoutXA", "Seata's XA data source proxy"),
    (
        "connectionTwoPhaseHoldTimeoutXA",
        "Seata's XA data source proxy",
    ),
    (
        "applicationDataLimit",
        "the Spring starter's check of application data",
    ),
    (
        "applicationDataLimitCheck",
        "the Spring starter's check of application data",
    ),
];

/// `client.rm.lock.retryTimes` and `reportRetryCount`: whole numbers; below 0 read as 0.
fn count(v: &str) -> Result<u32, String> {
    let n: i64 = v
        .trim()
        .parse()
        .map_err(|_| "expected a whole number".to_string())?;
    Ok(n.clamp(0, u32::MAX as i64) as u32)
}

impl RmConfig {
    /// The `client.rm.*` keys of `config`, validated: an invalid value is an error
    /// naming the key.
    pub fn from_config(config: &Config) -> Result<RmConfig, RegistryError> {
        let d = RmConfig::default();
        let part = config.part("client.rm");
        let r = part.reader();
        let c = RmConfig {
            lock_retry_interval: r.seata_duration(
                "lock.retryInterval",
                super::MS,
                d.lock_retry_interval,
            )?,
            lock_retry_times: r
                .parse("lock.retryTimes", count)?
                .unwrap_or(d.lock_retry_times),
            report_retry_count: r
                .parse("reportRetryCount", count)?
                .unwrap_or(d.report_retry_count),
            report_success_enable: r.boolean("reportSuccessEnable", d.report_success_enable)?,
            inert: INERT
                .iter()
                .filter(|(k, _)| part.get(k).is_some())
                .map(|(k, why)| format!("client.rm.{k}: accepted, no effect in meshline ({why})"))
                .collect(),
            warnings: Vec::new(),
        };
        r.accept(&INERT.iter().map(|(k, _)| *k).collect::<Vec<_>>());
        Ok(RmConfig {
            warnings: r.finish(),
            ..c
        })
    }
}

#[cfg(test)]
mod tests {
    use meshline_registry_core::config::Format;

    use super::*;

    #[test]
    fn seatas_keys_with_seatas_defaults_and_units() {
        let c = RmConfig::from_config(&Config::from_text("", Format::Properties).unwrap()).unwrap();
        assert_eq!(c, RmConfig::default());
        let c = RmConfig::from_config(
            &Config::from_text(
                "client.rm.lock.retryInterval=25\nclient.rm.lock.retryTimes=3\n\
                 client.rm.reportRetryCount=2\nclient.rm.reportSuccessEnable=true\n\
                 client.rm.lock.retryPolicyBranchRollbackOnConflict=false\n\
                 client.rm.sqlParserType=druid\n",
                Format::Properties,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(c.lock_retry_interval, Duration::from_millis(25));
        assert_eq!(c.lock_retry_times, 3);
        assert_eq!(c.report_retry_count, 2);
        assert!(c.report_success_enable);
        assert_eq!(c.inert.len(), 2, "{:?}", c.inert);
        assert!(c.inert[0].starts_with("client.rm.lock.retryPolicyBranchRollbackOnConflict"));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn a_bad_value_names_its_key() {
        let e = RmConfig::from_config(
            &Config::from_text("client.rm.lock.retryTimes=many\n", Format::Properties).unwrap(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("retryTimes"), "{e}");
    }
}
