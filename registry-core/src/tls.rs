//! TLS settings shared by every network backend: `registry.<type>.tls.*`.
//!
//! This crate has no TLS code: it reads the keys, refuses TLS in a build whose backend
//! was compiled without it (naming the cargo feature), and loads the PEM files; each
//! backend hands the PEM bytes to its own client library (tonic, redis, reqwest,
//! zookeeper-client), all rustls-based.
//!
//! | key | meaning |
//! |---|---|
//! | `tls.enabled` | `true`: connect with TLS even without any other `tls.*` key (system roots) |
//! | `tls.caFile` | PEM file of the CA(s) that signed the server's certificate; default: the system's roots |
//! | `tls.certFile` | PEM client certificate (chain), for servers that ask for one (mutual TLS) |
//! | `tls.keyFile` | PEM private key of `tls.certFile` (both or neither) |
//! | `tls.serverName` | the name the server's certificate must carry, when it differs from the host in the address (backends that support it) |
//!
//! Any of these keys turns TLS on, and so does a TLS URL (`https://`, `rediss://`)
//! where the backend takes URLs.

use std::path::{Path, PathBuf};

use crate::RegistryError;
use crate::config::SectionReader;

/// The `tls.*` keys of a section, relative to it (`registry.etcd3.` + key).
pub const TLS_KEYS: [&str; 5] = [
    "tls.enabled",
    "tls.caFile",
    "tls.certFile",
    "tls.keyFile",
    "tls.serverName",
];

/// What a section says about TLS. Paths only: nothing secret is held (the key file's
/// contents are read by [`TlsSettings::load`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// Whether to connect with TLS: `tls.enabled=true`, any other `tls.*` key, or a
    /// TLS URL (see [`TlsSettings::asked_by_url`]).
    pub enabled: bool,
    /// `tls.caFile`.
    pub ca_file: Option<PathBuf>,
    /// `tls.certFile`.
    pub cert_file: Option<PathBuf>,
    /// `tls.keyFile`.
    pub key_file: Option<PathBuf>,
    /// `tls.serverName`.
    pub server_name: Option<String>,
    /// Why TLS is on, for messages (`key registry.redis.tls.caFile`, `URL rediss://...`).
    pub asked_by: Option<String>,
}

/// The PEM material of a [`TlsSettings`], read from its files.
#[derive(Clone, Default)]
pub struct TlsMaterial {
    /// The CA certificate(s), PEM; `None`: the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate chain and private key, PEM.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// `tls.serverName`.
    pub server_name: Option<String>,
}

/// The private key is never printed.
impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .field("identity", &self.identity.as_ref().map(|_| "<redacted>"))
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl TlsSettings {
    /// Reads the `tls.*` keys of `section` (the name used in messages, `etcd3`).
    pub fn read(r: &SectionReader<'_>, section: &str) -> Result<Self, RegistryError> {
        let enabled = match r.optional("tls.enabled") {
            None => None,
            Some(v) => Some(match v.to_ascii_lowercase().as_str() {
                "true" | "yes" | "on" | "1" => true,
                "false" | "no" | "off" | "0" => false,
                _ => {
                    return Err(RegistryError::Config(format!(
                        "key `registry.{section}.tls.enabled` has invalid value `{v}`: \
                         expected true or false"
                    )));
                }
            }),
        };
        let path = |k: &str| r.optional(k).map(PathBuf::from);
        let mut s = TlsSettings {
            enabled: false,
            ca_file: path("tls.caFile"),
            cert_file: path("tls.certFile"),
            key_file: path("tls.keyFile"),
            server_name: r.optional("tls.serverName"),
            asked_by: None,
        };
        if s.cert_file.is_some() != s.key_file.is_some() {
            return Err(RegistryError::Config(format!(
                "registry.{section}.tls.certFile and registry.{section}.tls.keyFile go \
                 together: give both (a client certificate and its key) or neither"
            )));
        }
        let first_key = [
            ("caFile", s.ca_file.is_some()),
            ("certFile", s.cert_file.is_some()),
            ("keyFile", s.key_file.is_some()),
            ("serverName", s.server_name.is_some()),
        ]
        .into_iter()
        .find(|(_, given)| *given)
        .map(|(k, _)| k);
        match (enabled, first_key) {
            (Some(false), Some(k)) => {
                return Err(RegistryError::Config(format!(
                    "registry.{section}.tls.enabled=false contradicts \
                     registry.{section}.tls.{k}: remove one of them"
                )));
            }
            (Some(true), _) => {
                s.enabled = true;
                s.asked_by = Some(format!("key registry.{section}.tls.enabled"));
            }
            (None, Some(k)) => {
                s.enabled = true;
                s.asked_by = Some(format!("key registry.{section}.tls.{k}"));
            }
            _ => {}
        }
        Ok(s)
    }

    /// Records that an address asks for TLS (`https://`, `rediss://`): turns TLS on.
    /// The URL is shown without its user info.
    pub fn asked_by_url(&mut self, url: &str) {
        if !self.enabled {
            self.enabled = true;
            self.asked_by = Some(format!("address {}", strip_userinfo(url)));
        }
    }

    /// In a build whose backend has no TLS (`compiled_in == false`): an error naming
    /// `feature` (the `meshline` cargo feature, `etcd-tls`) when TLS was asked for.
    pub fn require_compiled_in(
        &self,
        kind: &str,
        compiled_in: bool,
        feature: &str,
    ) -> Result<(), RegistryError> {
        if self.enabled && !compiled_in {
            return Err(RegistryError::Config(format!(
                "{} asks for TLS to the {kind} registry, but this build has no TLS for {kind}: \
                 enable the cargo feature `{feature}` of the `meshline` crate",
                self.asked_by.as_deref().unwrap_or("the configuration"),
            )));
        }
        Ok(())
    }

    /// Reads the PEM files; an error names the key, the file and the cause.
    pub fn load(&self, section: &str) -> Result<TlsMaterial, RegistryError> {
        let read = |key: &str, p: &Path| {
            let bytes = std::fs::read(p).map_err(|e| {
                RegistryError::Config(format!(
                    "registry.{section}.{key} `{}`: cannot read: {e}",
                    p.display()
                ))
            })?;
            if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
                return Err(RegistryError::Config(format!(
                    "registry.{section}.{key} `{}`: not a PEM file (no `-----BEGIN` line)",
                    p.display()
                )));
            }
            Ok(bytes)
        };
        let ca_pem = match &self.ca_file {
            Some(p) => Some(read("tls.caFile", p)?),
            None => None,
        };
        let identity = match (&self.cert_file, &self.key_file) {
            (Some(c), Some(k)) => Some((read("tls.certFile", c)?, read("tls.keyFile", k)?)),
            _ => None,
        };
        Ok(TlsMaterial {
            ca_pem,
            identity,
            server_name: self.server_name.clone(),
        })
    }
}

