//! `registry.seata.*` (also `registry.namingserver.*`): what the namingserver backend
//! reads, with Seata's defaults
//! (`discovery/seata-discovery-namingserver/.../NamingserverRegistryServiceImpl.java`,
//! `seata-spring-autoconfigure-core/.../RegistryNamingServerProperties.java`).

use std::time::Duration;

use meshline_registry_core::config::Secret;
use meshline_registry_core::tls::TlsSettings;
use meshline_registry_core::{Config, RegistryError};

/// The namingserver registry's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct NamingserverSettings {
    /// `server-addr` (`serverAddr`): the namingservers, comma-separated `host:port`
    /// (or `http(s)://`). Default `127.0.0.1:8081`.
    pub server_addr: String,
    /// `namespace`. Default `public`.
    pub namespace: String,
    /// `cluster`: Seata's TC key (the cluster it registers in). meshline's
    /// `register(cluster, ..)` names the cluster itself; read so it is not reported.
    pub cluster: String,
    /// The heartbeat period: our registrations are sent again, and the namingservers'
    /// health checked, this often: Seata's `heartbeat-period` (`heartbeatPeriod`),
    /// milliseconds when bare, default 5,000 ms.
    pub heartbeat_period: Duration,
    /// `username`: the console user of the token login (Seata 2.4+); no login when it
    /// or the password is blank (as Seata).
    pub username: Option<String>,
    /// `password`. Never printed.
    pub password: Option<Secret>,
    /// `tokenValidityInMilliseconds` (a bare number is milliseconds): the token's
    /// lifetime. Default 1,740,000 ms (29 min, Seata's); renewed at 90 % of it.
    pub token_validity: Duration,
    /// `maxBodyBytes` (meshline): the largest answer read. Default 16 MiB.
    pub max_body_bytes: usize,
    /// `tls.*` (see [`meshline_registry_core::tls`]).
    pub tls: TlsSettings,
    /// Keys of the section this backend does not know (also logged).
    pub warnings: Vec<String>,
}

impl NamingserverSettings {
    /// Reads `registry.seata.*` (and the alias section `registry.namingserver.*`).
    pub fn from_config(config: &Config) -> Result<Self, RegistryError> {
        let section = config.registry.section(&["namingserver", "seata"]);
        let r = section.reader();
        let blank_none = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
        let settings = NamingserverSettings {
            server_addr: r.text("serverAddr", "127.0.0.1:8081")?,
            namespace: r.text("namespace", "public")?,
            cluster: r.text("cluster", "default")?,
            heartbeat_period: r.seata_duration(
                "heartbeatPeriod",
                Duration::from_millis(1),
                Duration::from_millis(5000),
            )?,
            username: blank_none(r.optional("username")),
            password: r.secret("password").filter(|p| !p.is_blank()),
            token_validity: r.seata_duration(
                "tokenValidityInMilliseconds",
                Duration::from_millis(1),
                Duration::from_millis(1_740_000),
            )?,
            max_body_bytes: crate::common::max_body_bytes(&r, "seata")?,
            tls: TlsSettings::read(&r, "seata")?,
            // Last (fields are evaluated in the order written): the keys no read above took.
            warnings: r.finish(),
        };
        if settings.token_validity < Duration::from_secs(1) {
            return Err(RegistryError::Config(format!(
                "registry.seata.tokenValidityInMilliseconds {:?} is under 1 s",
                settings.token_validity
            )));
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshline_registry_core::config::Format;

    #[test]
    fn seatas_heartbeat_period_reaches_the_backend_in_milliseconds() {
        for text in [
            "registry.seata.heartbeat-period=2000",
            "registry.seata.heartbeatPeriod=2s",
        ] {
            let c = Config::from_text(text, Format::Properties).unwrap();
            let s = NamingserverSettings::from_config(&c).unwrap();
            assert_eq!(s.heartbeat_period, Duration::from_secs(2), "{text}");
            assert!(s.warnings.is_empty(), "{:?}", s.warnings);
        }
        let c = Config::default();
        assert_eq!(
            NamingserverSettings::from_config(&c)
                .unwrap()
                .heartbeat_period,
            Duration::from_millis(5000)
        );
    }
}

#[cfg(test)]
mod shipped_tests {
    use super::*;

    /// Seata's shipped files carry a `registry.seata` section: it reads with no warning.
    #[test]
    fn seata_shipped_files_read_without_warnings() {
        crate::seata_http::assert_shipped_files_read_without_warnings(
            "seata",
            "127.0.0.1:8081",
            |c| NamingserverSettings::from_config(c).unwrap().warnings,
        );
    }
}
