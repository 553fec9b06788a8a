//! Redis backend ([`RedisRegistry`]), Seata's `redis` layout.
//!
//! ## Layout
//!
//! - A member of cluster `<cluster>` is the key `registry.redis.<cluster>_<ip>:<port>`
//!   (Java's address form) written with `SETEX` (TTL `registry.redis.ttl`, default 5 s
//!   as Seata's) and refreshed every `registry.redis.refresh-period` (default 2 s, and
//!   never more than half the TTL). The value is `<pid>@<hostname>`, as Seata writes.
//! - Registering publishes `<ip>:<port>-register`, unregistering deletes the key and
//!   publishes `<ip>:<port>-unregister`, on the channel `registry.redis.<cluster>`.
//!
//! ## Lookup and watch
//!
//! Lookup is `SCAN MATCH registry.redis.<cluster>_*` (glob characters in the cluster
//! name escaped); the address is what follows `<cluster>_`. Keys whose rest still
//! contains `_` belong to another cluster (`a_b` when asked for `a`) and are ignored
//! (Seata's `split("_")[1]` gets this wrong); keys whose rest is not an address are
//! skipped with a warning naming the key.
//!
//! A watch `SUBSCRIBE`s to the channel and rescans on every message, and also
//! periodically, because pub/sub is at-most-once (anything published while we were
//! disconnected is lost, and a crashed registrant publishes nothing). The periodic
//! rescan runs every refresh period, and additionally just after the earliest key TTL
//! seen in the last scan runs out, so a registrant that died is dropped as soon as its
//! key expires. After any reconnect the watch re-subscribes and rescans before it
//! reports the registry as connected again. Every watch on a cluster shares that one
//! subscription; it ends (the pub/sub connection is closed) when the last [`Watch`] on
//! the cluster is dropped or the client closes.
//!
//! ## Servers
//!
//! `server-addr` takes `host:port[,host:port…]`. They must be the same logical Redis
//! (a primary and the replicas that may be promoted, or proxies in front of it): the
//! client uses the first that answers and moves to the next on connection errors or a
//! `READONLY` answer. `registry.redis.password`, `username` and `db` are applied to every
//! connection.
//!
//! ## Convergence (measured)
//!
//! `cargo run --release -p meshline-registry-others --features zookeeper,redis --example
//! zk_redis_convergence -- redis` starts a real server (meshline-testkit), registers
//! 200 instances one by one on one client and times each from the `register` call until
//! a second client's watch shows it, then crashes a registrant three times. On the
//! 2-core development machine (load average about 2 from other builds):
//!
//! | register -> watch (200) | p50 | p99 | max |
//! |---|---|---|---|
//! | redis | 1.65 ms | 2.82 ms | 5.64 ms |
//!
//! A crashed registrant (TTL 3 s, refresh 1 s) disappeared from watches after 2.51 s
//! three times: its key expires at most one TTL after its last refresh, and the watch
//! rescans 20 ms after the earliest expiry it saw. Details in `CONVERGENCE.md`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use meshline_registry_core::{
    Backoff, Config, Instance, Lifecycle, Registrations, RegistryError, RegistryService, Watch,
    WatchScope,
};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo};

use crate::common::{empty_policy, split_addrs};

mod settings;
pub use settings::RedisSettings;
const KIND: &str = "redis";
const PREFIX: &str = "registry.redis.";

/// The key prefix of `cluster`'s members: `registry.redis.<cluster>_`.
pub fn key_prefix(cluster: &str) -> String {
    format!("{PREFIX}{cluster}_")
}

/// The key of `instance` in `cluster` (Seata's layout).
pub fn instance_key(cluster: &str, instance: &Instance) -> String {
    format!("{}{}", key_prefix(cluster), instance.to_java_string())
}

/// The pub/sub channel of `cluster`: `registry.redis.<cluster>`.
pub fn channel(cluster: &str) -> String {
    format!("{PREFIX}{cluster}")
}

/// Escapes Redis glob characters so `text` matches only itself in `SCAN MATCH`.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[derive(Debug, PartialEq)]
enum Entry {
    Member(Instance),
    OtherCluster,
    Bad(String),
}

