//! RedisRegistry against a real Redis started by meshline-testkit: the conformance
//! suite, then what is Redis's own (Seata's key and channel layout, password and db,
//! the rescan that finds keys whose message was lost).

mod common;

use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Config, RegistryService};
use meshline_registry_others::RedisRegistry;
use meshline_registry_others::redis::instance_key;
use meshline_testkit::Redis;
use meshline_testkit::conformance::{Crash, Expiry, Garbage, Harness, Opts, Server};

const TTL: Duration = Duration::from_secs(2);

/// A config for `addr`: 2 s TTL, refresh and rescan every 500 ms, 1 s timeout, empty
/// protection on; then `extra` keys.
fn config(addr: &str, extra: &[(&str, &str)]) -> Config {
    let mut l = ConfigLoader::new()
        .set("registry.type", "redis")
        .set("registry.redis.serverAddr", addr)
        .set("registry.redis.ttl", "2s")
        .set("registry.redis.refreshPeriod", "500ms")
        .set("registry.redis.timeout", "1s")
        .set("registry.empty-protection", "true");
    for (k, v) in extra {
        l = l.set(*k, *v);
    }
    l.load().unwrap()
}

struct RedisHarness {
    redis: Redis,
}

async fn harness() -> RedisHarness {
    init_logs();
    RedisHarness {
        redis: Redis::start().expect("redis"),
    }
}

impl Harness for RedisHarness {
    type Registry = RedisRegistry;

    async fn connect(&self, o: Opts) -> RedisRegistry {
        let extra = o.keys("registry.redis.ttl", "2s", "60s");
        RedisRegistry::connect(&config(&self.redis.addr(), &extra))
            .await
            .unwrap()
    }
    fn server(&mut self) -> &mut dyn Server {
        &mut self.redis
    }
    fn ttl(&self) -> Duration {
        TTL
    }
    fn resync_within(&self) -> Duration {
        Duration::from_secs(15)
    }
}

impl Crash for RedisHarness {
    fn crash(&self, reg: RedisRegistry) {
        reg.abandon();
        drop(reg);
    }
    /// SETEX every 500 ms with a 2 s TTL: the key outlives the crash by 1.5-2 s;
    /// watchers rescan every 500 ms.
    fn expiry(&self) -> Expiry {
        Expiry {
            not_before: TTL / 2,
            within: TTL + Duration::from_millis(500) + Duration::from_secs(2),
        }
    }
}

impl Garbage for RedisHarness {
    async fn put_garbage(&self, cluster: &str, round: u32) {
        let mut raw = raw(&self.redis.url()).await;
        let prefix = format!("registry.redis.{cluster}");
        let keys = match round {
            0 => ["garbage", "10.0.0.9:0"],
            _ => ["not an address:1", "10.0.0.9:70000"],
        };
        for k in keys {
            let _: () = redis::cmd("SET")
                .arg(format!("{prefix}_{k}"))
                .arg("1@x")
                .query_async(&mut raw)
                .await
                .unwrap();
        }
        // Garbage on the channel is harmless too.
        for msg in ["}{", "garbage-register", "10.0.0.9:0-register"] {
            let _: i64 = redis::cmd("PUBLISH")
                .arg(&prefix)
                .arg(msg)
                .query_async(&mut raw)
                .await
                .unwrap();
        }
    }
}

meshline_testkit::conformance_tests!(harness() => round_trip, drop_ends_watches,
    crash_removed_within_ttl, outage_stale_resync, garbage_skipped, empty_protection);

