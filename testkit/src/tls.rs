//! Certificates generated at test time (rcgen) for the TLS tests.
//!
//! [`TestPki::generate`] makes, in a temp dir, PEM files of: a CA; a server certificate
//! it signed for `localhost` and `127.0.0.1`; a client certificate it signed (for
//! mutual TLS); and a second, unrelated CA (`other_ca`) that signed nothing a server
//! here presents, for "wrong CA" tests. Real servers (etcd, Redis, ZooKeeper) read the
//! files; the in-process doubles take [`TestPki::server_config`].

use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tempfile::TempDir;

use crate::{Error, Result, io_err};

/// A CA, a server and a client certificate, and an unrelated CA, as PEM files.
pub struct TestPki {
    dir: TempDir,
    ca_der: Vec<u8>,
    server_chain: Vec<u8>,
    server_key_der: Vec<u8>,
}

impl std::fmt::Debug for TestPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestPki")
            .field("dir", &self.dir.path())
            .finish()
    }
}

fn rc(what: &str) -> impl FnOnce(rcgen::Error) -> Error + '_ {
    move |e| Error::Other(format!("rcgen: {what}: {e}"))
}

fn ca(name: &str) -> Result<(rcgen::Certificate, KeyPair)> {
    let mut p = CertificateParams::new(Vec::<String>::new()).map_err(rc("CA params"))?;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let key = KeyPair::generate().map_err(rc("CA key"))?;
    let cert = p.self_signed(&key).map_err(rc("self-sign the CA"))?;
    Ok((cert, key))
}

fn leaf(
    name: &str,
    purpose: ExtendedKeyUsagePurpose,
    issuer: &(rcgen::Certificate, KeyPair),
) -> Result<(rcgen::Certificate, KeyPair)> {
    let mut p = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .map_err(rc("leaf params"))?;
    p.distinguished_name.push(DnType::CommonName, name);
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![purpose];
    let key = KeyPair::generate().map_err(rc("leaf key"))?;
    let cert = p
        .signed_by(&key, &issuer.0, &issuer.1)
        .map_err(rc("sign a leaf"))?;
    Ok((cert, key))
}