fn classify(prefix: &str, key: &[u8]) -> Entry {
    let Ok(key) = std::str::from_utf8(key) else {
        return Entry::Bad("key is not UTF-8".into());
    };
    let Some(rest) = key.strip_prefix(prefix) else {
        return Entry::OtherCluster;
    };
    if rest.contains('_') {
        return Entry::OtherCluster;
    }
    match Instance::parse(rest) {
        Ok(i) => Entry::Member(i),
        Err(e) => Entry::Bad(format!("not an address after the cluster prefix: {e}")),
    }
}

fn redis_err(server: &str, op: &str, e: redis::RedisError) -> RegistryError {
    RegistryError::backend(KIND, server, op.to_string(), e)
}

/// True when the connection should be dropped and the next server tried.
fn connection_broken(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || e.code() == Some("READONLY")
}

fn local_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("{}@{host}", std::process::id())
}

/// "no server answered: <why>", naming each server's failure when there are several.
fn no_server_answered(addrs: &[String], failures: &[(usize, impl std::fmt::Display)]) -> String {
    match failures {
        [] => "no server configured".to_string(),
        [(_, why)] => format!("no server answered: {why}"),
        many => {
            let each: Vec<String> = many
                .iter()
                .map(|(i, why)| format!("{}: {why}", addrs[*i]))
                .collect();
            format!("no server answered: {}", each.join("; "))
        }
    }
}

/// Connections to the configured servers, with failover between them.
struct Servers {
    clients: Vec<redis::Client>,
    addrs: Vec<String>,
    timeout: Duration,
    current: tokio::sync::Mutex<Option<(usize, MultiplexedConnection)>>,
    next: AtomicUsize,
}

impl Servers {
    fn new(config: &RedisSettings) -> Result<Self, RegistryError> {
        let addrs = split_addrs(&config.server_addr);
        if addrs.is_empty() {
            return Err(RegistryError::Config(
                "registry.redis.serverAddr is empty: give host:port, e.g. 127.0.0.1:6379".into(),
            ));
        }
        let mut clients = Vec::with_capacity(addrs.len());
        for a in &addrs {
            let addr = a
                .strip_prefix("redis://")
                .unwrap_or(a)
                .trim_end_matches('/');
            let inst = Instance::parse(addr).map_err(|e| {
                RegistryError::Config(format!("registry.redis.serverAddr entry `{a}`: {e}"))
            })?;
            let mut redis_info = RedisConnectionInfo::default().set_db(config.db);
            if let Some(u) = &config.username {
                redis_info = redis_info.set_username(u);
            }
            if let Some(p) = &config.password {
                redis_info = redis_info.set_password(p);
            }
            let info = ConnectionAddr::Tcp(inst.host().to_string(), inst.port())
                .into_connection_info()
                .map_err(|e| redis_err(a, "configure", e))?
                .set_redis_settings(redis_info);
            clients.push(redis::Client::open(info).map_err(|e| redis_err(a, "configure", e))?);
        }
        Ok(Servers {
            clients,
            addrs,
            timeout: config.timeout.max(Duration::from_millis(100)),
            current: tokio::sync::Mutex::new(None),
            next: AtomicUsize::new(0),
        })
    }

    /// The shared command connection, opening one (trying each server in turn) if needed.
    async fn conn(&self) -> Result<(usize, MultiplexedConnection), RegistryError> {
        let mut cur = self.current.lock().await;
        if let Some((i, c)) = cur.as_ref() {
            return Ok((*i, c.clone()));
        }
        let n = self.clients.len();
        let start = self.next.load(Ordering::Relaxed);
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let mut failures = Vec::new();
        for k in 0..n {
            let i = (start + k) % n;
            match self.clients[i]
                .get_multiplexed_async_connection_with_config(&cfg)
                .await
            {
                Ok(c) => {
                    if !failures.is_empty() {
                        tracing::info!(registry = KIND, server = %self.addrs[i], "connected to redis");
                    }
                    *cur = Some((i, c.clone()));
                    self.next.store(i, Ordering::Relaxed);
                    return Ok((i, c));
                }
                Err(e) => failures.push((i, e)),
            }
        }
        if let Some((i, _)) = failures.last() {
            self.next.store((i + 1) % n, Ordering::Relaxed);
        }
        Err(RegistryError::unavailable(
            KIND,
            self.addrs.join(","),
            no_server_answered(&self.addrs, &failures),
        ))
    }

