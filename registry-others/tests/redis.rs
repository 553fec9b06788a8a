//! RedisRegistry against a real Redis started by meshline-testkit: the conformance
//! suite (with its fault behaviours), then what is Redis's own (Seata's key and channel
//! layout, password and db, the rescan that finds keys whose message was lost).

mod common;

use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use meshline_registry_core::{Config, Instance, RegistryService};
use meshline_registry_others::RedisRegistry;
use meshline_registry_others::redis::instance_key;
use meshline_testkit::Redis;
use meshline_testkit::conformance::{
    Expiry, Garbage, Harness, Lifetime, RefuseRemoval, SeataLayout, Secrets, Unreachable,
};

const TTL: Duration = Duration::from_secs(2);

/// A config for `addr`: 2 s TTL, refresh and rescan every 500 ms, 1 s timeout, empty
/// protection on; then `extra` keys.
fn config(addr: &str, extra: &[(&str, &str)]) -> Config {
    let base = [
        ("registry.type", "redis"),
        ("registry.redis.serverAddr", addr),
        ("registry.redis.ttl", "2s"),
        ("registry.redis.refreshPeriod", "500ms"),
        ("registry.redis.commandTimeout", "1s"),
        ("registry.empty-protection", "true"),
    ];
    meshline_testkit::config_of(&base, extra)
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

/// A Redis that requires [`SECRET`]; the redis crate's own `log` lines are forwarded
/// to tracing, so the capture sees them.
async fn secret_harness() -> RedisHarness {
    // Another test may have installed the bridge already.
    let _ = tracing_log::LogTracer::init();
    tracing_log::log::set_max_level(tracing_log::log::LevelFilter::Trace);
    RedisHarness {
        redis: Redis::start_with_password(SECRET).expect("redis"),
    }
}

const SECRET: &str = "Redis-Secret-3c7f1";
/// The refresh period of the removal client.
const REFRESH: Duration = Duration::from_millis(200);

meshline_testkit::conformance_harness!(RedisHarness {
    registry: RedisRegistry,
    server: redis,
    lifetime: Lifetime::set("registry.redis.ttl", "2s", "60s", TTL),
    resync_within: Duration::from_secs(15),
    config: |h, extra| config(&h.redis.addr(), extra),
    // SETEX every 500 ms with a 2 s TTL: the key outlives the crash by 1.5-2 s; Redis
    // expires keys lazily and in its 100 ms cycle, and watchers rescan every 500 ms.
    expiry: Expiry::after(TTL, Duration::from_millis(500)),
});

impl Garbage for RedisHarness {
    async fn put_garbage(&self, cluster: &str, round: u32) {
        let mut raw = raw(&self.redis.url()).await;
        let prefix = format!("registry.redis.{cluster}");
        let keys = match round {
            0 => ["garbage", "10.0.0.9:0"],
            _ => ["not an address:1", "10.0.0.9:70000"],
        };
        for k in keys {
            set(&mut raw, format!("{prefix}_{k}"), "1@x").await;
        }
        // Garbage on the channel is harmless too.
        for msg in ["}{", "garbage-register", "10.0.0.9:0-register"] {
            publish(&mut raw, &prefix, msg).await;
        }
    }
}

/// `connect` checks the server (PING), within the 1 s command timeout.
impl Unreachable for RedisHarness {
    fn address_key(&self) -> &'static str {
        "registry.redis.serverAddr"
    }
    fn refused_within(&self) -> Duration {
        Duration::from_secs(3)
    }
}

/// An ACL takes `DEL` away from the default user (the rest of the connection works);
/// each key has a 60 s TTL, refreshed every 200 ms.
impl RefuseRemoval for RedisHarness {
    async fn removal_client(&self) -> RedisRegistry {
        let cfg = self.config(&[
            ("registry.redis.ttl", "60s"),
            ("registry.redis.refreshPeriod", "200ms"),
        ]);
        RedisRegistry::connect(&cfg).await.unwrap()
    }
    async fn refuse_removals(&mut self) {
        acl(&self.redis, "-del").await;
    }
    async fn allow_removals(&mut self) {
        acl(&self.redis, "+del").await;
    }
    async fn holds(&self, cluster: &str, member: &Instance) -> bool {
        let n: i64 = run(
            &mut raw(&self.redis.url()).await,
            redis::cmd("EXISTS").arg(instance_key(cluster, member)),
        )
        .await;
        n == 1
    }
    fn attempt_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn refusal(&self) -> &'static str {
        "no permissions to run the 'del' command"
    }
    /// Over five refresh periods the key's TTL only runs down.
    async fn not_renewed(&self, cluster: &str, member: &Instance) {
        let key = instance_key(cluster, member);
        let mut conn = raw(&self.redis.url()).await;
        let before = pttl(&mut conn, &key).await;
        let span = REFRESH * 5;
        tokio::time::sleep(span).await;
        let after = pttl(&mut conn, &key).await;
        assert!(
            after + span - REFRESH <= before,
            "the key was refreshed after its unregister: TTL {before:?} -> {after:?} over {span:?}"
        );
    }
}

