//! TLS for this crate's backends: `registry.<type>.tls.*` (see
//! [`meshline_registry_core::tls`]) handed to each client library, all rustls-based.
//!
//! | backend | cargo feature | turned on by | client library |
//! |---|---|---|---|
//! | zk | `zookeeper-tls` | `tls.*` keys | zookeeper-client (rustls) |
//! | redis | `redis-tls` | `rediss://` or `tls.*` keys | redis (tokio-rustls) |
//! | consul | `consul-tls` | `https://` or `tls.*` keys | reqwest (rustls, native roots) |
//! | eureka | `eureka-tls` | `https://` or `tls.*` keys | reqwest (rustls, native roots) |
//! | raft | `raft-tls` | `https://` or `tls.*` keys | reqwest (rustls, native roots) |
//! | seata (namingserver) | `namingserver-tls` | `https://` or `tls.*` keys | reqwest (rustls, native roots) |
//!
//! In a build without the feature, TLS asked for by a URL or a key is refused with a
//! message naming the feature (of the `meshline` crate; this crate's has the same name).

use meshline_registry_core::RegistryError;
use meshline_registry_core::tls::{TlsMaterial, TlsSettings};

/// A backend's TLS cargo feature: its name, for the error of a build without it, and
/// whether this build has it. [`tls_feature!`] makes one from the name alone, so the
/// two cannot disagree.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TlsFeature {
    /// The feature's name (`consul-tls`).
    pub(crate) name: &'static str,
    /// Whether this build has it.
    pub(crate) compiled_in: bool,
}

/// The [`TlsFeature`] named `$name` (`cfg!` takes a feature name as a literal only).
macro_rules! tls_feature {
    ($name:literal) => {
        $crate::tls::TlsFeature {
            name: $name,
            compiled_in: cfg!(feature = $name),
        }
    };
}
pub(crate) use tls_feature;

/// Refuses TLS in a build without `feature`, else loads the PEM files when TLS is on.
pub(crate) fn prepare(
    tls: &TlsSettings,
    kind: &str,
    section: &str,
    feature: TlsFeature,
) -> Result<Option<TlsMaterial>, RegistryError> {
    tls.require_compiled_in(kind, feature.compiled_in, feature.name)?;
    if !tls.enabled {
        return Ok(None);
    }
    tls.load(section).map(Some)
}

/// `tls.serverName` where the client library verifies the host of the address only.
#[cfg(any(
    feature = "consul-tls",
    feature = "eureka-tls",
    feature = "redis-tls",
    feature = "zookeeper-tls",
    feature = "raft-tls",
    feature = "namingserver-tls"
))]
pub(crate) fn refuse_server_name(m: &TlsMaterial, section: &str) -> Result<(), RegistryError> {
    match &m.server_name {
        Some(n) => Err(RegistryError::Config(format!(
            "registry.{section}.tls.serverName `{n}`: not supported by this backend's client \
             library, which checks the certificate against the host of the address: write \
             the address with that name (`{n}:port`, resolvable, e.g. through /etc/hosts)"
        ))),
        None => Ok(()),
    }
}

/// A reqwest client builder speaking TLS with `m`: only the given CA(s) when
/// `tls.caFile` is set (else the system's roots), a client identity when given.
#[cfg(feature = "_http-tls")]
pub(crate) fn http_client(
    builder: reqwest::ClientBuilder,
    m: &TlsMaterial,
    section: &str,
) -> Result<reqwest::ClientBuilder, RegistryError> {
    refuse_server_name(m, section)?;
    let bad = |key: &str, e: reqwest::Error| {
        RegistryError::Config(format!(
            "registry.{section}.{key}: {}",
            crate::common::error_chain(&e)
        ))
    };
    let mut b = builder.use_rustls_tls();
    if let Some(ca) = &m.ca_pem {
        b = b.tls_built_in_root_certs(false);
        for cert in reqwest::Certificate::from_pem_bundle(ca).map_err(|e| bad("tls.caFile", e))? {
            b = b.add_root_certificate(cert);
        }
    }
    if let Some((cert, key)) = &m.identity {
        let mut pem = cert.clone();
        pem.push(b'\n');
        pem.extend_from_slice(key);
        b = b.identity(reqwest::Identity::from_pem(&pem).map_err(|e| bad("tls.certFile", e))?);
    }
    Ok(b)
}

