//! `registry.redis.*`: what this backend reads from its section of the
//! configuration, with Seata's defaults.

use std::time::Duration;

use meshline_registry_core::tls::TlsSettings;
use meshline_registry_core::{Config, RegistryError};

/// The Redis registry's settings.
#[derive(Clone, PartialEq)]
pub struct RedisSettings {
    /// `serverAddr`: `host:port[,host:port…]`. Default `127.0.0.1:6379`.
    pub server_addr: String,
    /// `db`. Default 0.
    pub db: i64,
    /// `username` (Redis 6 ACL).
    pub username: Option<String>,
    /// `password`.
    pub password: Option<String>,
    /// `cluster`: the cluster a server registers in. Default `default`.
    pub cluster: String,
    /// `timeout`: per-command timeout. Default 2000 ms.
    pub timeout: Duration,
    /// `ttl` (meshline): expiry of our `SETEX` keys. Default 5 s (Seata's).
    pub ttl: Duration,
    /// `refreshPeriod` (meshline): how often we refresh our keys and rescan. Default 2000 ms.
    pub refresh_period: Duration,
    /// `tls.*`: CA file, client certificate and key, server name (see
    /// [`meshline_registry_core::tls`]).
    pub tls: TlsSettings,
    /// Keys of the section this backend does not know (also logged).
    pub warnings: Vec<String>,
}

/// The password is never printed.
impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("server_addr", &self.server_addr)
            .field("db", &self.db)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("cluster", &self.cluster)
            .field("timeout", &self.timeout)
            .field("ttl", &self.ttl)
            .field("refresh_period", &self.refresh_period)
            .field("tls", &self.tls)
            .finish()
    }
}

impl RedisSettings {
    /// Reads `registry.redis.*` from `config`.
    pub fn from_config(config: &Config) -> Result<Self, RegistryError> {
        let section = config.registry.section(&["redis"]);
        let r = section.reader();
        // Seata's Jedis pool keys: no pool here (one multiplexed connection).
        r.accept(&[
            "maxWait",
            "minIdle",
            "maxIdle",
            "maxActive",
            "maxTotal",
            "pool",
        ]);
        let settings = RedisSettings {
            server_addr: r.text("serverAddr", "127.0.0.1:6379")?,
            db: r.number("db", 0)?,
            username: r.optional("username"),
            password: r.optional("password"),
            cluster: r.text("cluster", "default")?,
            timeout: r.duration("timeout", Duration::from_millis(2000))?,
            ttl: r.duration("ttl", Duration::from_secs(5))?,
            refresh_period: r.duration("refreshPeriod", Duration::from_millis(2000))?,
            tls: TlsSettings::read(&r, "redis")?,
            warnings: Vec::new(),
        };
        Ok(RedisSettings {
            warnings: r.finish(),
            ..settings
        })
    }
}
