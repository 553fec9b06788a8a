//! `registry.etcd3.*` (also `registry.etcd.*`): what this backend reads from its
//! section of the configuration, with Seata's defaults.

use std::time::Duration;

use meshline_registry_core::config::Section;
use meshline_registry_core::tls::TlsSettings;
use meshline_registry_core::{Config, RegistryError};

/// The etcd3 registry's settings.
#[derive(Clone, PartialEq)]
pub struct EtcdSettings {
    /// `serverAddr`: one or more endpoints, comma-separated. Default `http://localhost:2379`.
    pub server_addr: String,
    /// `cluster`: the cluster a server registers in. Default `default`.
    pub cluster: String,
    /// `ttl` (meshline; a unit is required: `10s`): lease TTL of our registrations.
    /// Default 10 s (the TTL Seata hard-codes).
    pub ttl: Duration,
    /// `username`.
    pub username: Option<String>,
    /// `password`.
    pub password: Option<String>,
    /// `tls.*`: CA file, client certificate and key, server name (see
    /// [`meshline_registry_core::tls`]); `https://` endpoints turn TLS on too.
    pub tls: TlsSettings,
    /// Keys of the section this backend does not know (also logged).
    pub warnings: Vec<String>,
}

/// The password is never printed.
impl std::fmt::Debug for EtcdSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdSettings")
            .field("server_addr", &self.server_addr)
            .field("cluster", &self.cluster)
            .field("ttl", &self.ttl)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .finish()
    }
}

impl EtcdSettings {
    /// Reads `registry.etcd3.*` (and the alias `registry.etcd.*`) from `config`.
    pub fn from_config(config: &Config) -> Result<Self, RegistryError> {
        Self::from_section(&config.registry.section(&["etcd", "etcd3"]), &[])
    }

    /// Reads the connection keys of a section: `registry.etcd3.*`, or the config
    /// centre's `config.etcd3.*` (whose `accept` lists its own keys, e.g. `key`).
    pub fn from_section(section: &Section, accept: &[&str]) -> Result<Self, RegistryError> {
        let r = section.reader();
        r.accept(accept);
        let settings = EtcdSettings {
            server_addr: r.text("serverAddr", "http://localhost:2379")?,
            cluster: r.text("cluster", "default")?,
            ttl: r.duration("ttl", Duration::from_secs(10))?,
            username: r.optional("username"),
            password: r.optional("password"),
            tls: TlsSettings::read(&r, "etcd3")?,
            warnings: Vec::new(),
        };
        Ok(EtcdSettings {
            warnings: r.finish(),
            ..settings
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshline_registry_core::config::ConfigLoader;

    #[test]
    fn seata_shipped_files_and_the_unit_of_ttl() {
        for &name in meshline_testkit::SEATA_CLIENT_FILES {
            let s = EtcdSettings::from_config(&meshline_testkit::seata_shipped(name)).unwrap();
            assert!(s.warnings.is_empty(), "{name}: {:?}", s.warnings);
            assert_eq!(s.server_addr, "http://localhost:2379", "{name}");
            assert_eq!(s.ttl, Duration::from_secs(10), "{name}");
        }
        // `ttl` is meshline's own key: a bare number is refused, asking for a unit.
        let bare = ConfigLoader::new()
            .set("registry.etcd3.ttl", "10")
            .load()
            .unwrap();
        let e = EtcdSettings::from_config(&bare).unwrap_err().to_string();
        assert!(
            e.contains("registry.etcd3.ttl") && e.contains("no unit") && e.contains("`10s`"),
            "{e}"
        );
        let unit = ConfigLoader::new()
            .set("registry.etcd3.ttl", "10s")
            .load()
            .unwrap();
        assert_eq!(
            EtcdSettings::from_config(&unit).unwrap().ttl,
            Duration::from_secs(10)
        );
    }
}
