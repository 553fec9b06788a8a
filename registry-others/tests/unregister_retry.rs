//! Issue #13 item 4, "no lost or zombie registrations", for Redis (a real server), Consul
//! and Eureka (the testkit doubles): an unregister the registry refuses returns the
//! error, the keeper stops renewing the entry at once, the removal is retried in the
//! background until the registry takes it, and `close` removes what is still pending.
//!
//! Each registry keeps the entry alive far longer than the bounds here (a 60 s key TTL,
//! a Consul service reaped 2 min after its check turned critical, a 60 s Eureka lease),
//! so only our own retry can make it go in time.

mod common;

use std::time::{Duration, Instant};

use common::*;
use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Config, RegistryService};
use meshline_registry_others::redis::instance_key;
use meshline_registry_others::{ConsulRegistry, EurekaRegistry, RedisRegistry};
use meshline_testkit::{ConsulDouble, ConsulDoubleOptions, EurekaDouble, Redis};

/// How long after a removal first failed the background retry is sure to have tried
/// again, once the registry takes deletes again at `failed_for` after the failure.
///
/// `Lifecycle::retry_removal` waits 200 ms, doubling up to 30 s, each delay jittered
/// into its upper half: every delay is at most 200 ms plus twice the time already
/// spent, so the first attempt after `failed_for` starts by `3 * failed_for + 200 ms`.
/// Add the attempt itself (`op_timeout`, the backend's request timeout) and 1 s of
/// scheduling slack on a loaded 2-core machine.
fn retry_bound(failed_for: Duration, op_timeout: Duration) -> Duration {
    (failed_for * 3 + Duration::from_millis(200)).min(Duration::from_secs(30))
        + op_timeout
        + Duration::from_secs(1)
}

// ---------------------------------------------------------------------------- Redis

const REDIS_REFRESH: Duration = Duration::from_millis(200);
const REDIS_TIMEOUT: Duration = Duration::from_secs(1);
const REDIS_USER: &str = "meshline-unreg";
const REDIS_PASS: &str = "unreg-pass-4c1d";

async fn redis_raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("raw redis connection")
}

/// `ACL SETUSER <REDIS_USER> <rules>` on the admin connection.
async fn acl(admin: &mut redis::aio::MultiplexedConnection, rules: &[&str]) {
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg(REDIS_USER)
        .arg(rules)
        .query_async::<()>(admin)
        .await
        .unwrap_or_else(|e| panic!("ACL SETUSER {rules:?}: {e}"));
}

async fn exists(admin: &mut redis::aio::MultiplexedConnection, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query_async::<i64>(admin)
        .await
        .unwrap()
        == 1
}

async fn pttl(admin: &mut redis::aio::MultiplexedConnection, key: &str) -> Duration {
    let ms: i64 = redis::cmd("PTTL")
        .arg(key)
        .query_async(admin)
        .await
        .unwrap();
    assert!(ms > 0, "{key} has no TTL ({ms})");
    Duration::from_millis(ms as u64)
}

/// A client logging in as `REDIS_USER` (whose rights the test changes with ACLs): 60 s
/// TTL, refreshed every 200 ms.
async fn redis_client(r: &Redis) -> RedisRegistry {
    let cfg = ConfigLoader::new()
        .set("registry.type", "redis")
        .set("registry.redis.serverAddr", r.addr())
        .set("registry.redis.username", REDIS_USER)
        .set("registry.redis.password", REDIS_PASS)
        .set("registry.redis.ttl", "60s")
        .set("registry.redis.refreshPeriod", "200ms")
        .set("registry.redis.commandTimeout", "1s")
        .load()
        .unwrap();
    RedisRegistry::connect(&cfg).await.unwrap()
}

/// Redis refuses our `DEL` (an ACL takes the right away, the rest of the connection
/// works): unregister returns Redis's refusal, the refresh loop stops renewing the key
/// (its TTL runs down instead of going back to 60 s every 200 ms), and once `DEL` is
/// allowed again the key is gone within the retry bound, long before its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_refused_del_is_retried_and_the_key_no_longer_refreshed() {
    init_logs();
    let r = Redis::start().expect("redis");
    let mut admin = redis_raw(&r.url()).await;
    let pass = format!(">{REDIS_PASS}");
    acl(&mut admin, &["on", &pass, "~*", "&*", "+@all"]).await;
    let reg = redis_client(&r).await;
    let me = inst("10.7.7.1:8091");
    let key = instance_key("default", &me);
    reg.register("default", &me).await.unwrap();
    assert!(exists(&mut admin, &key).await);

    acl(&mut admin, &["-del"]).await;
    let failed_at = Instant::now();
    let err = reg
        .unregister("default", &me)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no permissions to run the 'del' command"),
        "not Redis's refusal: {err}"
    );

    // Not renewed any more: over five refresh periods the TTL only runs down.
    let before = pttl(&mut admin, &key).await;
    let span = REDIS_REFRESH * 5;
    tokio::time::sleep(span).await;
    let after = pttl(&mut admin, &key).await;
    assert!(
        after + span - REDIS_REFRESH <= before,
        "the key was refreshed after its unregister: TTL {before:?} -> {after:?} over {span:?}"
    );
    assert!(
        exists(&mut admin, &key).await,
        "DEL is refused: still there"
    );

    acl(&mut admin, &["+del"]).await;
    let within = retry_bound(failed_at.elapsed(), REDIS_TIMEOUT);
    let t = Instant::now();
    eventually(within, "the retried DEL", || {
        let mut admin = admin.clone();
        let key = key.clone();
        async move { !exists(&mut admin, &key).await }
    })
    .await;
    eprintln!(
        "redis: key deleted {:?} after DEL was allowed again",
        t.elapsed()
    );
    // And it stays gone: nothing writes it again.
    tokio::time::sleep(REDIS_REFRESH * 3).await;
    assert!(!exists(&mut admin, &key).await, "written again");
    reg.close().await.unwrap();
}

