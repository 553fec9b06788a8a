//! [`TmConfig`]: the TM's `client.tm.*` keys.

use std::time::Duration;

use meshline_registry_core::{Config, RegistryError};

use super::MS;

/// `client.tm.*`: the TM's retry and timeout keys (Seata's `DefaultGlobalTransaction`
/// and `GlobalTransactionalInterceptorHandler`).
#[derive(Debug, Clone, PartialEq)]
pub struct TmConfig {
    /// `client.tm.commitRetryCount`: attempts of a global commit that fails to get an
    /// answer. Default 5 (Java: 0 or less also means 5).
    pub commit_retry_count: u32,
    /// `client.tm.rollbackRetryCount`: the same for a rollback. Default 5.
    pub rollback_retry_count: u32,
    /// `client.tm.defaultGlobalTransactionTimeout` (ms when bare): a global
    /// transaction's timeout when the caller gives none. Default 60000 ms.
    pub default_global_transaction_timeout: Duration,
    /// The `client.tm.*` keys this crate does not know (by name; also logged).
    pub warnings: Vec<String>,
    /// Seata `client.tm.*` keys present that meshline accepts without acting on them,
    /// each with why (logged once by the TM's builder).
    pub inert: Vec<String>,
}

impl Default for TmConfig {
    fn default() -> Self {
        TmConfig {
            commit_retry_count: 5,
            rollback_retry_count: 5,
            default_global_transaction_timeout: Duration::from_millis(60_000),
            warnings: Vec::new(),
            inert: Vec::new(),
        }
    }
}

/// `client.tm.commitRetryCount` / `rollbackRetryCount`: as Java, 0 or less means 5.
fn retry_count(v: &str) -> Result<u32, String> {
    let n: i64 = v
        .trim()
        .parse()
        .map_err(|_| "expected a whole number in range for i64".to_string())?;
    Ok(if n <= 0 {
        5
    } else {
        n.min(u32::MAX as i64) as u32
    })
}

/// Seata's `client.tm.*` keys for what meshline's TM does not do (its interceptor's
/// degrade check, the Spring starter's switches).
const SEATA_TM_OTHERS: &[&str] = &[
    "degradeCheck",
    "degradeCheckPeriod",
    "degradeCheckAllowTimes",
    "interceptorOrder",
];

/// Why each of [`SEATA_TM_OTHERS`] has no effect here.
const SEATA_TM_OTHERS_WHY: &str =
    "Seata's Spring interceptor (its degrade check and order), which meshline's TM does not have";

impl TmConfig {
    /// The `client.tm.*` keys of `config`, validated.
    pub fn from_config(config: &Config) -> Result<TmConfig, RegistryError> {
        let d = TmConfig::default();
        let part = config.part("client.tm");
        let r = part.reader();
        let t = TmConfig {
            commit_retry_count: r
                .parse("commitRetryCount", retry_count)?
                .unwrap_or(d.commit_retry_count),
            rollback_retry_count: r
                .parse("rollbackRetryCount", retry_count)?
                .unwrap_or(d.rollback_retry_count),
            default_global_transaction_timeout: r.seata_duration(
                "defaultGlobalTransactionTimeout",
                MS,
                d.default_global_transaction_timeout,
            )?,
            warnings: Vec::new(),
            inert: SEATA_TM_OTHERS
                .iter()
                .filter(|k| part.get(k).is_some())
                .map(|k| {
                    format!(
                        "client.tm.{k}: accepted, no effect in meshline ({SEATA_TM_OTHERS_WHY})"
                    )
                })
                .collect(),
        };
        r.accept(SEATA_TM_OTHERS);
        Ok(TmConfig {
            warnings: r.finish(),
            ..t
        })
    }
}