    async fn drop_conn(&self, idx: usize) {
        let mut cur = self.current.lock().await;
        if matches!(cur.as_ref(), Some((i, _)) if *i == idx) {
            *cur = None;
            self.next
                .store((idx + 1) % self.clients.len(), Ordering::Relaxed);
        }
    }

    /// Runs one command (or pipeline) with failover: a broken connection is dropped and
    /// the command tried once more on a fresh one.
    async fn run<T, F, Fut>(&self, op: &'static str, f: F) -> Result<T, RegistryError>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let mut attempt = 0;
        loop {
            let (idx, conn) = self.conn().await?;
            match tokio::time::timeout(self.timeout, f(conn)).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if connection_broken(&e) => {
                    self.drop_conn(idx).await;
                    if attempt == 0 {
                        attempt += 1;
                        continue;
                    }
                    return Err(redis_err(&self.addrs[idx], op, e));
                }
                Ok(Err(e)) => return Err(redis_err(&self.addrs[idx], op, e)),
                Err(_) => {
                    self.drop_conn(idx).await;
                    return Err(RegistryError::timeout(
                        KIND,
                        &self.addrs[idx],
                        op,
                        self.timeout,
                    ));
                }
            }
        }
    }

    /// A pub/sub connection to the first server that answers, starting at the current one.
    async fn pubsub(&self) -> Result<redis::aio::PubSub, RegistryError> {
        let n = self.clients.len();
        let start = self.next.load(Ordering::Relaxed);
        let mut failures = Vec::new();
        for k in 0..n {
            let i = (start + k) % n;
            match tokio::time::timeout(self.timeout, self.clients[i].get_async_pubsub()).await {
                Ok(Ok(p)) => return Ok(p),
                Ok(Err(e)) => failures.push((i, e.to_string())),
                Err(_) => failures.push((i, format!("no answer within {:?}", self.timeout))),
            }
        }
        Err(RegistryError::unavailable(
            KIND,
            self.addrs.join(","),
            format!("pub/sub: {}", no_server_answered(&self.addrs, &failures)),
        ))
    }
}

struct Inner {
    servers: Servers,
    ttl: Duration,
    refresh: Duration,
    rescan: Duration,
    identity: String,
    /// key -> (channel, Java address) of everything we registered.
    registered: Registrations<(String, String)>,
    life: Lifecycle,
}

/// The Redis registry (Seata `redis` layout). See the [module docs](self).
pub struct RedisRegistry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisRegistry")
            .field("servers", &self.inner.servers.addrs)
            .field("ttl", &self.inner.ttl)
            .field("life", &self.inner.life)
            .finish()
    }
}

/// What one scan found: the members, and the shortest remaining key TTL.
struct ScanResult {
    members: Vec<Instance>,
    earliest_expiry: Option<Duration>,
}

impl Inner {
    fn ttl_secs(&self) -> u64 {
        self.ttl.as_secs().max(1)
    }

