//! `registry.redis.*`: what this backend reads from its section of the
//! configuration, with Seata's defaults.

use std::time::Duration;

use meshline_registry_core::config::Secret;
use meshline_registry_core::tls::TlsSettings;
use meshline_registry_core::{Config, RegistryError};

/// Jedis' `Protocol.DEFAULT_TIMEOUT`: the timeout of every command Seata sends.
const JEDIS_DEFAULT_TIMEOUT: Duration = Duration::from_millis(2000);

/// The Redis registry's settings.
///
/// # `timeout` means what it means to Seata
///
/// Seata's `RedisRegistryServiceImpl` passes `registry.redis.max-wait` (falling back to
/// `registry.redis.timeout`, default and shipped value 0) to its Jedis pool's
/// `maxWaitMillis`, and only when it is above 0: the longest a caller waits for a free
/// pooled connection. Commands always use Jedis' `Protocol.DEFAULT_TIMEOUT`, 2,000 ms.
/// So here:
///
/// - `timeout` / `max-wait` (Seata's keys, a bare number is milliseconds) are read and
///   validated, and kept in [`pool_max_wait`](Self::pool_max_wait) (`None` for 0 or absent,
///   as Seata). meshline has no pool to wait on (one multiplexed connection per server,
///   shared by every call), so a non-zero value changes nothing, exactly as in Seata it
///   never changes how long a command may take.
/// - The command timeout is `commandTimeout` (meshline; a unit is required, `2s`),
///   default 2,000 ms as Jedis', at least 100 ms.
/// - Seata's other Jedis pool keys (`test-on-borrow`, `max-idle`, `max-total`...) are
///   accepted without a warning and have no effect.
#[derive(Clone, Debug, PartialEq)]
pub struct RedisSettings {
    /// `serverAddr`: `host:port[,host:port…]`. Default `127.0.0.1:6379`.
    pub server_addr: String,
    /// `db`. Default 0.
    pub db: i64,
    /// `username` (Redis 6 ACL).
    pub username: Option<String>,
    /// `password`.
    pub password: Option<Secret>,
    /// `cluster`: the cluster a server registers in. Default `default`.
    pub cluster: String,
    /// `commandTimeout` (meshline; a unit is required): per-command timeout. Default
    /// 2,000 ms (Jedis' `Protocol.DEFAULT_TIMEOUT`, which Seata's commands use).
    pub command_timeout: Duration,
    /// `max-wait`, else `timeout` (Seata's keys, milliseconds): Seata's Jedis pool
    /// max-wait; `None` for 0 or absent. No effect here: see [`RedisSettings`].
    pub pool_max_wait: Option<Duration>,
    /// `ttl` (meshline; a unit is required): expiry of our `SETEX` keys. Default 5 s
    /// (Seata's).
    pub ttl: Duration,
    /// `refreshPeriod` (meshline; a unit is required): how often we refresh our keys
    /// and rescan. Default 2000 ms (Seata's).
    pub refresh_period: Duration,
    /// `tls.*`: CA file, client certificate and key, server name (see
    /// [`meshline_registry_core::tls`]).
    pub tls: TlsSettings,
    /// Keys of the section this backend does not know (also logged).
    pub warnings: Vec<String>,
}