/// A key whose `DEL` failed is still ours to remove: `close` deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_close_deletes_a_key_whose_unregister_failed() {
    init_logs();
    let r = Redis::start().expect("redis");
    let mut admin = redis_raw(&r.url()).await;
    let pass = format!(">{REDIS_PASS}");
    acl(&mut admin, &["on", &pass, "~*", "&*", "+@all"]).await;
    let reg = redis_client(&r).await;
    let me = inst("10.7.7.2:8091");
    let key = instance_key("default", &me);
    reg.register("default", &me).await.unwrap();
    acl(&mut admin, &["-del"]).await;
    reg.unregister("default", &me).await.unwrap_err();
    acl(&mut admin, &["+del"]).await;
    reg.close().await.unwrap();
    assert!(!exists(&mut admin, &key).await, "close left the key");
}

// --------------------------------------------------------------------------- Consul

/// The Consul backend's request timeout (`consul::agent::REQUEST_TIMEOUT`).
const CONSUL_TIMEOUT: Duration = Duration::from_secs(5);
const CONSUL_TTL: Duration = Duration::from_secs(3);
const DEREGISTER: &str = "/v1/agent/service/deregister/";

fn consul_config(consul: &ConsulDouble) -> Config {
    ConfigLoader::new()
        .set("registry.type", "consul")
        .set("registry.consul.serverAddr", consul.server_addr())
        .set("registry.consul.ttl", "3s")
        .set("registry.consul.deregisterCriticalServiceAfter", "2m")
        .load()
        .unwrap()
}

async fn get_json(url: &str) -> serde_json::Value {
    let body = reqwest::get(url).await.unwrap().text().await.unwrap();
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{url}: {e}: {body}"))
}

/// The service IDs the agent holds, passing or not.
async fn agent_services(consul: &ConsulDouble) -> Vec<String> {
    let v = get_json(&format!("{}/v1/agent/services", consul.url())).await;
    let mut ids: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    ids.sort();
    ids
}

/// The agent refuses our deregistration (500): unregister returns the error, the
/// keeper stops passing the TTL check (it turns critical one TTL later instead of
/// being passed every TTL/3), and once the agent takes deregistrations again the
/// service is gone from the agent within the retry bound, long before Consul would
/// reap it (2 min critical).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consul_a_refused_deregistration_is_retried_and_the_check_no_longer_passed() {
    init_logs();
    let consul = ConsulDouble::start(ConsulDoubleOptions::default()).unwrap();
    let reg = ConsulRegistry::connect(&consul_config(&consul))
        .await
        .unwrap();
    let me = inst("10.7.7.3:8091");
    let id = "default-10.7.7.3:8091";
    reg.register("default", &me).await.unwrap();
    assert_eq!(agent_services(&consul).await, [id]);

    consul.fail("PUT", DEREGISTER, 500).unwrap();
    let failed_at = Instant::now();
    let err = reg
        .unregister("default", &me)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("500"), "not the agent's refusal: {err}");

    // The keeper passes every TTL/3; the check turns critical only when nobody does.
    let passing = format!("{}/v1/health/service/default?passing", consul.url());
    eventually(
        CONSUL_TTL + Duration::from_secs(2),
        "the check to turn critical",
        || {
            let passing = passing.clone();
            async move { get_json(&passing).await.as_array().unwrap().is_empty() }
        },
    )
    .await;
    assert_eq!(agent_services(&consul).await, [id], "refused: still there");

    consul.clear_faults();
    let within = retry_bound(failed_at.elapsed(), CONSUL_TIMEOUT);
    let t = Instant::now();
    eventually(within, "the retried deregistration", || async {
        agent_services(&consul).await.is_empty()
    })
    .await;
    eprintln!(
        "consul: deregistered {:?} after the agent took it",
        t.elapsed()
    );
    reg.close().await.unwrap();
}

