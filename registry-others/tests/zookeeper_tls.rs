//! ZooKeeper over TLS: a real ZooKeeper 3.8 (Debian's, testkit) serving its Netty
//! `secureClientPort` with certificates generated for this run (rcgen), with and
//! without client-certificate authentication (`ssl.clientAuth`).

mod common;

use common::{serves_over_tls, tls_pki};
use meshline_registry_others::ZookeeperRegistry;
use meshline_testkit::{Trust, ZooKeeper, tls_refusal};

const SECTION: &str = "registry.zk";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_client_port_right_ca_wrong_ca() {
    let pki = tls_pki();
    let zk = ZooKeeper::start_tls(&pki, false).unwrap();
    let addr = zk.secure_connect_string().unwrap();
    let at = ("registry.zk.serverAddr", addr.as_str());
    let c = pki.config(
        SECTION,
        Trust::Ca,
        &[at, ("registry.zk.sessionTimeout", "4s")],
    );
    serves_over_tls(ZookeeperRegistry::connect(&c).await, "tls-zk").await;

    let base = [
        at,
        ("registry.zk.sessionTimeout", "2s"),
        ("registry.zk.connectTimeout", "1s"),
    ];
    let e =
        tls_refusal(ZookeeperRegistry::connect(&pki.config(SECTION, Trust::OtherCa, &base)).await)
            .await;
    // zookeeper-client retries a failed handshake until the timeout and does not
    // report why; the backend's own handshake probe does: the server and the cause.
    assert!(
        e.contains(&addr) && e.contains("TLS handshake failed") && e.contains("UnknownIssuer"),
        "the error names the server and the certificate problem: {e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificate_auth() {
    let pki = tls_pki();
    let zk = ZooKeeper::start_tls(&pki, true).unwrap();
    let addr = zk.secure_connect_string().unwrap();
    let base = [
        ("registry.zk.serverAddr", addr.as_str()),
        ("registry.zk.sessionTimeout", "4s"),
    ];
    let c = pki.config(SECTION, Trust::CaWithClientCert, &base);
    serves_over_tls(ZookeeperRegistry::connect(&c).await, "tls-zk-mtls").await;
}