/// Makes ring rustls' process-wide default provider unless one is installed already
/// (libraries that build their rustls config with the default need one; with both
/// ring and aws-lc-rs compiled in, rustls cannot pick on its own).
#[cfg(any(feature = "redis-tls", feature = "zookeeper-tls"))]
pub(crate) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// zookeeper-client options from `m`: only the given CA (zookeeper-client has no
/// system roots, so `tls.caFile` is required), a client identity when given.
#[cfg(feature = "zookeeper-tls")]
pub(crate) fn zookeeper_options(
    m: &TlsMaterial,
) -> Result<zookeeper_client::TlsOptions, RegistryError> {
    refuse_server_name(m, "zk")?;
    ensure_crypto_provider();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let bad = |key: &str, e: zookeeper_client::Error| {
        RegistryError::Config(format!("registry.zk.{key}: {e}"))
    };
    let Some(ca) = &m.ca_pem else {
        return Err(RegistryError::Config(
            "registry.zk.tls.caFile is required for TLS to ZooKeeper (the client has no \
             system roots)"
                .into(),
        ));
    };
    let mut o = zookeeper_client::TlsOptions::new()
        .with_pem_ca(&text(ca))
        .map_err(|e| bad("tls.caFile", e))?;
    if let Some((cert, key)) = &m.identity {
        o = o
            .with_pem_identity(&text(cert), &text(key))
            .map_err(|e| bad("tls.certFile", e))?;
    }
    Ok(o)
}

/// `url` with `https://` in front when it has no scheme and TLS is on (`http://`
/// otherwise, as before); an explicit `http://` with TLS on is an error.
#[cfg(feature = "_http")]
pub(crate) fn http_scheme(url: &str, tls: bool, key: &str) -> Result<String, RegistryError> {
    let u = url.trim();
    match (u.split_once("://"), tls) {
        (Some((scheme, _)), true) if scheme.eq_ignore_ascii_case("http") => {
            Err(RegistryError::Config(format!(
                "{key} `{u}` is plain http but TLS is configured (tls.* keys): write https://"
            )))
        }
        (Some(_), _) => Ok(u.to_string()),
        (None, true) => Ok(format!("https://{u}")),
        (None, false) => Ok(format!("http://{u}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshline_registry_core::Config;

    /// A TLS URL or key in a build without the feature is refused naming it (run in
    /// every build: the check takes the "compiled in" flag as an argument).
    #[test]
    fn tls_without_the_feature_names_it() {
        const WITHOUT: TlsFeature = TlsFeature {
            name: "redis-tls",
            compiled_in: false,
        };
        let c = meshline_registry_core::config::ConfigLoader::new()
            .set("registry.redis.tls.caFile", "/x/ca.pem")
            .load()
            .unwrap();
        let section = c.registry.section(&["redis"]);
        let r = section.reader();
        let tls = TlsSettings::read(&r, "redis").unwrap();
        let e = prepare(&tls, "redis", "redis", WITHOUT)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`redis-tls`") && e.contains("tls.caFile"), "{e}");
        let mut tls = TlsSettings::read(
            &Config::default().registry.section(&["redis"]).reader(),
            "redis",
        )
        .unwrap();
        assert!(prepare(&tls, "redis", "redis", WITHOUT).unwrap().is_none());
        tls.asked_by_url("rediss://127.0.0.1:6380");
        let e = prepare(&tls, "redis", "redis", WITHOUT)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rediss://127.0.0.1:6380") && e.contains("`redis-tls`"),
            "{e}"
        );
    }

    #[cfg(feature = "_http")]
    #[test]
    fn schemes() {
        assert_eq!(http_scheme("h:1", false, "k").unwrap(), "http://h:1");
        assert_eq!(http_scheme("h:1", true, "k").unwrap(), "https://h:1");
        assert_eq!(
            http_scheme("https://h:1", false, "k").unwrap(),
            "https://h:1"
        );
        assert!(http_scheme("http://h:1", true, "k").is_err());
    }
}