/// A service whose deregistration failed is still ours to remove: `close` does it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consul_close_deregisters_a_service_whose_unregister_failed() {
    init_logs();
    let consul = ConsulDouble::start(ConsulDoubleOptions::default()).unwrap();
    let reg = ConsulRegistry::connect(&consul_config(&consul))
        .await
        .unwrap();
    let me = inst("10.7.7.4:8091");
    reg.register("default", &me).await.unwrap();
    consul.fail("PUT", DEREGISTER, 500).unwrap();
    reg.unregister("default", &me).await.unwrap_err();
    consul.clear_faults();
    reg.close().await.unwrap();
    assert!(
        agent_services(&consul).await.is_empty(),
        "close left the service"
    );
}

// --------------------------------------------------------------------------- Eureka

/// The Eureka backend's request bound: 3 s connect timeout, answered at once by the
/// double.
const EUREKA_TIMEOUT: Duration = Duration::from_secs(3);
const EUREKA_RENEWAL: Duration = Duration::from_millis(500);

fn eureka_config(eureka: &EurekaDouble) -> Config {
    ConfigLoader::new()
        .set("registry.type", "eureka")
        .set("registry.eureka.serviceUrl", eureka.service_url())
        .set("registry.eureka.renewalInterval", "500ms")
        .set("registry.eureka.leaseDuration", "60s")
        .set("registry.eureka.refreshInterval", "200ms")
        .load()
        .unwrap()
}

/// The instance as the server holds it (`None` once it is gone).
async fn eureka_instance(eureka: &EurekaDouble, id: &str) -> Option<serde_json::Value> {
    let url = format!("{}/apps/DEFAULT/{id}", eureka.service_url());
    let r = reqwest::Client::new()
        .get(&url)
        .header("Accept", "application/json")
        .send()
        .await
        .unwrap();
    if r.status() == reqwest::StatusCode::NOT_FOUND {
        return None;
    }
    assert!(r.status().is_success(), "{url}: {}", r.status());
    Some(serde_json::from_str(&r.text().await.unwrap()).unwrap())
}

async fn last_renewal(eureka: &EurekaDouble, id: &str) -> u64 {
    let v = eureka_instance(eureka, id).await.expect("instance there");
    v.pointer("/instance/leaseInfo/lastRenewalTimestamp")
        .and_then(|t| t.as_u64())
        .unwrap_or_else(|| panic!("no lastRenewalTimestamp in {v}"))
}

/// The server refuses our cancel (500): unregister returns the error, the heartbeat
/// stops renewing the lease, and once the server takes cancels again the instance is
/// gone within the retry bound, long before its 60 s lease would run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eureka_a_refused_cancel_is_retried_and_the_lease_no_longer_renewed() {
    init_logs();
    let eureka = EurekaDouble::start(Default::default()).unwrap();
    let reg = EurekaRegistry::connect(&eureka_config(&eureka))
        .await
        .unwrap();
    let me = inst("10.7.7.5:8091");
    let id = "10.7.7.5:default:8091";
    reg.register("default", &me).await.unwrap();
    // Heartbeats run: the lease is renewed.
    let first = last_renewal(&eureka, id).await;
    eventually(EUREKA_RENEWAL * 4, "a heartbeat", || async {
        last_renewal(&eureka, id).await > first
    })
    .await;

    eureka.fail("DELETE", "/eureka/apps/", 500).unwrap();
    let failed_at = Instant::now();
    let err = reg
        .unregister("default", &me)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("500"), "not the server's refusal: {err}");

    // No heartbeat over four renewal intervals (one may have been in flight).
    let span = EUREKA_RENEWAL * 4;
    tokio::time::sleep(EUREKA_RENEWAL).await;
    let before = last_renewal(&eureka, id).await;
    tokio::time::sleep(span).await;
    assert_eq!(
        last_renewal(&eureka, id).await,
        before,
        "the lease was renewed after its unregister"
    );

    eureka.clear_faults();
    let within = retry_bound(failed_at.elapsed(), EUREKA_TIMEOUT);
    let t = Instant::now();
    eventually(within, "the retried cancel", || async {
        eureka_instance(&eureka, id).await.is_none()
    })
    .await;
    eprintln!(
        "eureka: cancelled {:?} after the server took it",
        t.elapsed()
    );
    reg.close().await.unwrap();
}

/// An instance whose cancel failed is still ours to remove: `close` cancels it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eureka_close_cancels_an_instance_whose_unregister_failed() {
    init_logs();
    let eureka = EurekaDouble::start(Default::default()).unwrap();
    let reg = EurekaRegistry::connect(&eureka_config(&eureka))
        .await
        .unwrap();
    let me = inst("10.7.7.6:8091");
    reg.register("default", &me).await.unwrap();
    eureka.fail("DELETE", "/eureka/apps/", 500).unwrap();
    reg.unregister("default", &me).await.unwrap_err();
    eureka.clear_faults();
    reg.close().await.unwrap();
    assert!(
        eureka_instance(&eureka, "10.7.7.6:default:8091")
            .await
            .is_none(),
        "close left the instance"
    );
}
