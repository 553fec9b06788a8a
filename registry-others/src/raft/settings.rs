//! `registry.raft.*`: what the raft backend reads from its section, with Seata's
//! defaults (`discovery/seata-discovery-raft/.../RaftRegistryServiceImpl.java`).

use std::time::Duration;

use meshline_registry_core::config::Secret;
use meshline_registry_core::tls::TlsSettings;
use meshline_registry_core::{Config, RegistryError};

/// The raft registry's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct RaftSettings {
    /// `serverAddr`: the TCs' HTTP (control) addresses, comma-separated
    /// (`127.0.0.1:7091`). Default `127.0.0.1:7091`.
    pub server_addr: String,
    /// `username`: the console user of the token login; no login when it or the
    /// password is blank (as Seata).
    pub username: Option<String>,
    /// `password`. Never printed.
    pub password: Option<Secret>,
    /// `tokenValidityInMilliseconds` (a bare number is milliseconds, Seata's unit):
    /// the token's lifetime. Default 1,740,000 ms (29 min, Seata's). The token is
    /// renewed at 90 % of it, before the server can refuse it.
    pub token_validity: Duration,
    /// `metadataMaxAgeMs` (milliseconds when bare): the cluster metadata is read again
    /// at least this often even without a change notice. Default: Seata's key
    /// `client.metadataMaxAgeMs` when given, else 30,000 ms (Seata's default).
    pub metadata_max_age: Duration,
    /// `maxBodyBytes` (meshline): the largest answer read. Default 16 MiB.
    pub max_body_bytes: usize,
    /// `tls.*` (see [`meshline_registry_core::tls`]).
    pub tls: TlsSettings,
    /// Keys of the section this backend does not know (also logged).
    pub warnings: Vec<String>,
}

/// Seata's unit for a bare number in these keys.
const MS: Duration = Duration::from_millis(1);

impl RaftSettings {
    /// Reads `registry.raft.*` from `config`.
    pub fn from_config(config: &Config) -> Result<Self, RegistryError> {
        let section = config.registry.section(&["raft"]);
        let r = section.reader();
        let blank_none = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
        // Seata 2.x's `client.metadataMaxAgeMs` (bare: milliseconds), this backend's.
        let client = config.part("client");
        let seata_max_age = client.reader().seata_duration(
            "metadataMaxAgeMs",
            MS,
            Duration::from_millis(30_000),
        )?;
        let settings = RaftSettings {
            server_addr: r.text("serverAddr", "127.0.0.1:7091")?,
            username: blank_none(r.optional("username")),
            password: r.secret("password").filter(|p| !p.is_blank()),
            token_validity: r.seata_duration(
                "tokenValidityInMilliseconds",
                MS,
                Duration::from_millis(1_740_000),
            )?,
            // Seata's key is `client.metadataMaxAgeMs`; this section's key wins.
            metadata_max_age: r.seata_duration("metadataMaxAgeMs", MS, seata_max_age)?,
            max_body_bytes: crate::common::max_body_bytes(&r, "raft")?,
            tls: TlsSettings::read(&r, "raft")?,
            // Last (fields are evaluated in the order written): the keys no read above took.
            warnings: r.finish(),
        };
        if settings.token_validity < Duration::from_secs(1) {
            return Err(RegistryError::Config(format!(
                "registry.raft.tokenValidityInMilliseconds {:?} is under 1 s",
                settings.token_validity
            )));
        }
        if settings.metadata_max_age.is_zero() {
            return Err(RegistryError::Config(
                "registry.raft.metadataMaxAgeMs must be greater than 0".into(),
            ));
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshline_registry_core::config::Format;

    fn settings(text: &str) -> RaftSettings {
        RaftSettings::from_config(&Config::from_text(text, Format::Properties).unwrap()).unwrap()
    }

    #[test]
    fn seatas_client_metadata_max_age_is_used_and_the_section_key_wins() {
        assert_eq!(settings("").metadata_max_age, Duration::from_millis(30_000));
        // Seata's key, bare milliseconds.
        assert_eq!(
            settings("client.metadataMaxAgeMs=5000").metadata_max_age,
            Duration::from_millis(5000)
        );
        assert_eq!(
            settings("client.metadataMaxAgeMs=5000\nregistry.raft.metadataMaxAgeMs=2s")
                .metadata_max_age,
            Duration::from_secs(2)
        );
        assert_eq!(
            settings("registry.raft.tokenValidityInMilliseconds=60000").token_validity,
            Duration::from_secs(60)
        );
    }
}

#[cfg(test)]
mod shipped_tests {
    use super::*;

    /// Seata's shipped files carry a `registry.raft` section: it reads with no warning.
    /// (application.yml leaves `server-addr` empty, an error when raft is used.)
    #[test]
    fn seata_shipped_files_read_without_warnings() {
        crate::seata_http::assert_shipped_files_read_without_warnings(
            "raft",
            "127.0.0.1:7091",
            |c| RaftSettings::from_config(c).unwrap().warnings,
        );
    }
}