impl RedisSettings {
    /// Reads `registry.redis.*` from `config`.
    pub fn from_config(config: &Config) -> Result<Self, RegistryError> {
        let section = config.registry.section(&["redis"]);
        let r = section.reader();
        // Seata's Jedis pool keys (`RedisRegistryServiceImpl`): no pool here (one
        // multiplexed connection per server).
        r.accept(&[
            "test-on-borrow",
            "test-on-return",
            "test-while-idle",
            "min-idle",
            "max-idle",
            "max-active",
            "max-total",
            "num-tests-per-eviction-run",
            "time-between-eviction-runs-millis",
            "min-evictable-idle-time-millis",
            "pool",
        ]);
        let ms = Duration::from_millis(1);
        let seata_timeout = r.seata_duration("timeout", ms, Duration::ZERO)?;
        let max_wait = r.seata_duration("max-wait", ms, seata_timeout)?;
        Ok(RedisSettings {
            server_addr: r.text("serverAddr", "127.0.0.1:6379")?,
            db: r.number("db", 0)?,
            username: r.optional("username"),
            password: r.secret("password"),
            cluster: r.text("cluster", "default")?,
            command_timeout: r.duration("commandTimeout", JEDIS_DEFAULT_TIMEOUT)?,
            pool_max_wait: (!max_wait.is_zero()).then_some(max_wait),
            ttl: r.duration("ttl", Duration::from_secs(5))?,
            refresh_period: r.duration("refreshPeriod", Duration::from_millis(2000))?,
            tls: TlsSettings::read(&r, "redis")?,
            // Last (fields are evaluated in the order written): the keys no read above took.
            warnings: r.finish(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshline_registry_core::config::ConfigLoader;

    fn settings(pairs: &[(&str, &str)]) -> Result<RedisSettings, RegistryError> {
        let mut l = ConfigLoader::new();
        for (k, v) in pairs {
            l = l.set(format!("registry.redis.{k}"), *v);
        }
        RedisSettings::from_config(&l.load().unwrap())
    }

    #[test]
    fn seata_shipped_timeout_zero_is_the_jedis_command_timeout() {
        for (name, s) in meshline_testkit::seata_shipped_settings(RedisSettings::from_config) {
            assert!(s.warnings.is_empty(), "{name}: {:?}", s.warnings);
            assert_eq!(s.server_addr, "localhost:6379", "{name}");
            assert_eq!(s.db, 0, "{name}");
            assert_eq!(s.password, None, "{name}");
            // `timeout = "0"`: no pool wait, commands get Jedis' 2,000 ms (not 100 ms).
            assert_eq!(s.pool_max_wait, None, "{name}");
            assert_eq!(s.command_timeout, Duration::from_millis(2000), "{name}");
        }
        let absent = settings(&[]).unwrap();
        assert_eq!(absent.pool_max_wait, None);
        assert_eq!(absent.command_timeout, Duration::from_millis(2000));
    }

    #[test]
    fn timeout_and_max_wait_are_seata_pool_waits_in_milliseconds() {
        // Non-zero: Seata's pool max-wait, never the command timeout.
        let s = settings(&[("timeout", "500")]).unwrap();
        assert_eq!(s.pool_max_wait, Some(Duration::from_millis(500)));
        assert_eq!(s.command_timeout, Duration::from_millis(2000));
        // `max-wait` wins over `timeout`, as in RedisRegistryServiceImpl.
        let s = settings(&[("timeout", "500"), ("max-wait", "700")]).unwrap();
        assert_eq!(s.pool_max_wait, Some(Duration::from_millis(700)));
        // The command timeout is meshline's own key, with a unit.
        let s = settings(&[("commandTimeout", "1s"), ("timeout", "0")]).unwrap();
        assert_eq!(s.command_timeout, Duration::from_secs(1));
        assert_eq!(s.pool_max_wait, None);
        let e = settings(&[("commandTimeout", "1000")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("commandTimeout") && e.contains("no unit"), "{e}");
        // Seata's pool keys are known; a typo is not.
        let s = settings(&[
            ("test-on-borrow", "true"),
            ("testOnReturn", "false"),
            ("max-total", "8"),
            ("min-evictable-idle-time-millis", "60000"),
            ("max-idel", "1"),
        ])
        .unwrap();
        assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
        assert!(s.warnings[0].contains("max-idel"), "{:?}", s.warnings);
    }

    #[test]
    fn meshline_durations_need_a_unit() {
        for key in ["ttl", "refreshPeriod"] {
            let e = settings(&[(key, "5")]).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains("no unit"), "{e}");
        }
        let s = settings(&[("ttl", "5s"), ("refreshPeriod", "500ms")]).unwrap();
        assert_eq!(s.ttl, Duration::from_secs(5));
        assert_eq!(s.refresh_period, Duration::from_millis(500));
    }
}
