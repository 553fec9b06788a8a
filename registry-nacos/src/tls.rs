//! TLS to Nacos: what nacos-sdk 0.8 can do, and refusals for the rest.
//!
//! The configuration centre runs on nacos-sdk; the registry's own client
//! (`src/grpc/`) follows the same rules (TLS to every server in a TLS build, the
//! system's roots plus the CA file of `NACOS_CLIENT_TLS_CA_CERT`), so that one
//! configuration reaches registry and centre alike.
//!
//! nacos-sdk's TLS is a compile-time switch (its `tls` feature, forwarded by this
//! crate's `tls` and `meshline`'s `nacos-tls`): once on, **every** connection it makes
//! is TLS (gRPC `https://`, and the HTTP login), with the system's roots plus the CA
//! file named by the environment variable `NACOS_CLIENT_TLS_CA_CERT`; it has no client
//! certificate and no server-name setting. So, here:
//!
//! - without the feature, any `registry.nacos.tls.*` key is refused, naming `nacos-tls`;
//! - with it, `tls.caFile` must equal `NACOS_CLIENT_TLS_CA_CERT` (set it in the
//!   process environment before start: nacos-sdk reads only that), and
//!   `tls.certFile`/`tls.keyFile`/`tls.serverName` are refused as unsupported;
//! - with it, a server the configuration does not ask TLS of (a bare `host:port`, no
//!   `tls.*` key) is refused before any connection, naming the feature and both fixes
//!   ([`check_plain`]): nacos-sdk would speak TLS to it anyway, and a plain server
//!   answers that with "the connection is not connected", which names neither. So the
//!   feature never changes silently how a configuration connects: `--all-features`
//!   (which turns `nacos-tls` on) against a plain Nacos fails at once and says why.

use meshline_registry_core::RegistryError;
use meshline_registry_core::tls::TlsSettings;

/// The environment variable nacos-sdk reads its CA file from.
pub const CA_ENV: &str = "NACOS_CLIENT_TLS_CA_CERT";

pub(crate) fn check(tls: &TlsSettings) -> Result<(), RegistryError> {
    tls.require_compiled_in("nacos", cfg!(feature = "tls"), "nacos-tls")?;
    if tls.cert_file.is_some() || tls.server_name.is_some() {
        return Err(RegistryError::Config(
            "registry.nacos.tls.certFile/keyFile/serverName: not supported by nacos-sdk \
             (no client certificate or server-name option); only tls.caFile applies"
                .into(),
        ));
    }
    if let Some(ca) = &tls.ca_file {
        let env = std::env::var_os(CA_ENV);
        if env.as_deref() != Some(ca.as_os_str()) {
            return Err(RegistryError::Config(format!(
                "registry.nacos.tls.caFile `{}`: nacos-sdk reads its CA only from the \
                 environment variable {CA_ENV}; start the process with \
                 {CA_ENV}={} (it is {})",
                ca.display(),
                ca.display(),
                match env {
                    Some(v) => format!("`{}`", v.to_string_lossy()),
                    None => "unset".into(),
                }
            )));
        }
    }
    Ok(())
}

/// In a build with nacos-sdk's TLS (`tls_built`), refuses a configuration that asks
/// for no TLS: `serverAddr` without `https://` (`scheme_given` false for a bare
/// `host:port`; `http://` is refused by the address check) and no `tls.*` key.
pub(crate) fn check_plain(
    server_addr: &str,
    scheme_given: bool,
    tls: &TlsSettings,
    tls_built: bool,
) -> Result<(), RegistryError> {
    if !tls_built || scheme_given || tls.enabled {
        return Ok(());
    }
    Err(RegistryError::Config(format!(
        "registry.nacos.serverAddr `{server_addr}` asks for a plain connection (no https://, \
         no registry.nacos.tls.* key), but this build has the cargo feature `nacos-tls` \
         (`--all-features` turns it on), with which nacos-sdk speaks TLS to every Nacos \
         server and a plain one refuses it. Fix: build without `nacos-tls` (e.g. \
         `--features all-tls` instead of `--all-features`), or, if this server serves \
         TLS, write each address as https://host:port or set \
         registry.nacos.tls.enabled=true"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshline_registry_core::config::ConfigLoader;

    fn tls(pairs: &[(&str, &str)]) -> TlsSettings {
        let mut l = ConfigLoader::new();
        for (k, v) in pairs {
            l = l.set(format!("registry.nacos.{k}"), *v);
        }
        crate::NacosSettings::from_config(&l.load().unwrap())
            .unwrap()
            .tls
    }

    #[test]
    fn refusals() {
        let e = check(&tls(&[("tls.certFile", "c.pem"), ("tls.keyFile", "k.pem")]));
        let e = e.unwrap_err().to_string();
        if cfg!(feature = "tls") {
            assert!(e.contains("not supported by nacos-sdk"), "{e}");
        } else {
            assert!(e.contains("`nacos-tls`"), "{e}");
        }
        let e = check(&tls(&[("tls.caFile", "/nonexistent/other.pem")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(if cfg!(feature = "tls") {
                CA_ENV
            } else {
                "`nacos-tls`"
            }),
            "{e}"
        );
        assert!(check(&tls(&[("tls.enabled", "false")])).is_ok());
    }

    /// `--all-features` against a plain Nacos: refused before connecting, naming the
    /// feature, the cause and both fixes; TLS asked for by a key or a URL is let through,
    /// and a build without the feature lets the plain server through.
    #[test]
    fn a_plain_server_in_a_tls_build_is_refused_naming_the_feature() {
        let plain = tls(&[]);
        let e = check_plain("127.0.0.1:8848", false, &plain, true)
            .unwrap_err()
            .to_string();
        for part in [
            "registry.nacos.serverAddr `127.0.0.1:8848` asks for a plain connection",
            "cargo feature `nacos-tls`",
            "`--all-features` turns it on",
            "build without `nacos-tls`",
            "https://host:port",
            "registry.nacos.tls.enabled=true",
        ] {
            assert!(e.contains(part), "no `{part}` in: {e}");
        }
        assert!(check_plain("127.0.0.1:8848", true, &plain, true).is_ok());
        let asked = tls(&[("tls.enabled", "true")]);
        assert!(asked.enabled);
        assert!(check_plain("127.0.0.1:8848", false, &asked, true).is_ok());
        assert!(check_plain("127.0.0.1:8848", false, &plain, false).is_ok());
    }

    /// The check is wired into every Nacos client's preparation (naming and the config
    /// centre), with this build's feature: refused with `tls`, accepted without.
    #[test]
    fn prepare_refuses_a_plain_server_exactly_in_a_tls_build() {
        let config = ConfigLoader::new()
            .set("registry.nacos.serverAddr", "127.0.0.1:8848")
            .load()
            .unwrap();
        let n = crate::NacosSettings::from_config(&config).unwrap();
        let refused = crate::connect::prepare(&n, "app")
            .err()
            .map(|e| e.to_string());
        assert_eq!(refused.is_some(), cfg!(feature = "tls"), "{refused:?}");
        if let Some(e) = refused {
            assert!(e.contains("cargo feature `nacos-tls`"), "{e}");
        }
    }
}
