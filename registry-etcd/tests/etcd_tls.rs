//! etcd over TLS: a real etcd (testkit) serving its clients with certificates generated
//! for this run (rcgen), server-authenticated (`--cert-file`/`--key-file`) and with
//! client-certificate authentication (`--client-cert-auth --trusted-ca-file`).

use meshline_registry_core::RegistryService;
use meshline_registry_etcd::EtcdRegistry;
use meshline_testkit::{Etcd, TestPki, Trust, tls_refusal, tls_round_trip};

const SECTION: &str = "registry.etcd3";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_the_right_ca_and_a_wrong_ca() {
    let pki = TestPki::generate().unwrap();
    let etcd = Etcd::start_tls(&pki, false).unwrap();
    let endpoint = etcd.endpoint();
    assert!(endpoint.starts_with("https://"));
    let at = ("registry.etcd3.serverAddr", endpoint.as_str());
    let c = pki.config(SECTION, Trust::Ca, &[at, ("registry.etcd3.ttl", "4s")]);
    let r = EtcdRegistry::connect(&c).await.expect("TLS connect");
    tls_round_trip(&r, "tls-etcd").await;
    r.close().await.unwrap();

    // tls.serverName: the certificate is checked against that name.
    let named = |name| {
        pki.config(
            SECTION,
            Trust::Ca,
            &[at, ("registry.etcd3.tls.serverName", name)],
        )
    };
    let r = EtcdRegistry::connect(&named("localhost")).await.unwrap();
    r.lookup("tls-etcd")
        .await
        .expect("lookup with serverName localhost");
    r.close().await.unwrap();
    let e = tls_refusal(EtcdRegistry::connect(&named("not-the-server.example")).await).await;
    assert!(e.contains("certificate not valid for name"), "{e}");

    // The wrong CA: the first operation fails naming the endpoint and the TLS cause.
    let e =
        tls_refusal(EtcdRegistry::connect(&pki.config(SECTION, Trust::OtherCa, &[at])).await).await;
    assert!(
        e.contains(&endpoint) && e.contains("UnknownIssuer"),
        "the error names the server and the TLS cause: {e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificate_auth() {
    let pki = TestPki::generate().unwrap();
    let etcd = Etcd::start_tls(&pki, true).unwrap();
    let endpoint = etcd.endpoint();
    let hostport = endpoint.trim_start_matches("https://");
    // A scheme-less endpoint with tls.* keys is dialled with TLS.
    let base = [
        ("registry.etcd3.serverAddr", hostport),
        ("registry.etcd3.ttl", "4s"),
    ];
    let c = pki.config(SECTION, Trust::CaWithClientCert, &base);
    let r = EtcdRegistry::connect(&c).await.expect("mutual TLS connect");
    tls_round_trip(&r, "tls-etcd-mtls").await;
    r.close().await.unwrap();

    // Without a client certificate etcd refuses the handshake.
    let at = [("registry.etcd3.serverAddr", endpoint.as_str())];
    let e = tls_refusal(EtcdRegistry::connect(&pki.config(SECTION, Trust::Ca, &at)).await).await;
    assert!(e.contains(&endpoint), "{e}");
}
