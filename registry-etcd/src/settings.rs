//! `registry.etcd3.*` (also `registry.etcd.*`): what this backend reads from its
//! section of the configuration, with Seata's defaults.

use std::time::Duration;

use meshline_registry_core::config::Secret;
use meshline_registry_core::config::Section;
use meshline_registry_core::tls::TlsSettings;
use meshline_registry_core::{Config, RegistryError};

/// Default `keepaliveTime`: a silent member is suspected after 1 s without a byte.
pub(crate) const DEFAULT_KEEPALIVE_TIME: Duration = Duration::from_secs(1);
/// Default `keepaliveTimeout`: and declared dead 1 s later.
pub(crate) const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(1);
/// The shortest `keepaliveTime` / `keepaliveTimeout` taken (shorter values are raised):
/// below it, a loaded machine's scheduling delays would close live connections.
const MIN_KEEPALIVE: Duration = Duration::from_millis(200);

/// The etcd3 registry's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct EtcdSettings {
    /// `serverAddr`: one or more endpoints, comma-separated. Default `http://localhost:2379`.
    pub server_addr: String,
    /// `cluster`: the cluster a server registers in. Default `default`.
    pub cluster: String,
    /// `ttl` (meshline; a unit is required: `10s`): lease TTL of our registrations.
    /// Default 10 s (the TTL Seata hard-codes).
    pub ttl: Duration,
    /// `keepaliveTime` (meshline; jetcd's name, a unit is required: `1s`): how long a
    /// connection with an open watch or lease stream may stay silent before the client
    /// sends an HTTP/2 PING. Default 1 s. A blackholed etcd member (no FIN, no RST) is
    /// declared dead after this plus [`keepalive_timeout`](Self::keepalive_timeout), and
    /// the watch and lease move to another endpoint. The watch asks etcd for its
    /// progress, and the lease is kept alive, every half of this, so a live member
    /// always has data in flight and etcd's ping policy (at most one PING per 5 s
    /// without data from the server) never closes the connection.
    pub keepalive_time: Duration,
    /// `keepaliveTimeout` (meshline; jetcd's name, a unit is required): how long a
    /// PING may wait for its acknowledgement before the connection is closed and its
    /// streams fail over. Default 1 s.
    pub keepalive_timeout: Duration,
    /// `username`.
    pub username: Option<String>,
    /// `password`.
    pub password: Option<Secret>,
    /// `tls.*`: CA file, client certificate and key, server name (see
    /// [`meshline_registry_core::tls`]); `https://` endpoints turn TLS on too.
    pub tls: TlsSettings,
    /// Keys of the section this backend does not know (also logged).
    pub warnings: Vec<String>,
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
        Ok(EtcdSettings {
            server_addr: r.text("serverAddr", "http://localhost:2379")?,
            cluster: r.text("cluster", "default")?,
            ttl: r.duration("ttl", Duration::from_secs(10))?,
            keepalive_time: r
                .duration("keepaliveTime", DEFAULT_KEEPALIVE_TIME)?
                .max(MIN_KEEPALIVE),
            keepalive_timeout: r
                .duration("keepaliveTimeout", DEFAULT_KEEPALIVE_TIMEOUT)?
                .max(MIN_KEEPALIVE),
            username: r.optional("username"),
            password: r.secret("password"),
            tls: TlsSettings::read(&r, "etcd3")?,
            // Last (fields are evaluated in the order written): the keys no read above took.
            warnings: r.finish(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshline_registry_core::config::ConfigLoader;

    /// The settings read with each `registry.etcd3.<key>` of `pairs` set (nothing else).
    fn with(pairs: &[(&str, &str)]) -> Result<EtcdSettings, RegistryError> {
        let mut l = ConfigLoader::new();
        for (k, v) in pairs {
            l = l.set(format!("registry.etcd3.{k}"), *v);
        }
        EtcdSettings::from_config(&l.load().unwrap())
    }

    #[test]
    fn seata_shipped_files_and_the_unit_of_ttl() {
        for (name, s) in meshline_testkit::seata_shipped_settings(EtcdSettings::from_config) {
            assert!(s.warnings.is_empty(), "{name}: {:?}", s.warnings);
            assert_eq!(s.server_addr, "http://localhost:2379", "{name}");
            assert_eq!(s.ttl, Duration::from_secs(10), "{name}");
        }
        // `ttl` is meshline's own key: a bare number is refused, asking for a unit.
        let e = with(&[("ttl", "10")]).unwrap_err().to_string();
        assert!(
            e.contains("registry.etcd3.ttl") && e.contains("no unit") && e.contains("`10s`"),
            "{e}"
        );
        assert_eq!(
            with(&[("ttl", "10s")]).unwrap().ttl,
            Duration::from_secs(10)
        );
    }

    #[test]
    fn keepalive_keys_default_to_one_second_and_need_a_unit() {
        let d = with(&[]).unwrap();
        assert_eq!(d.keepalive_time, Duration::from_secs(1));
        assert_eq!(d.keepalive_timeout, Duration::from_secs(1));
        let s = with(&[("keepaliveTime", "3s"), ("keepaliveTimeout", "500ms")]).unwrap();
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
        assert_eq!(s.keepalive_time, Duration::from_secs(3));
        assert_eq!(s.keepalive_timeout, Duration::from_millis(500));
        assert_eq!(
            with(&[("keepaliveTime", "1ms")]).unwrap().keepalive_time,
            Duration::from_millis(200)
        );
        let e = with(&[("keepaliveTimeout", "1")]).unwrap_err().to_string();
        assert!(e.contains("registry.etcd3.keepaliveTimeout"), "{e}");
    }
}
