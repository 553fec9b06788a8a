//! Redis over TLS: a real `redis-server` (testkit) serving `--tls-port` with
//! certificates generated for this run (rcgen), with and without client-certificate
//! authentication (`--tls-auth-clients`).

mod common;

use common::{serves_over_tls, tls_pki};
use meshline_registry_others::RedisRegistry;
use meshline_testkit::{Redis, Trust, tls_refusal};

const SECTION: &str = "registry.redis";
const TIMINGS: [(&str, &str); 2] = [
    ("registry.redis.ttl", "2s"),
    ("registry.redis.refreshPeriod", "300ms"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_with_the_right_ca_and_without_client_auth() {
    let pki = tls_pki();
    let redis = Redis::start_tls(&pki, false).unwrap();
    let url = redis.tls_url().unwrap();
    let at = ("registry.redis.serverAddr", url.as_str());
    let c = pki.config(SECTION, Trust::Ca, &[at, TIMINGS[0], TIMINGS[1]]);
    serves_over_tls(RedisRegistry::connect(&c).await, "tls-redis").await;

    // The wrong CA: refused, naming the server and the certificate problem.
    let e = tls_refusal(RedisRegistry::connect(&pki.config(SECTION, Trust::OtherCa, &[at])).await)
        .await;
    let port = url.trim_end_matches('/').rsplit(':').next().unwrap();
    assert!(
        e.contains(port) && e.contains("UnknownIssuer"),
        "the error names the server and the TLS cause: {e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_with_client_certificate_auth() {
    let pki = tls_pki();
    let redis = Redis::start_tls(&pki, true).unwrap();
    let url = redis.tls_url().unwrap();
    // host:port (no scheme) + tls.* keys: TLS is implied.
    let hostport = url.trim_start_matches("rediss://").trim_end_matches('/');
    let base = [
        ("registry.redis.serverAddr", hostport),
        TIMINGS[0],
        TIMINGS[1],
    ];
    let c = pki.config(SECTION, Trust::CaWithClientCert, &base);
    serves_over_tls(RedisRegistry::connect(&c).await, "tls-redis-mtls").await;

    // No client certificate: the server refuses the connection.
    let at = [("registry.redis.serverAddr", url.as_str())];
    let e = tls_refusal(RedisRegistry::connect(&pki.config(SECTION, Trust::Ca, &at)).await).await;
    assert!(e.contains(hostport), "the error names the server: {e}");
}
