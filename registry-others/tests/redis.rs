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
        .set("registry.redis.commandTimeout", "1s")
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

/// How many SCANs the server has run.
async fn scans(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_scan:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// Issue #13 item 3: a burst of 500 pub/sub messages costs a few scans per second, not
/// one full SCAN per message, and the burst's last change still reaches the watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pubsub_burst_is_coalesced_into_a_few_scans_per_second() {
    init_logs();
    let r = Redis::start().expect("redis");
    // A long rescan period: the scans counted are the messages'.
    let reg = RedisRegistry::connect(&config(
        &r.addr(),
        &[
            ("registry.redis.ttl", "60s"),
            ("registry.redis.refreshPeriod", "20s"),
        ],
    ))
    .await
    .unwrap();
    let mut w = reg.watch("burst").await.unwrap();
    assert!(addrs(&w.next().await.unwrap()).is_empty());
    let mut conn = raw(&r.url()).await;
    let chan = meshline_registry_others::redis::channel("burst");
    let before = scans(&mut conn).await;
    let started = std::time::Instant::now();
    for i in 0..500u32 {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&chan)
            .arg(format!("10.1.{}.{}:8091-register", i / 250, i % 250))
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    // The last change of the burst: a key, then its message.
    let last = inst("10.1.9.9:8091");
    let _: () = redis::cmd("SET")
        .arg(instance_key("burst", &last))
        .arg("1@test")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: i64 = redis::cmd("PUBLISH")
        .arg(&chan)
        .arg("10.1.9.9:8091-register")
        .query_async(&mut conn)
        .await
        .unwrap();
    wait_for(
        &mut w,
        Duration::from_secs(5),
        "the burst's last change",
        |s| addrs(s) == vec!["10.1.9.9:8091"],
    )
    .await;
    let elapsed = started.elapsed();
    let ran = scans(&mut conn).await - before;
    // One per 200 ms at most, plus the first and the last.
    let allowed = elapsed.as_millis() as u64 / 200 + 3;
    eprintln!("{ran} scans for 501 messages in {elapsed:?} (allowed {allowed})");
    assert!(
        ran <= allowed,
        "{ran} scans for 501 messages in {elapsed:?}"
    );
    reg.close().await.unwrap();
}

/// Issue #13 item 2: at `trace`, dependencies included, a run that logs in with a
/// password, fails to log in with a wrong one and reconnects after a server restart
/// never prints either password. A current-thread runtime, so every task logs into the
/// capture.
#[tokio::test]
async fn passwords_never_reach_the_log_even_at_trace() {
    const SECRET: &str = "Redis-Secret-3c7f1";
    const WRONG: &str = "Redis-Wrong-8e2b6";
    let mut r = Redis::start_with_password(SECRET).expect("redis");
    // The redis crate logs through `log`: forward it to tracing (and so to the
    // capture) at every level. Another test may have installed the bridge already.
    let _ = tracing_log::LogTracer::init();
    tracing_log::log::set_max_level(tracing_log::log::LevelFilter::Trace);
    let buf = meshline_testkit::watch::LogBuf::default();
    let guard = buf.capture_at(tracing::Level::TRACE);
    let addr = r.addr();
    let creds = |p: &'static str| config(&addr, &[("registry.redis.password", p)]);
    let reg = RedisRegistry::connect(&creds(SECRET)).await.unwrap();
    reg.register("secret", &inst("10.9.9.1:8091"))
        .await
        .unwrap();
    let mut w = reg.watch("secret").await.unwrap();
    w.next().await.unwrap();
    let err = RedisRegistry::connect(&creds(WRONG)).await.unwrap_err();
    r.restart().unwrap();
    // Reconnected and authenticated again: a new registration goes through and the
    // watch sees it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while reg
        .register("secret", &inst("10.9.9.2:8091"))
        .await
        .is_err()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no reconnect within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_for(
        &mut w,
        Duration::from_secs(10),
        "both after the restart",
        |s| addrs(s).len() == 2,
    )
    .await;
    let cfg_debug = format!("{:?}", creds(SECRET));
    let reg_debug = format!("{reg:?}");
    reg.close().await.unwrap();
    assert!(
        tracing::enabled!(tracing::Level::TRACE),
        "the capture runs at trace"
    );
    drop(guard);
    let text = buf.text();
    for s in [SECRET, WRONG] {
        assert!(!text.contains(s), "a password is in the log");
        assert!(!err.to_string().contains(s), "a password is in the error");
        assert!(
            !cfg_debug.contains(s),
            "a password is in the config's Debug"
        );
        assert!(
            !reg_debug.contains(s),
            "a password is in the client's Debug"
        );
    }
}

/// Issue #13 item 3: 50 garbage keys of 8 KiB each, scanned again and again, and
/// 1 MiB garbage messages are a few short lines (each key was a whole line per scan,
/// each message a whole line). A current-thread runtime, so the watch task logs into
/// the capture.
#[tokio::test]
async fn malformed_keys_and_messages_log_short_rate_limited_lines() {
    let r = Redis::start().expect("redis");
    let mut conn = raw(&r.url()).await;
    let prefix = meshline_registry_others::redis::key_prefix("junk");
    for i in 0..50 {
        let _: () = redis::cmd("SET")
            .arg(format!("{prefix}{i}{}", "x".repeat(8192)))
            .arg("1@test")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let buf = meshline_testkit::watch::LogBuf::default();
    let guard = buf.capture();
    let reg = RedisRegistry::connect(&config(
        &r.addr(),
        &[("registry.empty-protection", "false")],
    ))
    .await
    .unwrap();
    for _ in 0..5 {
        assert!(reg.lookup("junk").await.unwrap().is_empty());
    }
    let mut w = reg.watch("junk").await.unwrap();
    w.next().await.unwrap();
    let chan = meshline_registry_others::redis::channel("junk");
    for _ in 0..5 {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&chan)
            .arg("y".repeat(1 << 20))
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    reg.close().await.unwrap();
    drop(guard);
    let text = buf.text();
    let malformed = text.lines().filter(|l| l.contains("malformed")).count();
    assert_eq!(malformed, 1, "{}", &text[..text.len().min(3000)]);
    assert!(text.len() < 8192, "{} bytes logged", text.len());
}