async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("raw redis connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seata_layout_both_ways() {
    init_logs();
    let r = Redis::start().expect("redis");
    let mut raw = raw(&r.url()).await;
    // What a Seata TC writes (SETEX + PUBLISH), through a raw client.
    let _: () = redis::cmd("SETEX")
        .arg("registry.redis.default_172.0.0.1:8091")
        .arg(5)
        .arg("4242@tc-host")
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("SETEX")
        .arg("registry.redis.default_2000:0:0:0:1:2345:6789:abcd:8091")
        .arg(30)
        .arg("4243@tc-host")
        .query_async(&mut raw)
        .await
        .unwrap();
    // Another cluster whose name starts with ours.
    let _: () = redis::cmd("SET")
        .arg("registry.redis.default_x_10.9.9.9:8091")
        .arg("1@x")
        .query_async(&mut raw)
        .await
        .unwrap();

    let reg = RedisRegistry::connect(&config(&r.addr(), &[]))
        .await
        .unwrap();
    let mut w = reg.watch("default").await.unwrap();
    let s = w.next().await.unwrap();
    assert_eq!(
        addrs(&s),
        vec!["172.0.0.1:8091", "[2000::1:2345:6789:abcd]:8091"]
    );

    // A Seata TC registering later: SETEX then PUBLISH "<addr>-register".
    let _: () = redis::cmd("SETEX")
        .arg("registry.redis.default_10.0.0.5:8091")
        .arg(30)
        .arg("4244@tc-host")
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: i64 = redis::cmd("PUBLISH")
        .arg("registry.redis.default")
        .arg("10.0.0.5:8091-register")
        .query_async(&mut raw)
        .await
        .unwrap();
    let s = wait_for(&mut w, Duration::from_secs(2), "10.0.0.5", |s| s.len() == 3).await;
    assert!(addrs(&s).contains(&"10.0.0.5:8091".to_string()));

    // What we register is Seata's layout, read by raw clients.
    let mut sub = redis::Client::open(r.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    sub.subscribe("registry.redis.prod").await.unwrap();
    let me = inst("[2000::1:2345:6789:abcd]:8092");
    reg.register("prod", &me).await.unwrap();
    let key = "registry.redis.prod_2000:0:0:0:1:2345:6789:abcd:8092";
    assert_eq!(instance_key("prod", &me), key);
    let value: String = redis::cmd("GET")
        .arg(key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(
        value.starts_with(&format!("{}@", std::process::id())),
        "{value}"
    );
    let ttl: i64 = redis::cmd("TTL")
        .arg(key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(ttl > 0 && ttl <= TTL.as_secs() as i64, "ttl {ttl}");
    let msg = tokio::time::timeout(Duration::from_secs(2), sub.on_message().next())
        .await
        .expect("register message")
        .unwrap();
    assert_eq!(
        msg.get_payload::<String>().unwrap(),
        "2000:0:0:0:1:2345:6789:abcd:8092-register"
    );
    reg.unregister("prod", &me).await.unwrap();
    let msg = tokio::time::timeout(Duration::from_secs(2), sub.on_message().next())
        .await
        .expect("unregister message")
        .unwrap();
    assert_eq!(
        msg.get_payload::<String>().unwrap(),
        "2000:0:0:0:1:2345:6789:abcd:8092-unregister"
    );
    let gone: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(gone, 0);
    reg.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_and_db_are_applied_and_servers_fail_over() {
    init_logs();
    let r = Redis::start_with_password("s3cret").expect("redis");
    // A dead address first: the client moves on to the live one.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap().to_string();
    drop(dead);
    let cfg = config(
        &format!("{dead_addr},{}", r.addr()),
        &[
            ("registry.redis.password", "s3cret"),
            ("registry.redis.db", "3"),
        ],
    );
    let reg = RedisRegistry::connect(&cfg).await.unwrap();
    let me = inst("10.6.6.6:8091");
    reg.register("default", &me).await.unwrap();
    let mut raw3 = raw(&format!("redis://:s3cret@{}/3", r.addr())).await;
    let n: i64 = redis::cmd("EXISTS")
        .arg(instance_key("default", &me))
        .query_async(&mut raw3)
        .await
        .unwrap();
    assert_eq!(n, 1, "key must be in db 3");
    let mut raw0 = raw(&format!("redis://:s3cret@{}/0", r.addr())).await;
    let n: i64 = redis::cmd("DBSIZE").query_async(&mut raw0).await.unwrap();
    assert_eq!(n, 0, "db 0 untouched");
    let mut w = reg.watch("default").await.unwrap();
    assert_eq!(addrs(&w.next().await.unwrap()), vec!["10.6.6.6:8091"]);

    // Wrong password: connect fails with Redis's authentication error, naming the
    // server (not any error: a refused connection or a timeout would not do).
    let bad = config(&r.addr(), &[("registry.redis.password", "wrong")]);
    let err = RedisRegistry::connect(&bad).await.unwrap_err().to_string();
    eprintln!("wrong password: {err}");
    assert!(err.contains(&r.addr()), "{err}");
    assert!(
        err.contains("Password authentication failed - AuthenticationFailed"),
        "not the auth error: {err}"
    );
    // No password at all against a server that wants one: NOAUTH.
    let err = RedisRegistry::connect(&config(&r.addr(), &[]))
        .await
        .unwrap_err()
        .to_string();
    eprintln!("no password: {err}");
    assert!(err.contains("NOAUTH"), "not the auth error: {err}");
    reg.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_written_without_publish_is_found_by_the_periodic_rescan() {
    init_logs();
    let r = Redis::start().expect("redis");
    let reg = RedisRegistry::connect(&config(&r.addr(), &[]))
        .await
        .unwrap();
    let mut w = reg.watch("default").await.unwrap();
    assert!(w.next().await.unwrap().is_empty());
    // Let the watch subscribe and finish its first scan.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Pub/sub is at-most-once: a registration whose message was lost.
    let mut raw = raw(&r.url()).await;
    let _: () = redis::cmd("SETEX")
        .arg("registry.redis.default_10.0.0.9:8091")
        .arg(30)
        .arg("1@lost-message")
        .query_async(&mut raw)
        .await
        .unwrap();
    // refresh-period is 500 ms in these tests.
    wait_for(&mut w, Duration::from_secs(3), "found by rescan", |s| {
        s.len() == 1
    })
    .await;
    reg.close().await.unwrap();
}

/// `connect` checks the server (PING): a closed port fails it with the address and the
/// cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_an_error_naming_the_address_and_the_cause() {
    init_logs();
    let port = meshline_testkit::closed_port().unwrap();
    let server = format!("127.0.0.1:{port}");
    let t = std::time::Instant::now();
    let text = RedisRegistry::connect(&config(&server, &[]))
        .await
        .unwrap_err()
        .to_string();
    eprintln!("after {:?}: {text}", t.elapsed());
    assert!(
        text.starts_with(&format!("redis registry at {server} unavailable: ")),
        "{text}"
    );
    assert!(text.contains("Connection refused"), "{text}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}