async fn acl(redis: &Redis, rule: &str) {
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg(rule)
        .query_async::<()>(&mut raw(&redis.url()).await)
        .await
        .unwrap_or_else(|e| panic!("ACL SETUSER default {rule}: {e}"));
}

async fn pttl(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Duration {
    let ms: i64 = redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap();
    assert!(ms > 0, "{key} has no TTL ({ms})");
    Duration::from_millis(ms as u64)
}

impl Secrets for RedisHarness {
    fn secrets(&self) -> [&'static str; 2] {
        [SECRET, "Redis-Wrong-8e2b6"]
    }
    fn with_secret(&self, secret: &str) -> Config {
        self.config(&[("registry.redis.password", secret)])
    }
    fn refusal(&self) -> &'static str {
        "AuthenticationFailed"
    }
    /// The backend's registration after the login, the outage and the return (the
    /// redis crate logs nothing on these paths: its `log` lines are about credential
    /// providers and sentinels).
    fn logged(&self) -> &'static [&'static str] {
        &[
            "registered registry=\"redis\"",
            "registry unreachable; serving the last snapshot",
            "registry reachable again",
        ]
    }
}

/// Seata's `registry.redis.<cluster>_<ip>:<port>` keys.
impl SeataLayout for RedisHarness {
    async fn put_member(&self, cluster: &str, addr: &str) {
        set_ex(&self.redis, &format!("registry.redis.{cluster}_{addr}")).await;
    }
    /// Garbage in the layout, and a key of another application.
    async fn put_foreign(&self) {
        set_ex(&self.redis, "registry.redis.junk_not-an-address").await;
        set_ex(&self.redis, "session_10.0.0.4:8091").await;
    }
    fn address(&self) -> String {
        self.redis.addr()
    }
}

async fn set_ex(redis: &Redis, key: &str) {
    setex(&mut raw(&redis.url()).await, key, 60, "1@host").await;
}

meshline_testkit::conformance_tests!(harness() => round_trip, drop_ends_watches,
    crash_removed_within_ttl, outage_stale_resync, garbage_skipped, empty_protection,
    unreachable_is_named, refused_removal_retried, close_removes_a_refused_removal,
    close_meets_a_held_refusal, nearby_lists_other_clusters);
meshline_testkit::conformance_tests!(mod secrets: secret_harness() => secrets_never_shown);

async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("raw redis connection")
}

/// Runs a raw command on `conn`; a Redis error fails the test.
async fn run<T: redis::FromRedisValue>(
    conn: &mut redis::aio::MultiplexedConnection,
    cmd: &redis::Cmd,
) -> T {
    cmd.query_async(conn).await.unwrap()
}

/// `SETEX key secs value` through a raw client, as a Seata TC writes its key.
async fn setex(
    conn: &mut redis::aio::MultiplexedConnection,
    key: impl redis::ToRedisArgs,
    secs: u64,
    value: &str,
) {
    run::<()>(conn, redis::cmd("SETEX").arg(key).arg(secs).arg(value)).await
}

/// `SET key value` (no TTL) through a raw client.
async fn set(
    conn: &mut redis::aio::MultiplexedConnection,
    key: impl redis::ToRedisArgs,
    value: &str,
) {
    run::<()>(conn, redis::cmd("SET").arg(key).arg(value)).await
}

