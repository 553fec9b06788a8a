//! `registry.consul.*`: what this backend reads from its section of the
//! configuration, with Seata's defaults.

use std::time::Duration;

use meshline_registry_core::config::Secret;
use meshline_registry_core::config::Section;
use meshline_registry_core::tls::TlsSettings;
use meshline_registry_core::{Config, RegistryError};

/// The Consul registry's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ConsulSettings {
    /// `serverAddr`. Default `127.0.0.1:8500`.
    pub server_addr: String,
    /// `cluster`: the cluster (Consul service) a server registers in. Default `default`.
    pub cluster: String,
    /// `aclToken`.
    pub acl_token: Option<Secret>,
    /// `ttl` (meshline; a unit is required: `10s`): TTL of our health check. Default 10 s.
    pub ttl: Duration,
    /// `deregisterCriticalServiceAfter` (meshline; a unit is required: `20s`; Seata
    /// hard-codes 20 s and has no key). Default 20 s.
    pub deregister_critical_after: Duration,
    /// `maxBodyBytes` (meshline): the largest agent answer read. Default 16 MiB.
    pub max_body_bytes: usize,
    /// `tls.*`: CA file, client certificate and key, server name (see
    /// [`meshline_registry_core::tls`]).
    pub tls: TlsSettings,
    /// Keys of the section this backend does not know (also logged).
    pub warnings: Vec<String>,
}

impl ConsulSettings {
    /// Reads `registry.consul.*` from `config`.
    pub fn from_config(config: &Config) -> Result<Self, RegistryError> {
        Self::from_section(&config.registry.section(&["consul"]), &[])
    }

    /// Reads the connection keys of a section: `registry.consul.*`, or the config
    /// centre's `config.consul.*` (whose `accept` lists its own keys, e.g. `key`), so
    /// that both reach the agent the same way.
    pub fn from_section(section: &Section, accept: &[&str]) -> Result<Self, RegistryError> {
        let r = section.reader();
        r.accept(accept);
        Ok(ConsulSettings {
            server_addr: r.text("serverAddr", "127.0.0.1:8500")?,
            cluster: r.text("cluster", "default")?,
            acl_token: r.secret("aclToken"),
            ttl: r.duration("ttl", Duration::from_secs(10))?,
            deregister_critical_after: r
                .duration("deregisterCriticalServiceAfter", Duration::from_secs(20))?,
            max_body_bytes: crate::common::max_body_bytes(&r, "consul")?,
            tls: TlsSettings::read(&r, "consul")?,
            // Last (fields are evaluated in the order written): the keys no read above took.
            warnings: r.finish(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshline_registry_core::config::ConfigLoader;

    #[test]
    fn seata_shipped_files_and_meshline_units() {
        for (name, s) in meshline_testkit::seata_shipped_settings(ConsulSettings::from_config) {
            assert!(s.warnings.is_empty(), "{name}: {:?}", s.warnings);
            assert_eq!(s.server_addr, "127.0.0.1:8500", "{name}");
            assert_eq!(s.acl_token, None, "{name}");
        }
        // `ttl` and `deregisterCriticalServiceAfter` are meshline's: a unit is required.
        for key in ["ttl", "deregisterCriticalServiceAfter"] {
            let bare = ConfigLoader::new()
                .set(format!("registry.consul.{key}"), "20")
                .load()
                .unwrap();
            let e = ConsulSettings::from_config(&bare).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains("no unit"), "{e}");
        }
        let unit = ConfigLoader::new()
            .set("registry.consul.deregisterCriticalServiceAfter", "30s")
            .load()
            .unwrap();
        assert_eq!(
            ConsulSettings::from_config(&unit)
                .unwrap()
                .deregister_critical_after,
            Duration::from_secs(30)
        );
    }
}
