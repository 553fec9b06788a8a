//! TLS to Nacos: what nacos-sdk 0.8 can do, and refusals for the rest.
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
//!   `tls.certFile`/`tls.keyFile`/`tls.serverName` are refused as unsupported.

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
}
