//! Why a secure ZooKeeper connect failed. zookeeper-client retries a failed TLS
//! handshake until its deadline and reports only "no session"; the certificate problem
//! (an unknown issuer, a name mismatch, a client certificate the server wants) is
//! logged at debug level inside the library and lost. After such a failure each server
//! gets one rustls handshake with the same CA and client identity, and its outcome goes
//! into the error.

use std::sync::Arc;
use std::time::Duration;

use meshline_registry_core::tls::TlsMaterial;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::TlsConnector;

/// How long each step of one probe may take.
const STEP: Duration = Duration::from_secs(2);

fn client_config(m: &TlsMaterial) -> Result<rustls::ClientConfig, String> {
    crate::tls::ensure_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = &m.ca_pem {
        for cert in CertificateDer::pem_slice_iter(ca) {
            let cert = cert.map_err(|e| format!("tls.caFile: {e}"))?;
            roots.add(cert).map_err(|e| format!("tls.caFile: {e}"))?;
        }
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    match &m.identity {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("tls.certFile: {e}"))?;
            let key =
                PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("tls.keyFile: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("client certificate: {e}"))
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

/// `target: outcome` for each `host:port`, joined by `; `: the TCP connect's error, or
/// the TLS handshake's (`TLS handshake failed: invalid peer certificate: UnknownIssuer`),
/// or that the handshake succeeded (then the failure was past TLS).
pub(super) async fn probe(targets: &[String], m: &TlsMaterial) -> String {
    let config = match client_config(m) {
        Ok(c) => Arc::new(c),
        Err(e) => return format!("TLS settings: {e}"),
    };
    let connector = TlsConnector::from(config);
    let mut out = Vec::new();
    for target in targets {
        let host = target
            .rsplit_once(':')
            .map_or(target.as_str(), |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']');
        let outcome = match ServerName::try_from(host.to_string()) {
            Err(e) => format!("not a TLS server name: {e}"),
            Ok(name) => match tokio::time::timeout(STEP, tokio::net::TcpStream::connect(target))
                .await
            {
                Err(_) => format!("TCP connect timed out after {STEP:?}"),
                Ok(Err(e)) => e.to_string(),
                Ok(Ok(tcp)) => match tokio::time::timeout(STEP, connector.connect(name, tcp)).await
                {
                    Err(_) => format!("TLS handshake timed out after {STEP:?}"),
                    Ok(Err(e)) => format!("TLS handshake failed: {e}"),
                    Ok(Ok(_)) => {
                        "TLS handshake succeeded, but no ZooKeeper session was established".into()
                    }
                },
            },
        };
        out.push(format!("{target}: {outcome}"));
    }
    out.join("; ")
}
