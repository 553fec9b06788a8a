//! RedisRegistry against a real Redis started by meshline-testkit.

mod common;

use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use meshline_registry_core::{Config, RegistryService};
use meshline_registry_others::RedisRegistry;
use meshline_registry_others::redis::instance_key;
use meshline_testkit::Redis;

const TTL: Duration = Duration::from_secs(2);

fn config(addr: &str, empty_protection: bool) -> Config {
    let mut c = Config::default();
    c.registry.kind = "redis".into();
    c.registry.redis.server_addr = addr.to_string();
    c.registry.redis.ttl = TTL;
    c.registry.redis.refresh_period = Duration::from_millis(500);
    c.registry.redis.timeout = Duration::from_secs(1);
    c.registry.empty_protection = empty_protection;
    c
}

async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("raw redis connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_lookup_watch_unregister_round_trip() {
    init_logs();
    let r = Redis::start().expect("redis");
    let server = RedisRegistry::connect(&config(&r.addr(), false))
        .await
        .unwrap();
    let client = RedisRegistry::connect(&config(&r.addr(), false))
        .await
        .unwrap();
    assert_eq!(client.kind(), "redis");
    let mut w = client.watch("default").await.unwrap();
    assert!(w.next().await.unwrap().is_empty());

    let a = inst("127.0.0.1:8091");
    let b = inst("[::1]:8092");
    server.register("default", &a).await.unwrap();
    server.register("default", &b).await.unwrap();
    wait_for(&mut w, Duration::from_secs(5), "a and b", |s| s.len() == 2).await;
    let found = client.lookup("default").await.unwrap();
    assert_eq!(found.len(), 2);
    assert!(found.contains(&a) && found.contains(&b));
    // Refreshed before expiry: still there after several TTLs.
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(client.lookup("default").await.unwrap().len(), 2);

    server.unregister("default", &a).await.unwrap();
    let s = wait_for(&mut w, Duration::from_secs(5), "only b", |s| s.len() == 1).await;
    assert_eq!(addrs(&s), vec!["[::1]:8092"]);
    server.unregister("default", &b).await.unwrap();
    wait_for(&mut w, Duration::from_secs(5), "empty", |s| s.is_empty()).await;

    server.register("default", &a).await.unwrap();
    wait_for(&mut w, Duration::from_secs(5), "a again", |s| s.len() == 1).await;
    server.close().await.unwrap();
    wait_for(&mut w, Duration::from_secs(5), "empty after close", |s| {
        s.is_empty()
    })
    .await;
    assert!(server.register("default", &a).await.is_err());
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seata_layout_both_ways_and_garbage_is_skipped() {
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
    // Another cluster whose name starts with ours, and garbage.
    let _: () = redis::cmd("SET")
        .arg("registry.redis.default_x_10.9.9.9:8091")
        .arg("1@x")
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("registry.redis.default_garbage")
        .arg("1@x")
        .query_async(&mut raw)
        .await
        .unwrap();

    let reg = RedisRegistry::connect(&config(&r.addr(), true))
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
    // Garbage on the channel is harmless.
    let _: i64 = redis::cmd("PUBLISH")
        .arg("registry.redis.default")
        .arg("}{")
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
async fn survives_kill_9_of_the_server() {
    init_logs();
    let r = Redis::start().expect("redis");
    let server = RedisRegistry::connect(&config(&r.addr(), true))
        .await
        .unwrap();
    let client = RedisRegistry::connect(&config(&r.addr(), true))
        .await
        .unwrap();
    let me = inst("10.1.1.1:8091");
    server.register("default", &me).await.unwrap();
    let mut w = client.watch("default").await.unwrap();
    wait_for(&mut w, Duration::from_secs(5), "registered", |s| {
        s.len() == 1
    })
    .await;

    // No persistence: the restarted Redis is empty; our refresher writes the key again.
    let r = survive_outage(&mut w, r, Duration::from_secs(5), Duration::from_secs(15)).await;
    let raw = raw(&r.url()).await;
    let key = instance_key("default", &me);
    eventually(Duration::from_secs(10), "key written again", || {
        let mut raw = raw.clone();
        let key = key.clone();
        async move {
            redis::cmd("EXISTS")
                .arg(&key)
                .query_async::<i64>(&mut raw)
                .await
                .map(|n| n == 1)
                .unwrap_or(false)
        }
    })
    .await;
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(client.lookup("default").await.unwrap(), vec![me.clone()]);
    assert_eq!(addrs(&w.current()), vec!["10.1.1.1:8091"]);
    server
        .register("default", &inst("10.1.1.2:8091"))
        .await
        .unwrap();
    wait_for(&mut w, Duration::from_secs(5), "new member", |s| {
        s.len() == 2
    })
    .await;
    server.close().await.unwrap();
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_registrant_disappears_within_the_ttl() {
    init_logs();
    let r = Redis::start().expect("redis");
    let stable = RedisRegistry::connect(&config(&r.addr(), true))
        .await
        .unwrap();
    let doomed = RedisRegistry::connect(&config(&r.addr(), true))
        .await
        .unwrap();
    let watcher = RedisRegistry::connect(&config(&r.addr(), true))
        .await
        .unwrap();
    stable
        .register("default", &inst("10.3.3.1:1"))
        .await
        .unwrap();
    doomed
        .register("default", &inst("10.3.3.2:1"))
        .await
        .unwrap();
    let mut w = watcher.watch("default").await.unwrap();
    wait_for(&mut w, Duration::from_secs(5), "both", |s| s.len() == 2).await;
    assert_crash_removed_within(&mut w, "redis", TTL + Duration::from_secs(1), || {
        doomed.abandon();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_and_db_are_applied_and_servers_fail_over() {
    init_logs();
    let r = Redis::start_with_password("s3cret").expect("redis");
    // A dead address first: the client moves on to the live one.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap().to_string();
    drop(dead);
    let mut cfg = config(&format!("{dead_addr},{}", r.addr()), true);
    cfg.registry.redis.password = Some("s3cret".into());
    cfg.registry.redis.db = 3;
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

    // Wrong password: connect fails with a clear error, no panic.
    let mut bad = config(&r.addr(), true);
    bad.registry.redis.password = Some("wrong".into());
    let err = RedisRegistry::connect(&bad).await.unwrap_err();
    assert!(!err.to_string().is_empty());
    reg.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_registry_ends_its_tasks_and_removes_its_key() {
    init_logs();
    let r = Redis::start().expect("redis");
    let mut long_ttl = config(&r.addr(), false);
    long_ttl.registry.redis.ttl = Duration::from_secs(30);
    let doomed = RedisRegistry::connect(&long_ttl).await.unwrap();
    let watcher = RedisRegistry::connect(&config(&r.addr(), false))
        .await
        .unwrap();
    doomed
        .register("default", &inst("10.8.8.8:1"))
        .await
        .unwrap();
    let mut own = doomed.watch("default").await.unwrap();
    let mut w = watcher.watch("default").await.unwrap();
    wait_for(&mut w, Duration::from_secs(5), "registered", |s| {
        s.len() == 1
    })
    .await;
    drop(doomed);
    wait_for(&mut w, Duration::from_secs(5), "removed on drop", |s| {
        s.is_empty()
    })
    .await;
    own.next().await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(5), own.next()).await;
    assert!(
        matches!(end, Ok(Err(_))),
        "watch of a dropped registry must end: {end:?}"
    );
    watcher.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_written_without_publish_is_found_by_the_periodic_rescan() {
    init_logs();
    let r = Redis::start().expect("redis");
    let reg = RedisRegistry::connect(&config(&r.addr(), true))
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
    let text = RedisRegistry::connect(&config(&server, true))
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
