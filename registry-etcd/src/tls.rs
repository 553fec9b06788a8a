//! TLS to etcd (cargo feature `tls` of this crate, `etcd-tls` of `meshline`): rustls
//! through tonic, ring provider.
//!
//! TLS is on when an endpoint is `https://` or any `registry.etcd3.tls.*` key is set
//! (then scheme-less endpoints are dialled with TLS too; an `http://` endpoint is an
//! error). `tls.caFile` replaces the system's roots; `tls.certFile` + `tls.keyFile`
//! present a client certificate (etcd's `--client-cert-auth`); `tls.serverName` is the
//! name checked in the server's certificate when it differs from the endpoint's host.

use etcd_client::ConnectOptions;
use meshline_registry_core::RegistryError;

use crate::{EtcdSettings, KIND};

/// `opts` with the TLS of `c` (or unchanged when TLS is off); refuses TLS in a build
/// without the feature, naming it.
pub(crate) fn apply(
    opts: ConnectOptions,
    c: &EtcdSettings,
    endpoints: &[String],
) -> Result<ConnectOptions, RegistryError> {
    let mut tls = c.tls.clone();
    if let Some(e) = endpoints.iter().find(|e| e.starts_with("https://")) {
        tls.asked_by_url(e);
    }
    tls.require_compiled_in(KIND, cfg!(feature = "tls"), "etcd-tls")?;
    if !tls.enabled {
        return Ok(opts);
    }
    if endpoints.iter().any(|e| e.starts_with("http://")) {
        return Err(RegistryError::Config(format!(
            "registry.etcd3.serverAddr has a plain http:// endpoint but TLS is configured \
             ({}): write https://",
            tls.asked_by.as_deref().unwrap_or("tls.*")
        )));
    }
    let material = tls.load("etcd3")?;
    with_tls(opts, material)
}

#[cfg(feature = "tls")]
fn with_tls(
    opts: ConnectOptions,
    m: meshline_registry_core::tls::TlsMaterial,
) -> Result<ConnectOptions, RegistryError> {
    use etcd_client::{Certificate, Identity, TlsOptions};
    let mut t = TlsOptions::new();
    t = match m.ca_pem {
        Some(ca) => t.ca_certificate(Certificate::from_pem(ca)),
        None => t.with_native_roots(),
    };
    if let Some((cert, key)) = m.identity {
        t = t.identity(Identity::from_pem(cert, key));
    }
    if let Some(name) = m.server_name {
        t = t.domain_name(name);
    }
    Ok(opts.with_tls(t))
}

#[cfg(not(feature = "tls"))]
fn with_tls(
    _opts: ConnectOptions,
    _m: meshline_registry_core::tls::TlsMaterial,
) -> Result<ConnectOptions, RegistryError> {
    unreachable!("require_compiled_in refused TLS in a build without the `tls` feature")
}

#[cfg(test)]
mod tests {
    use meshline_registry_core::config::ConfigLoader;

    /// In a build without `tls`, an https endpoint or a tls key is refused naming
    /// `etcd-tls`; with it, both are accepted (connecting is lazy).
    #[tokio::test]
    async fn tls_asked_for_without_the_feature_names_it() {
        // The tls key with a scheme-less endpoint (a plain `http://` one together with
        // TLS settings is refused whatever the build: a contradiction, not a feature).
        for (k, v) in [
            ("registry.etcd3.serverAddr", "https://127.0.0.1:1"),
            ("registry.etcd3.tls.enabled", "true"),
        ] {
            let c = ConfigLoader::new()
                .set("registry.etcd3.serverAddr", "127.0.0.1:1")
                .set(k, v)
                .load()
                .unwrap();
            let r = crate::EtcdRegistry::connect(&c).await;
            if cfg!(feature = "tls") {
                assert!(r.is_ok(), "{k}: {:?}", r.err());
            } else {
                let Err(e) = r else {
                    panic!("{k}: TLS must be refused without the feature")
                };
                let e = e.to_string();
                assert!(e.contains("`etcd-tls`"), "{e}");
            }
        }
    }
}
