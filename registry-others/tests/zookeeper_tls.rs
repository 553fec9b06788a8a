//! ZooKeeper over TLS: a real ZooKeeper 3.8 (Debian's, testkit) serving its Netty
//! `secureClientPort` with certificates generated for this run (rcgen), with and
//! without client-certificate authentication (`ssl.clientAuth`).

mod common;

use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Config, RegistryService};
use meshline_registry_others::ZookeeperRegistry;
use meshline_testkit::{TestPki, ZooKeeper, tls_round_trip};

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
async fn secure_client_port_right_ca_wrong_ca() {
    common::init_logs();
    let pki = TestPki::generate().unwrap();
    let zk = ZooKeeper::start_tls(&pki, false).unwrap();
    let addr = zk.secure_connect_string().unwrap();
    let c = config(&[
        ("registry.zk.serverAddr", addr.clone()),
        ("registry.zk.sessionTimeout", "4s".into()),
        ("registry.zk.tls.caFile", path(pki.ca())),
    ]);
    let r = ZookeeperRegistry::connect(&c).await.expect("TLS connect");
    tls_round_trip(&r, "tls-zk").await;
    r.close().await.unwrap();

    let c = config(&[
        ("registry.zk.serverAddr", addr.clone()),
        ("registry.zk.sessionTimeout", "2s".into()),
        ("registry.zk.connectTimeout", "1s".into()),
        ("registry.zk.tls.caFile", path(pki.other_ca())),
    ]);
    let e = ZookeeperRegistry::connect(&c)
        .await
        .unwrap_err()
        .to_string();
    // zookeeper-client retries a failed handshake until the timeout and does not
    // report why; the backend's own handshake probe does: the server and the cause.
    assert!(
        e.contains(&addr) && e.contains("TLS handshake failed") && e.contains("UnknownIssuer"),
        "the error names the server and the certificate problem: {e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificate_auth() {
    common::init_logs();
    let pki = TestPki::generate().unwrap();
    let zk = ZooKeeper::start_tls(&pki, true).unwrap();
    let addr = zk.secure_connect_string().unwrap();
    let c = config(&[
        ("registry.zk.serverAddr", addr),
        ("registry.zk.sessionTimeout", "4s".into()),
        ("registry.zk.tls.caFile", path(pki.ca())),
        ("registry.zk.tls.certFile", path(pki.client_cert())),
        ("registry.zk.tls.keyFile", path(pki.client_key())),
    ]);
    let r = ZookeeperRegistry::connect(&c)
        .await
        .expect("mutual TLS connect");
    tls_round_trip(&r, "tls-zk-mtls").await;
    r.close().await.unwrap();
}
