//! Redis over TLS: a real `redis-server` (testkit) serving `--tls-port` with
//! certificates generated for this run (rcgen), with and without client-certificate
//! authentication (`--tls-auth-clients`).

mod common;

use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Config, RegistryService};
use meshline_registry_others::RedisRegistry;
use meshline_testkit::{Redis, TestPki, tls_round_trip};

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
async fn rediss_with_the_right_ca_and_without_client_auth() {
    common::init_logs();
    let pki = TestPki::generate().unwrap();
    let redis = Redis::start_tls(&pki, false).unwrap();
    let url = redis.tls_url().unwrap();
    let c = config(&[
        ("registry.redis.serverAddr", url.clone()),
        ("registry.redis.ttl", "2s".into()),
        ("registry.redis.refreshPeriod", "300ms".into()),
        ("registry.redis.tls.caFile", path(pki.ca())),
    ]);
    let r = RedisRegistry::connect(&c).await.expect("TLS connect");
    tls_round_trip(&r, "tls-redis").await;
    r.close().await.unwrap();

    // The wrong CA: refused, naming the server and the certificate problem.
    let c = config(&[
        ("registry.redis.serverAddr", url.clone()),
        ("registry.redis.tls.caFile", path(pki.other_ca())),
    ]);
    let e = RedisRegistry::connect(&c).await.unwrap_err().to_string();
    let port = url.trim_end_matches('/').rsplit(':').next().unwrap();
    assert!(
        e.contains(port) && e.contains("UnknownIssuer"),
        "the error names the server and the TLS cause: {e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_with_client_certificate_auth() {
    common::init_logs();
    let pki = TestPki::generate().unwrap();
    let redis = Redis::start_tls(&pki, true).unwrap();
    let url = redis.tls_url().unwrap();
    // host:port (no scheme) + tls.* keys: TLS is implied.
    let hostport = url
        .trim_start_matches("rediss://")
        .trim_end_matches('/')
        .to_string();
    let c = config(&[
        ("registry.redis.serverAddr", hostport),
        ("registry.redis.ttl", "2s".into()),
        ("registry.redis.refreshPeriod", "300ms".into()),
        ("registry.redis.tls.caFile", path(pki.ca())),
        ("registry.redis.tls.certFile", path(pki.client_cert())),
        ("registry.redis.tls.keyFile", path(pki.client_key())),
    ]);
    let r = RedisRegistry::connect(&c)
        .await
        .expect("mutual TLS connect");
    tls_round_trip(&r, "tls-redis-mtls").await;
    r.close().await.unwrap();

    // No client certificate: the server refuses the connection.
    let c = config(&[
        ("registry.redis.serverAddr", url),
        ("registry.redis.tls.caFile", path(pki.ca())),
    ]);
    assert!(RedisRegistry::connect(&c).await.is_err());
}
