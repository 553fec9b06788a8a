//! Consul and Eureka over HTTPS: the in-process doubles serve TLS with certificates
//! generated for this run (meshline-testkit's `TestPki`, rcgen), with and without
//! client-certificate authentication.

mod common;

use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Config, RegistryService};
use meshline_registry_others::{ConsulRegistry, EurekaRegistry};
use meshline_testkit::{
    ConsulDouble, ConsulDoubleOptions, EurekaDouble, EurekaDoubleOptions, TestPki, tls_round_trip,
};

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
async fn consul_over_https_with_the_right_ca_and_a_client_certificate() {
    common::init_logs();
    let pki = TestPki::generate().unwrap();
    let consul = ConsulDouble::start_tls(
        ConsulDoubleOptions::default(),
        pki.server_config(true).unwrap(),
    )
    .unwrap();
    assert!(consul.url().starts_with("https://"));
    let c = config(&[
        ("registry.consul.serverAddr", consul.url()),
        ("registry.consul.ttl", "2s".into()),
        ("registry.consul.tls.caFile", path(pki.ca())),
        ("registry.consul.tls.certFile", path(pki.client_cert())),
        ("registry.consul.tls.keyFile", path(pki.client_key())),
    ]);
    let r = ConsulRegistry::connect(&c)
        .await
        .expect("mutual TLS connect");
    tls_round_trip(&r, "tls-consul").await;
    r.close().await.unwrap();

    // Scheme-less serverAddr + tls.* keys: https is implied.
    let c = config(&[
        ("registry.consul.serverAddr", consul.server_addr()),
        ("registry.consul.tls.caFile", path(pki.ca())),
        ("registry.consul.tls.certFile", path(pki.client_cert())),
        ("registry.consul.tls.keyFile", path(pki.client_key())),
    ]);
    let r = ConsulRegistry::connect(&c).await.expect("implied https");
    assert!(r.base_url().starts_with("https://"), "{}", r.base_url());
    r.close().await.unwrap();

    // Without a client certificate the server refuses the handshake.
    let c = config(&[
        ("registry.consul.serverAddr", consul.url()),
        ("registry.consul.tls.caFile", path(pki.ca())),
    ]);
    let e = ConsulRegistry::connect(&c).await.unwrap_err().to_string();
    assert!(e.contains(&consul.url()), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consul_with_the_wrong_ca_fails_naming_the_server_and_the_cause() {
    common::init_logs();
    let pki = TestPki::generate().unwrap();
    let consul = ConsulDouble::start_tls(
        ConsulDoubleOptions::default(),
        pki.server_config(false).unwrap(),
    )
    .unwrap();
    let c = config(&[
        ("registry.consul.serverAddr", consul.url()),
        ("registry.consul.tls.caFile", path(pki.other_ca())),
    ]);
    let e = ConsulRegistry::connect(&c).await.unwrap_err().to_string();
    assert!(
        e.contains(&consul.url()) && e.contains("certificate") && e.contains("UnknownIssuer"),
        "{e}"
    );
    // Plain http while tls.* is configured is refused before any connection.
    let c = config(&[
        (
            "registry.consul.serverAddr",
            format!("http://{}", consul.server_addr()),
        ),
        ("registry.consul.tls.caFile", path(pki.ca())),
    ]);
    let e = ConsulRegistry::connect(&c).await.unwrap_err().to_string();
    assert!(e.contains("plain http"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eureka_over_https_right_ca_wrong_ca_and_client_certificates() {
    common::init_logs();
    let pki = TestPki::generate().unwrap();
    let eureka = EurekaDouble::start_tls(
        EurekaDoubleOptions::default(),
        pki.server_config(true).unwrap(),
    )
    .unwrap();
    assert!(eureka.service_url().starts_with("https://"));
    let c = config(&[
        ("registry.eureka.serviceUrl", eureka.service_url()),
        ("registry.eureka.refreshInterval", "200ms".into()),
        ("registry.eureka.renewalInterval", "1s".into()),
        ("registry.eureka.tls.caFile", path(pki.ca())),
        ("registry.eureka.tls.certFile", path(pki.client_cert())),
        ("registry.eureka.tls.keyFile", path(pki.client_key())),
    ]);
    let r = EurekaRegistry::connect(&c)
        .await
        .expect("mutual TLS connect");
    tls_round_trip(&r, "tls-eureka").await;
    r.close().await.unwrap();

    let c = config(&[
        ("registry.eureka.serviceUrl", eureka.service_url()),
        ("registry.eureka.tls.caFile", path(pki.other_ca())),
        ("registry.eureka.tls.certFile", path(pki.client_cert())),
        ("registry.eureka.tls.keyFile", path(pki.client_key())),
    ]);
    let e = EurekaRegistry::connect(&c).await.unwrap_err().to_string();
    assert!(
        e.contains(&eureka.service_url()) && e.contains("UnknownIssuer"),
        "{e}"
    );
}