    async fn scan(&self, cluster: &str) -> Result<ScanResult, RegistryError> {
        let prefix = key_prefix(cluster);
        let pattern = format!("{}*", glob_escape(&prefix));
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<Vec<u8>>) = self
                .servers
                .run("scan", |mut c| {
                    let pattern = pattern.clone();
                    async move {
                        redis::cmd("SCAN")
                            .arg(cursor)
                            .arg("MATCH")
                            .arg(pattern)
                            .arg("COUNT")
                            .arg(1000)
                            .query_async(&mut c)
                            .await
                    }
                })
                .await?;
            keys.extend(batch);
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        keys.sort();
        keys.dedup();
        let mut members = Vec::new();
        let mut member_keys = Vec::new();
        for k in &keys {
            match classify(&prefix, k) {
                Entry::Member(i) => {
                    members.push(i);
                    member_keys.push(k.clone());
                }
                Entry::OtherCluster => {}
                Entry::Bad(reason) => tracing::warn!(
                    registry = KIND,
                    cluster,
                    key = %String::from_utf8_lossy(k),
                    "skipping malformed registry entry: {reason}"
                ),
            }
        }
        let mut earliest_expiry = None;
        if !member_keys.is_empty() {
            let ttls: Vec<i64> = self
                .servers
                .run("pttl", |mut c| {
                    let mut pipe = redis::pipe();
                    for k in &member_keys {
                        pipe.cmd("PTTL").arg(k);
                    }
                    async move { pipe.query_async(&mut c).await }
                })
                .await?;
            earliest_expiry = ttls
                .into_iter()
                .filter(|t| *t > 0)
                .min()
                .map(|ms| Duration::from_millis(ms as u64));
        }
        Ok(ScanResult {
            members,
            earliest_expiry,
        })
    }

    async fn write_key(&self, key: &str) -> Result<(), RegistryError> {
        let ttl = self.ttl_secs();
        let identity = self.identity.clone();
        self.servers
            .run("setex", |mut c| {
                let identity = identity.clone();
                async move {
                    redis::cmd("SETEX")
                        .arg(key)
                        .arg(ttl)
                        .arg(identity)
                        .query_async::<()>(&mut c)
                        .await
                }
            })
            .await
    }

    async fn announce(&self, chan: &str, message: String) -> Result<(), RegistryError> {
        self.servers
            .run("publish", |mut c| {
                let message = message.clone();
                async move {
                    redis::cmd("PUBLISH")
                        .arg(chan)
                        .arg(message)
                        .query_async::<i64>(&mut c)
                        .await
                }
            })
            .await
            .map(|_| ())
    }

    async fn remove_key(&self, key: &str, chan: &str, addr: &str) -> Result<(), RegistryError> {
        self.servers
            .run("del", |mut c| async move {
                redis::cmd("DEL").arg(key).query_async::<i64>(&mut c).await
            })
            .await?;
        self.announce(chan, format!("{addr}-unregister")).await
    }
}

/// Refreshes our keys before they expire; after a failure, writes them all again and
/// re-announces them once Redis answers.
async fn refresh_loop(inner: Arc<Inner>) {
    let mut backoff = Backoff::new(Duration::from_millis(100), inner.refresh);
    let mut announce = false;
    loop {
        let delay = if announce {
            backoff.next_delay()
        } else {
            inner.refresh
        };
        if !inner.life.sleep(delay).await {
            return;
        }
        let regs = inner.registered.snapshot().await;
        if regs.is_empty() {
            continue;
        }
        let ttl = inner.ttl_secs();
        let identity = inner.identity.clone();
        let written = inner
            .servers
            .run("refresh", |mut c| {
                let mut pipe = redis::pipe();
                for (k, _) in &regs {
                    pipe.cmd("SETEX").arg(k).arg(ttl).arg(&identity).ignore();
                }
                async move { pipe.query_async::<()>(&mut c).await }
            })
            .await;
        match written {
            Ok(()) => {
                if announce {
                    for (_, (ch, addr)) in &regs {
                        if let Err(e) = inner.announce(ch, format!("{addr}-register")).await {
                            tracing::warn!(registry = KIND, error = %e, "re-announcing failed");
                        }
                    }
                    tracing::info!(
                        registry = KIND,
                        keys = regs.len(),
                        "registrations written again after reconnect"
                    );
                    announce = false;
                    backoff.reset();
                }
            }
            Err(e) => {
                if !announce {
                    tracing::warn!(registry = KIND, error = %e, "refreshing our keys failed; retrying");
                }
                announce = true;
            }
        }
    }
}