/// `scheme://user:pass@host/...` -> `scheme://host/...`.
fn strip_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let host_end = rest.find('/').unwrap_or(rest.len());
    match rest[..host_end].rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://{host}{}", &rest[host_end..]),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigLoader;

    fn settings(pairs: &[(&str, &str)]) -> Result<TlsSettings, RegistryError> {
        let mut l = ConfigLoader::new();
        for (k, v) in pairs {
            l = l.set(format!("registry.etcd3.{k}"), *v);
        }
        let c = l.load().unwrap();
        let section = c.registry.section(&["etcd3"]);
        let r = section.reader();
        TlsSettings::read(&r, "etcd3")
    }

    #[test]
    fn any_key_turns_tls_on_and_a_build_without_it_names_the_feature() {
        assert!(!settings(&[]).unwrap().enabled);
        let s = settings(&[("tls.caFile", "/x/ca.pem")]).unwrap();
        assert!(s.enabled);
        let e = s
            .require_compiled_in("etcd3", false, "etcd-tls")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("registry.etcd3.tls.caFile") && e.contains("`etcd-tls`"),
            "{e}"
        );
        assert!(s.require_compiled_in("etcd3", true, "etcd-tls").is_ok());
        let mut s = settings(&[]).unwrap();
        s.asked_by_url("https://u:secret@h:2379");
        let e = s
            .require_compiled_in("etcd3", false, "etcd-tls")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("address https://h:2379") && !e.contains("secret"),
            "{e}"
        );
    }

    #[test]
    fn cert_and_key_go_together_and_enabled_false_contradicts() {
        let e = settings(&[("tls.certFile", "c.pem")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("tls.keyFile"), "{e}");
        let e = settings(&[("tls.enabled", "false"), ("tls.caFile", "c.pem")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("contradicts"), "{e}");
        assert!(
            settings(&[("tls.enabled", "maybe")])
                .unwrap_err()
                .to_string()
                .contains("maybe")
        );
        assert!(settings(&[("tls.enabled", "true")]).unwrap().enabled);
    }

    #[test]
    fn load_names_the_key_and_file() {
        let s = settings(&[("tls.caFile", "/nonexistent/ca.pem")]).unwrap();
        let e = s.load("etcd3").unwrap_err().to_string();
        assert!(
            e.contains("registry.etcd3.tls.caFile") && e.contains("/nonexistent/ca.pem"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ca.pem");
        std::fs::write(&p, "not pem").unwrap();
        let s = settings(&[("tls.caFile", p.to_str().unwrap())]).unwrap();
        assert!(
            s.load("etcd3")
                .unwrap_err()
                .to_string()
                .contains("not a PEM")
        );
    }
}
