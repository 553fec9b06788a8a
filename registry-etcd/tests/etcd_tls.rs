//! etcd over TLS: a real etcd (testkit) serving its clients with certificates generated
//! for this run (rcgen), server-authenticated (`--cert-file`/`--key-file`) and with
//! client-certificate authentication (`--client-cert-auth --trusted-ca-file`).

use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Config, RegistryService};
use meshline_registry_etcd::EtcdRegistry;
use meshline_testkit::{Etcd, TestPki, tls_round_trip};

fn config(pairs: &[(&str, String)]) -> Config {
    let mut l = ConfigLoader::new();
    for (k, v) in pairs {
        l = l.set(*k, v.as_str());
    }
    l.load().unwrap()
}

fn path(p: std::path::PathBuf) -> String {
    p.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_the_right_ca_and_a_wrong_ca() {
    let pki = TestPki::generate().unwrap();
    let etcd = Etcd::start_tls(&pki, false).unwrap();
    assert!(etcd.endpoint().starts_with("https://"));
    let c = config(&[
        ("registry.etcd3.serverAddr", etcd.endpoint()),
        ("registry.etcd3.ttl", "4s".into()),
        ("registry.etcd3.tls.caFile", path(pki.ca())),
    ]);
    let r = EtcdRegistry::connect(&c).await.expect("TLS connect");
    tls_round_trip(&r, "tls-etcd").await;
    r.close().await.unwrap();

    // tls.serverName: the certificate is checked against that name.
    let c = config(&[
        ("registry.etcd3.serverAddr", etcd.endpoint()),
        ("registry.etcd3.tls.caFile", path(pki.ca())),
        ("registry.etcd3.tls.serverName", "localhost".into()),
    ]);
    let r = EtcdRegistry::connect(&c).await.unwrap();
    r.lookup("tls-etcd")
        .await
        .expect("lookup with serverName localhost");
    r.close().await.unwrap();
    let c = config(&[
        ("registry.etcd3.serverAddr", etcd.endpoint()),
        ("registry.etcd3.tls.caFile", path(pki.ca())),
        (
            "registry.etcd3.tls.serverName",
            "not-the-server.example".into(),
        ),
    ]);
    let r = EtcdRegistry::connect(&c).await.unwrap();
    let e = r.lookup("tls-etcd").await.unwrap_err().to_string();
    assert!(e.contains("certificate not valid for name"), "{e}");

    // The wrong CA: the first operation fails naming the endpoint and the TLS cause.
    let c = config(&[
        ("registry.etcd3.serverAddr", etcd.endpoint()),
        ("registry.etcd3.tls.caFile", path(pki.other_ca())),
    ]);
    let r = EtcdRegistry::connect(&c).await.unwrap();
    let e = r.lookup("tls-etcd").await.unwrap_err().to_string();
    assert!(
        e.contains(&etcd.endpoint()) && e.contains("UnknownIssuer"),
        "the error names the server and the TLS cause: {e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificate_auth() {
    let pki = TestPki::generate().unwrap();
    let etcd = Etcd::start_tls(&pki, true).unwrap();
    let hostport = etcd.endpoint().trim_start_matches("https://").to_string();
    // A scheme-less endpoint with tls.* keys is dialled with TLS.
    let c = config(&[
        ("registry.etcd3.serverAddr", hostport),
        ("registry.etcd3.ttl", "4s".into()),
        ("registry.etcd3.tls.caFile", path(pki.ca())),
        ("registry.etcd3.tls.certFile", path(pki.client_cert())),
        ("registry.etcd3.tls.keyFile", path(pki.client_key())),
    ]);
    let r = EtcdRegistry::connect(&c).await.expect("mutual TLS connect");
    tls_round_trip(&r, "tls-etcd-mtls").await;
    r.close().await.unwrap();

    // Without a client certificate etcd refuses the handshake.
    let c = config(&[
        ("registry.etcd3.serverAddr", etcd.endpoint()),
        ("registry.etcd3.tls.caFile", path(pki.ca())),
    ]);
    let r = EtcdRegistry::connect(&c).await.unwrap();
    let e = r.lookup("tls-etcd-mtls").await.unwrap_err().to_string();
    assert!(e.contains(&etcd.endpoint()), "{e}");
}
