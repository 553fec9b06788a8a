//! `registry.eureka.*`: what this backend reads from its section of the
//! configuration, with Seata's defaults.

use std::time::Duration;

use meshline_registry_core::redact::redact_userinfo;
use meshline_registry_core::tls::TlsSettings;
use meshline_registry_core::{Config, RegistryError};

/// The Eureka registry's settings.
#[derive(Clone, PartialEq)]
pub struct EurekaSettings {
    /// `serviceUrl`: required for the eureka registry (e.g. `http://localhost:8761/eureka`).
    pub service_url: String,
    /// `application`. Default `default` (Eureka shows `DEFAULT`).
    pub application: String,
    /// `weight`, sent as metadata. Default `1`.
    pub weight: String,
    /// `renewalInterval` (meshline; a unit is required: `30s`): heartbeat period.
    /// Default 30 s.
    pub renewal_interval: Duration,
    /// `leaseDuration` (meshline; a unit is required: `90s`). Default 90 s.
    pub lease_duration: Duration,
    /// `refreshInterval` (meshline; a unit is required: `5s`): fetch period for
    /// watches. Default 5 s (Seata's `eureka.client.refresh.interval`).
    pub refresh_interval: Duration,
    /// `maxBodyBytes` (meshline): the largest answer read (a full fetch). Default
    /// 16 MiB.
    pub max_body_bytes: usize,
    /// `tls.*`: CA file, client certificate and key, server name (see
    /// [`meshline_registry_core::tls`]).
    pub tls: TlsSettings,
    /// Keys of the section this backend does not know (also logged).
    pub warnings: Vec<String>,
}

/// A `serviceUrl` with `user:pass@` is printed without the password.
impl std::fmt::Debug for EurekaSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EurekaSettings")
            .field("service_url", &redact_userinfo(&self.service_url))
            .field("application", &self.application)
            .field("weight", &self.weight)
            .field("renewal_interval", &self.renewal_interval)
            .field("lease_duration", &self.lease_duration)
            .field("refresh_interval", &self.refresh_interval)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("tls", &self.tls)
            .finish()
    }
}

impl EurekaSettings {
    /// Reads `registry.eureka.*` from `config`.
    pub fn from_config(config: &Config) -> Result<Self, RegistryError> {
        let section = config.registry.section(&["eureka"]);
        let r = section.reader();
        Ok(EurekaSettings {
            service_url: r.text_or_empty("serviceUrl", ""),
            application: r.text("application", "default")?,
            weight: r.text("weight", "1")?,
            renewal_interval: r.duration("renewalInterval", Duration::from_secs(30))?,
            lease_duration: r.duration("leaseDuration", Duration::from_secs(90))?,
            refresh_interval: r.duration("refreshInterval", Duration::from_secs(5))?,
            max_body_bytes: crate::common::max_body_bytes(&r, "eureka")?,
            tls: TlsSettings::read(&r, "eureka")?,
            // Last (fields are evaluated in the order written): the keys no read above took.
            warnings: r.finish(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seata_shipped_files_and_meshline_units() {
        for (name, s) in meshline_testkit::seata_shipped_settings(EurekaSettings::from_config) {
            assert!(s.warnings.is_empty(), "{name}: {:?}", s.warnings);
            assert_eq!(s.service_url, "http://localhost:8761/eureka", "{name}");
            assert_eq!(s.weight, "1", "{name}");
        }
        for key in ["renewalInterval", "leaseDuration", "refreshInterval"] {
            let bare = meshline_registry_core::config::ConfigLoader::new()
                .set(format!("registry.eureka.{key}"), "5")
                .load()
                .unwrap();
            let e = EurekaSettings::from_config(&bare).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains("no unit"), "{e}");
        }
    }

    #[test]
    fn the_debug_of_the_settings_hides_a_url_password() {
        let config = meshline_registry_core::config::ConfigLoader::new()
            .set(
                "registry.eureka.serviceUrl",
                "http://a:pw-9f2@h:8761/eureka,http://h2/eureka",
            )
            .load()
            .unwrap();
        let shown = format!("{:?}", EurekaSettings::from_config(&config).unwrap());
        assert!(
            shown.contains("\"http://a:<redacted>@h:8761/eureka,http://h2/eureka\""),
            "{shown}"
        );
        assert!(!shown.contains("pw-9f2"), "{shown}");
    }
}