impl TestPki {
    /// Generates everything into a new temp dir (removed on drop).
    pub fn generate() -> Result<TestPki> {
        let dir = tempfile::Builder::new()
            .prefix("meshline-pki-")
            .tempdir()
            .map_err(io_err("create a temp dir for certificates"))?;
        let ca = ca("meshline test CA")?;
        let other = ca_other()?;
        let server = leaf(
            "meshline test server",
            ExtendedKeyUsagePurpose::ServerAuth,
            &ca,
        )?;
        let client = leaf(
            "meshline test client",
            ExtendedKeyUsagePurpose::ClientAuth,
            &ca,
        )?;
        let write = |name: &str, text: String| {
            std::fs::write(dir.path().join(name), text).map_err(io_err(format!("write {name}")))
        };
        write("ca.pem", ca.0.pem())?;
        write("other-ca.pem", other.0.pem())?;
        write("server.pem", server.0.pem())?;
        write("server-key.pem", server.1.serialize_pem())?;
        write("client.pem", client.0.pem())?;
        write("client-key.pem", client.1.serialize_pem())?;
        Ok(TestPki {
            ca_der: ca.0.der().to_vec(),
            server_chain: server.0.der().to_vec(),
            server_key_der: server.1.serialize_der(),
            dir,
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The directory holding the files.
    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// The CA that signed the server and client certificates.
    pub fn ca(&self) -> PathBuf {
        self.path("ca.pem")
    }

    /// A CA that signed nothing the servers present: a client trusting only it must
    /// refuse them.
    pub fn other_ca(&self) -> PathBuf {
        self.path("other-ca.pem")
    }

    /// A client config: the `base` keys, then `<prefix>.tls.*` as `trust` says
    /// (`prefix` is the backend's section, `registry.redis`).
    pub fn config(
        &self,
        prefix: &str,
        trust: Trust,
        base: &[(&str, &str)],
    ) -> meshline_registry_core::Config {
        let (ca, client) = match trust {
            Trust::Ca => (self.ca(), false),
            Trust::OtherCa => (self.other_ca(), false),
            Trust::CaWithClientCert => (self.ca(), true),
            Trust::OtherCaWithClientCert => (self.other_ca(), true),
        };
        let mut files = vec![("caFile", ca)];
        if client {
            files.push(("certFile", self.client_cert()));
            files.push(("keyFile", self.client_key()));
        }
        let tls: Vec<(String, String)> = files
            .into_iter()
            .map(|(k, p)| (format!("{prefix}.tls.{k}"), p.display().to_string()))
            .collect();
        let tls: Vec<(&str, &str)> = tls.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        crate::config_of(base, &tls)
    }

    /// The server certificate (`localhost`, `127.0.0.1`).
    pub fn server_cert(&self) -> PathBuf {
        self.path("server.pem")
    }

    /// Its private key (PKCS#8 PEM).
    pub fn server_key(&self) -> PathBuf {
        self.path("server-key.pem")
    }

    /// The client certificate (for mutual TLS).
    pub fn client_cert(&self) -> PathBuf {
        self.path("client.pem")
    }

    /// Its private key (PKCS#8 PEM).
    pub fn client_key(&self) -> PathBuf {
        self.path("client-key.pem")
    }

    /// A rustls server configuration presenting the server certificate; with
    /// `require_client_cert`, clients must present a certificate the CA signed.
    pub fn server_config(&self, require_client_cert: bool) -> Result<Arc<rustls::ServerConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Other(format!("rustls: {e}")))?;
        let builder = if require_client_cert {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from(self.ca_der.clone()))
                .map_err(|e| Error::Other(format!("rustls: add the CA: {e}")))?;
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| Error::Other(format!("rustls: client verifier: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let config = builder
            .with_single_cert(
                vec![CertificateDer::from(self.server_chain.clone())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server_key_der.clone())),
            )
            .map_err(|e| Error::Other(format!("rustls: server certificate: {e}")))?;
        Ok(Arc::new(config))
    }
}

fn ca_other() -> Result<(rcgen::Certificate, KeyPair)> {
    ca("meshline unrelated CA")
}

/// What a TLS client config trusts and presents ([`TestPki::config`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// This run's CA, no client certificate.
    Ca,
    /// The CA that signed nothing here: the server must be refused.
    OtherCa,
    /// This run's CA, and the client certificate it signed.
    CaWithClientCert,
    /// The wrong CA, with a good client certificate.
    OtherCaWithClientCert,
}

/// The error of a client that should not get through: `connect`'s, or for a backend
/// that connects lazily (etcd) the first lookup's.
pub async fn refusal<R: meshline_registry_core::RegistryService>(
    connected: Result<R, meshline_registry_core::RegistryError>,
) -> String {
    match connected {
        Err(e) => e.to_string(),
        Ok(r) => {
            let e = r
                .lookup("tls-refused")
                .await
                .expect_err("a client that should be refused got an answer");
            let _ = r.close().await;
            e.to_string()
        }
    }
}

/// The TLS tests' round trip: a watch on `cluster`, then two members registered
/// through `registry` and seen by the watch, then one unregistered and gone (one stays,
/// so empty-list protection does not hide the removal); within 15 s each.
pub async fn round_trip(registry: &dyn meshline_registry_core::RegistryService, cluster: &str) {
    use crate::watch::{addrs, inst, wait_for};
    let within = std::time::Duration::from_secs(15);
    let (stays, goes) = ("10.9.8.7:8091", "10.9.8.8:8091");
    let mut w = registry.watch(cluster).await.expect("watch over TLS");
    for a in [stays, goes] {
        registry
            .register(cluster, &inst(a))
            .await
            .expect("register over TLS");
    }
    wait_for(&mut w, within, "the registrations over TLS", |s| {
        let a = addrs(s);
        a.contains(&stays.to_string()) && a.contains(&goes.to_string())
    })
    .await;
    let found = registry.lookup(cluster).await.expect("lookup over TLS");
    assert!(found.iter().any(|i| i.to_string() == goes), "{found:?}");
    registry
        .unregister(cluster, &inst(goes))
        .await
        .expect("unregister over TLS");
    wait_for(&mut w, within, "the removal over TLS", |s| {
        addrs(s) == vec![stays.to_string()]
    })
    .await;
}