/// Follows one cluster: SUBSCRIBE + rescan on messages, periodically and at key expiry,
/// until `scope` stops (the client closed or the last watch on the cluster was dropped);
/// the subscription ends with it.
async fn watch_loop(inner: Arc<Inner>, scope: WatchScope) {
    let cluster = scope.cluster();
    let chan = channel(cluster);
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    'connect: loop {
        let mut pubsub = match inner.servers.pubsub().await {
            Ok(p) => p,
            Err(e) => {
                scope.mark_stale(&e.to_string());
                let d = backoff.next_delay();
                if !scope.sleep(d).await {
                    return;
                }
                continue;
            }
        };
        if let Err(e) = pubsub.subscribe(&chan).await {
            scope.mark_stale(&format!("cannot subscribe to {chan}: {e}"));
            let d = backoff.next_delay();
            if !scope.sleep(d).await {
                return;
            }
            continue;
        }
        let mut stream = pubsub.into_on_message();
        // Anything published while we were away is lost: rescan now.
        let mut next_scan = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = scope.stopped() => return,
                msg = stream.next() => match msg {
                    Some(m) => {
                        let payload = String::from_utf8_lossy(m.get_payload_bytes()).into_owned();
                        let ok = payload
                            .rsplit_once('-')
                            .map(|(a, what)| {
                                matches!(what, "register" | "unregister") && Instance::parse(a).is_ok()
                            })
                            .unwrap_or(false);
                        if !ok {
                            tracing::warn!(registry = KIND, channel = %chan, payload, "unexpected message on the registry channel; rescanning anyway");
                        }
                        next_scan = tokio::time::Instant::now();
                    }
                    None => {
                        scope.mark_stale("redis pub/sub connection lost");
                        let d = backoff.next_delay();
                        if !scope.sleep(d).await {
                            return;
                        }
                        continue 'connect;
                    }
                },
                _ = tokio::time::sleep_until(next_scan) => {
                    match inner.scan(cluster).await {
                        Ok(found) => {
                            scope.publish(found.members);
                            scope.mark_connected();
                            backoff.reset();
                            let mut wait = inner.rescan;
                            if let Some(e) = found.earliest_expiry {
                                wait = wait.min(e + Duration::from_millis(20));
                            }
                            next_scan = tokio::time::Instant::now() + wait;
                        }
                        Err(e) => {
                            scope.mark_stale(&format!("rescan failed: {e}"));
                            next_scan = tokio::time::Instant::now() + backoff.next_delay();
                        }
                    }
                }
            }
        }
    }
}

impl RedisRegistry {
    /// Connects with `registry.redis.*` ([`RedisSettings`]: servers, password, db, TTL,
    /// refresh period, timeout) and `registry.empty-protection`.
    ///
    /// Fails when no configured server answers.
    pub async fn connect(config: &Config) -> Result<Self, RegistryError> {
        let c = &RedisSettings::from_config(config)?;
        let servers = Servers::new(c)?;
        // Check the servers (and the credentials) now, so a wrong address fails here.
        servers
            .run("ping", |mut conn| async move {
                redis::cmd("PING").query_async::<String>(&mut conn).await
            })
            .await?;
        let ttl = c.ttl.max(Duration::from_secs(1));
        let refresh = c.refresh_period.clamp(Duration::from_millis(100), ttl / 2);
        if refresh < c.refresh_period {
            tracing::warn!(
                registry = KIND,
                ttl = ?ttl,
                refresh_period = ?c.refresh_period,
                "registry.redis.refresh-period is not below half the TTL; refreshing every {refresh:?}"
            );
        }
        let inner = Arc::new(Inner {
            servers,
            ttl,
            refresh,
            rescan: c.refresh_period.max(Duration::from_millis(100)),
            identity: local_identity(),
            registered: Registrations::new(),
            life: Lifecycle::new(KIND, empty_policy(config)),
        });
        tokio::spawn(refresh_loop(inner.clone()));
        Ok(RedisRegistry { inner })
    }

    /// Stops every background task at once **without** deleting our keys, as if the
    /// process had crashed: they expire after the TTL. Used by tests that measure how
    /// fast watchers notice a dead registrant.
    pub fn abandon(&self) {
        self.inner.life.abandon();
    }
}

#[async_trait]
impl RegistryService for RedisRegistry {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn register(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        self.inner.life.check_open()?;
        let key = instance_key(cluster, instance);
        let chan = channel(cluster);
        let addr = instance.to_java_string();
        let mut regs = self.inner.registered.lock().await;
        self.inner.write_key(&key).await?;
        regs.insert(key.clone(), (chan.clone(), addr.clone()));
        drop(regs);
        self.inner
            .announce(&chan, format!("{addr}-register"))
            .await?;
        tracing::info!(registry = KIND, cluster, %instance, key, "registered");
        Ok(())
    }

