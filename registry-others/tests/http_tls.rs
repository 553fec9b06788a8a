//! Consul and Eureka over HTTPS: the in-process doubles serve TLS with certificates
//! generated for this run (meshline-testkit's `TestPki`, rcgen), with and without
//! client-certificate authentication.

mod common;

use common::{serves_over_tls, tls_pki};
use meshline_registry_core::RegistryService;
use meshline_registry_others::{ConsulRegistry, EurekaRegistry};
use meshline_testkit::{ConsulDouble, EurekaDouble, Trust, tls_refusal};

/// A double on its default options serving HTTPS with `tls`, started by its
/// `start_tls`.
fn https<D, O: Default, T, E: std::fmt::Debug>(start_tls: fn(O, T) -> Result<D, E>, tls: T) -> D {
    start_tls(O::default(), tls).unwrap()
}

const CONSUL: &str = "registry.consul";
const EUREKA: &str = "registry.eureka";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consul_over_https_with_the_right_ca_and_a_client_certificate() {
    let pki = tls_pki();
    let consul = https(ConsulDouble::start_tls, pki.server_config(true).unwrap());
    let url = consul.url();
    assert!(url.starts_with("https://"));
    let at = ("registry.consul.serverAddr", url.as_str());
    let c = pki.config(
        CONSUL,
        Trust::CaWithClientCert,
        &[at, ("registry.consul.ttl", "2s")],
    );
    serves_over_tls(ConsulRegistry::connect(&c).await, "tls-consul").await;

    // Scheme-less serverAddr + tls.* keys: https is implied.
    let plain = consul.server_addr();
    let c = pki.config(
        CONSUL,
        Trust::CaWithClientCert,
        &[("registry.consul.serverAddr", plain.as_str())],
    );
    let r = ConsulRegistry::connect(&c).await.expect("implied https");
    assert!(r.base_url().starts_with("https://"), "{}", r.base_url());
    r.close().await.unwrap();

    // Without a client certificate the server refuses the handshake.
    let e = tls_refusal(ConsulRegistry::connect(&pki.config(CONSUL, Trust::Ca, &[at])).await).await;
    assert!(e.contains(&url), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consul_with_the_wrong_ca_fails_naming_the_server_and_the_cause() {
    let pki = tls_pki();
    let consul = https(ConsulDouble::start_tls, pki.server_config(false).unwrap());
    let url = consul.url();
    let at = [("registry.consul.serverAddr", url.as_str())];
    let e =
        tls_refusal(ConsulRegistry::connect(&pki.config(CONSUL, Trust::OtherCa, &at)).await).await;
    assert!(
        e.contains(&url) && e.contains("certificate") && e.contains("UnknownIssuer"),
        "{e}"
    );
    // Plain http while tls.* is configured is refused before any connection.
    let http = format!("http://{}", consul.server_addr());
    let at = [("registry.consul.serverAddr", http.as_str())];
    let e = tls_refusal(ConsulRegistry::connect(&pki.config(CONSUL, Trust::Ca, &at)).await).await;
    assert!(e.contains("plain http"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eureka_over_https_right_ca_wrong_ca_and_client_certificates() {
    let pki = tls_pki();
    let eureka = https(EurekaDouble::start_tls, pki.server_config(true).unwrap());
    let url = eureka.service_url();
    assert!(url.starts_with("https://"));
    let base = [
        ("registry.eureka.serviceUrl", url.as_str()),
        ("registry.eureka.refreshInterval", "200ms"),
        ("registry.eureka.renewalInterval", "1s"),
    ];
    let c = pki.config(EUREKA, Trust::CaWithClientCert, &base);
    serves_over_tls(EurekaRegistry::connect(&c).await, "tls-eureka").await;

    let c = pki.config(EUREKA, Trust::OtherCaWithClientCert, &base[..1]);
    let e = tls_refusal(EurekaRegistry::connect(&c).await).await;
    assert!(e.contains(&url) && e.contains("UnknownIssuer"), "{e}");
}