/// `PUBLISH channel message` through a raw client.
async fn publish(
    conn: &mut redis::aio::MultiplexedConnection,
    channel: &str,
    message: impl redis::ToRedisArgs,
) {
    run::<i64>(conn, redis::cmd("PUBLISH").arg(channel).arg(message)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seata_layout_both_ways() {
    init_logs();
    let r = Redis::start().expect("redis");
    let mut raw = raw(&r.url()).await;
    // What a Seata TC writes (SETEX + PUBLISH), through a raw client.
    for (key, secs, value) in [
        ("registry.redis.default_172.0.0.1:8091", 5, "4242@tc-host"),
        (
            "registry.redis.default_2000:0:0:0:1:2345:6789:abcd:8091",
            30,
            "4243@tc-host",
        ),
    ] {
        setex(&mut raw, key, secs, value).await;
    }
    // Another cluster whose name starts with ours.
    set(&mut raw, "registry.redis.default_x_10.9.9.9:8091", "1@x").await;

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
    setex(
        &mut raw,
        "registry.redis.default_10.0.0.5:8091",
        30,
        "4244@tc-host",
    )
    .await;
    publish(&mut raw, "registry.redis.default", "10.0.0.5:8091-register").await;
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
    let value: String = run(&mut raw, redis::cmd("GET").arg(key)).await;
    assert!(
        value.starts_with(&format!("{}@", std::process::id())),
        "{value}"
    );
    let ttl: i64 = run(&mut raw, redis::cmd("TTL").arg(key)).await;
    assert!(ttl > 0 && ttl <= TTL.as_secs() as i64, "ttl {ttl}");
    assert_eq!(
        next_message(&mut sub, "register message").await,
        "2000:0:0:0:1:2345:6789:abcd:8092-register"
    );
    reg.unregister("prod", &me).await.unwrap();
    assert_eq!(
        next_message(&mut sub, "unregister message").await,
        "2000:0:0:0:1:2345:6789:abcd:8092-unregister"
    );
    let gone: i64 = run(&mut raw, redis::cmd("EXISTS").arg(key)).await;
    assert_eq!(gone, 0);
    reg.close().await.unwrap();
}

/// The next message `sub` receives (`what`), within 2 s.
async fn next_message(sub: &mut redis::aio::PubSub, what: &str) -> String {
    let msg = tokio::time::timeout(Duration::from_secs(2), sub.on_message().next())
        .await
        .expect(what)
        .unwrap();
    msg.get_payload::<String>().unwrap()
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
    let n: i64 = run(
        &mut raw3,
        redis::cmd("EXISTS").arg(instance_key("default", &me)),
    )
    .await;
    assert_eq!(n, 1, "key must be in db 3");
    let mut raw0 = raw(&format!("redis://:s3cret@{}/0", r.addr())).await;
    let n: i64 = run(&mut raw0, &redis::cmd("DBSIZE")).await;
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
    setex(
        &mut raw,
        "registry.redis.default_10.0.0.9:8091",
        30,
        "1@lost-message",
    )
    .await;
    // refresh-period is 500 ms in these tests.
    wait_for(&mut w, Duration::from_secs(3), "found by rescan", |s| {
        s.len() == 1
    })
    .await;
    reg.close().await.unwrap();
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

/// A burst of 500 pub/sub messages costs a few scans per second, not
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
        publish(
            &mut conn,
            &chan,
            format!("10.1.{}.{}:8091-register", i / 250, i % 250),
        )
        .await;
    }
    // The last change of the burst: a key, then its message.
    let last = inst("10.1.9.9:8091");
    set(&mut conn, instance_key("burst", &last), "1@test").await;
    publish(&mut conn, &chan, "10.1.9.9:8091-register").await;
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

/// 50 garbage keys of 8 KiB each, scanned again and again, and
/// 1 MiB garbage messages are a few short lines (each key was a whole line per scan,
/// each message a whole line). A current-thread runtime, so the watch task logs into
/// the capture.
#[tokio::test]
async fn malformed_keys_and_messages_log_short_rate_limited_lines() {
    let r = Redis::start().expect("redis");
    let mut conn = raw(&r.url()).await;
    let prefix = meshline_registry_others::redis::key_prefix("junk");
    for i in 0..50 {
        set(
            &mut conn,
            format!("{prefix}{i}{}", "x".repeat(8192)),
            "1@test",
        )
        .await;
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
        publish(&mut conn, &chan, "y".repeat(1 << 20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    reg.close().await.unwrap();
    drop(guard);
    let text = buf.text();
    let malformed = text.lines().filter(|l| l.contains("malformed")).count();
    assert_eq!(malformed, 1, "{}", &text[..text.len().min(3000)]);
    assert!(text.len() < 8192, "{} bytes logged", text.len());
}