    async fn unregister(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        self.inner.life.check_open()?;
        let key = instance_key(cluster, instance);
        let chan = channel(cluster);
        let addr = instance.to_java_string();
        self.inner.registered.remove(&key).await;
        self.inner.remove_key(&key, &chan, &addr).await?;
        tracing::info!(registry = KIND, cluster, %instance, key, "unregistered");
        Ok(())
    }

    async fn lookup(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        self.inner.life.check_open()?;
        let mut v = self.inner.scan(cluster).await?.members;
        v.sort_by(|a, b| a.key().cmp(b.key()));
        v.dedup_by(|a, b| a.key() == b.key());
        Ok(v)
    }

    async fn watch(&self, cluster: &str) -> Result<Watch, RegistryError> {
        let inner = &self.inner;
        let follower = inner.clone();
        inner
            .life
            .watch(
                cluster,
                || async { Ok((inner.scan(cluster).await?.members, ())) },
                move |(), scope| watch_loop(follower, scope),
            )
            .await
    }

    async fn close(&self) -> Result<(), RegistryError> {
        self.inner.life.close(remove_all(&self.inner)).await
    }
}

/// Deletes every key we wrote and announces it (close and drop).
async fn remove_all(inner: &Inner) -> Result<(), RegistryError> {
    inner
        .registered
        .remove_all(KIND, |key, (chan, addr)| async move {
            inner.remove_key(&key, &chan, &addr).await
        })
        .await
}

impl Drop for RedisRegistry {
    /// Best effort: deletes our keys now rather than after the TTL.
    fn drop(&mut self) {
        let inner = self.inner.clone();
        self.inner
            .life
            .close_on_drop(move || async move { remove_all(&inner).await });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seata_keys_and_channels() {
        let i = Instance::parse("[2000::1:2345:6789:abcd]:8091").unwrap();
        assert_eq!(
            instance_key("default", &i),
            "registry.redis.default_2000:0:0:0:1:2345:6789:abcd:8091"
        );
        assert_eq!(channel("default"), "registry.redis.default");
    }

    #[test]
    fn exact_cluster_and_garbage() {
        let p = key_prefix("a");
        assert_eq!(
            classify(&p, b"registry.redis.a_10.0.0.1:80"),
            Entry::Member(Instance::parse("10.0.0.1:80").unwrap())
        );
        assert_eq!(
            classify(&p, b"registry.redis.a_b_10.0.0.1:80"),
            Entry::OtherCluster
        );
        assert!(matches!(
            classify(&p, b"registry.redis.a_garbage"),
            Entry::Bad(_)
        ));
        assert!(matches!(classify(&p, &[0xff, 0x00]), Entry::Bad(_)));
    }

    /// Subscribers of `chan`, as the server counts them.
    async fn subscribers(inner: &Inner, chan: &str) -> i64 {
        let (_, n): (String, i64) = inner
            .servers
            .run("pubsub numsub", |mut c| async move {
                redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(chan)
                    .query_async(&mut c)
                    .await
            })
            .await
            .unwrap();
        n
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_subscription_ends_with_the_last_watch() {
        let server = meshline_testkit::Redis::start().expect("redis");
        let mut config = Config::default();
        config
            .registry
            .section_mut("redis")
            .set("serverAddr", server.addr());
        let reg = RedisRegistry::connect(&config).await.unwrap();
        let chan = channel("c");
        let w = reg.watch("c").await.unwrap();
        meshline_testkit::watch::eventually(Duration::from_secs(10), "SUBSCRIBE", || async {
            subscribers(&reg.inner, &chan).await == 1
        })
        .await;
        drop(w);
        let refs = || Arc::strong_count(&reg.inner);
        crate::common::assert_follow_ends_with_last_watch(&reg, &reg.inner.life, "c", 1, refs)
            .await;
        meshline_testkit::watch::eventually(Duration::from_secs(10), "UNSUBSCRIBE", || async {
            subscribers(&reg.inner, &chan).await == 0
        })
        .await;
        reg.close().await.unwrap();
    }

    #[test]
    fn globs_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
