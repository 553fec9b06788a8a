//! `registry.zk.*` (also `registry.zookeeper.*`): what this backend reads from its
//! section of the configuration, with Seata's defaults.

use std::time::Duration;

use meshline_registry_core::config::Secret;
use meshline_registry_core::config::Section;
use meshline_registry_core::tls::TlsSettings;
use meshline_registry_core::{Config, RegistryError};

/// Seata's unit for a bare number in its zk duration keys (Curator's milliseconds).
const MS: Duration = Duration::from_millis(1);

/// The ZooKeeper registry's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ZkSettings {
    /// `serverAddr`: a ZooKeeper connect string. Default `127.0.0.1:2181`.
    pub server_addr: String,
    /// `cluster`: the cluster a server registers in. Default `default`.
    pub cluster: String,
    /// `sessionTimeout` (Seata's key: a bare number is milliseconds). Default 6000 ms.
    pub session_timeout: Duration,
    /// `connectTimeout` (Seata's key: a bare number is milliseconds). Default 2000 ms.
    pub connect_timeout: Duration,
    /// `username` (digest auth).
    pub username: Option<String>,
    /// `password` (digest auth).
    pub password: Option<Secret>,
    /// `tls.*`: CA file, client certificate and key, server name (see
    /// [`meshline_registry_core::tls`]).
    pub tls: TlsSettings,
    /// Keys of the section this backend does not know (also logged).
    pub warnings: Vec<String>,
}

impl ZkSettings {
    /// Reads `registry.zk.*` (and the alias `registry.zookeeper.*`) from `config`.
    pub fn from_config(config: &Config) -> Result<Self, RegistryError> {
        Self::from_section(&config.registry.section(&["zookeeper", "zk"]), &[])
    }

    /// Reads the connection keys of a section: `registry.zk.*`, or the config centre's
    /// `config.zk.*` (whose `accept` lists its own keys, e.g. `nodePath`), so that both
    /// connect the same way.
    pub fn from_section(section: &Section, accept: &[&str]) -> Result<Self, RegistryError> {
        let r = section.reader();
        r.accept(accept);
        Ok(ZkSettings {
            server_addr: r.text("serverAddr", "127.0.0.1:2181")?,
            cluster: r.text("cluster", "default")?,
            session_timeout: r.seata_duration("sessionTimeout", MS, Duration::from_millis(6000))?,
            connect_timeout: r.seata_duration("connectTimeout", MS, Duration::from_millis(2000))?,
            username: r.optional("username"),
            password: r.secret("password"),
            tls: TlsSettings::read(&r, "zk")?,
            // Last (fields are evaluated in the order written): the keys no read above took.
            warnings: r.finish(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshline_registry_core::config::{ConfigLoader, Format};

    #[test]
    fn seata_shipped_files() {
        for (name, s) in meshline_testkit::seata_shipped_settings(ZkSettings::from_config) {
            assert!(s.warnings.is_empty(), "{name}: {:?}", s.warnings);
            assert_eq!(s.server_addr, "127.0.0.1:2181", "{name}");
            // Seata's keys, Seata's unit: `sessionTimeout = 6000` is 6 s.
            assert_eq!(s.session_timeout, Duration::from_millis(6000), "{name}");
            assert_eq!(s.connect_timeout, Duration::from_millis(2000), "{name}");
            assert_eq!(s.username, None, "{name}: empty is unset");
        }
    }

    #[test]
    fn seata_defaults_units_and_the_alias() {
        let s = ZkSettings::from_config(&Config::default()).unwrap();
        assert_eq!(s.server_addr, "127.0.0.1:2181");
        assert_eq!(s.session_timeout, Duration::from_millis(6000));
        assert_eq!(s.connect_timeout, Duration::from_millis(2000));
        let c = ConfigLoader::new()
            .text(
                "registry:\n  zookeeper:\n    session-timeout: 9000\n  zk:\n    connectTimeout: 3s\n",
                Format::Yaml,
            )
            .load()
            .unwrap();
        let s = ZkSettings::from_config(&c).unwrap();
        assert_eq!(s.session_timeout, Duration::from_millis(9000));
        assert_eq!(s.connect_timeout, Duration::from_secs(3));
        let bad = ConfigLoader::new()
            .set("registry.zk.sessionTimeout", "soon")
            .load()
            .unwrap();
        let e = ZkSettings::from_config(&bad).unwrap_err().to_string();
        assert!(
            e.contains("registry.zk.sessionTimeout") && e.contains("soon"),
            "{e}"
        );
    }
}
