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
//! - An unregister whose `DEL` fails returns the error, stops refreshing the key at
//!   once and retries the delete in the background (200 ms doubling to 30 s) until
//!   Redis takes it, the key is registered again, or the client closes; `close`
//!   deletes what is still pending.
//!
//! ## Lookup and watch
//!
//! Lookup is `SCAN MATCH registry.redis.<cluster>_*` (glob characters in the cluster
//! name escaped); the address is what follows `<cluster>_`. Keys whose rest still
//! contains `_` belong to another cluster (`a_b` when asked for `a`) and are ignored
//! (Seata's `split("_")[1]` gets this wrong); keys whose rest is not an address are
//! skipped with a warning naming the key (truncated, at most one line per cluster per
//! 10 s: [`meshline_registry_core::redact::malformed_entry`]; unexpected channel
//! messages likewise).
//!
//! A watch `SUBSCRIBE`s to the channel and rescans after messages (a burst is
//! coalesced: at most one scan per 200 ms, which starts after the burst's messages
//! arrived and so sees its last change), and also
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
//! connection. Every command has `registry.redis.commandTimeout` (default 2 s, Jedis'
//! timeout, which Seata's commands use); Seata's `registry.redis.timeout` is its pool's
//! max-wait and does not change it (see [`RedisSettings`]).
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
use std::time::Duration;

use async_trait::async_trait;
use meshline_registry_core::{
    Config, Instance, Lifecycle, Nearby, Registrations, RegistryError, RegistryService, Watch,
};

use crate::common::empty_policy;

mod follow;
mod layout;
mod nearby;
mod refresh;
mod scan;
mod servers;
mod settings;

pub use layout::{channel, instance_key, key_prefix};
pub use settings::RedisSettings;

use follow::watch_loop;
use layout::local_identity;
use refresh::{refresh_loop, remove_all};
use servers::Servers;

const KIND: &str = "redis";

/// What the registry, its refresh loop and its watches share.
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
        // A registration again cancels a pending background delete of the key.
        self.inner.registered.removal_done(&key);
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
        // Not forgotten until Redis confirms the DEL: the refresh loop stops renewing
        // the key at once, and a failed DEL is retried (and done by close) instead of
        // leaving the key to its TTL.
        let delete = move |inner: Arc<Inner>, key: String| {
            let (chan, addr) = (chan.clone(), addr.clone());
            async move { inner.remove_key(&key, &chan, &addr).await }
        };
        Registrations::unregister_with(&self.inner, |i| (&i.life, &i.registered), &key, delete)
            .await
    }

    async fn lookup(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        self.inner.life.check_open()?;
        let v = self.inner.scan(cluster).await?.members;
        Ok(meshline_registry_core::sorted_unique(v).0.to_vec())
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

    /// The other clusters of Seata's layout with members, from one bounded `SCAN` of
    /// `registry.redis.*_*`: each is selected by mapping the group to it.
    async fn nearby(&self, cluster: &str) -> Result<Vec<Nearby>, RegistryError> {
        self.inner.life.check_open()?;
        self.inner.nearby(cluster).await
    }
}
impl Drop for RedisRegistry {
    /// Best effort: deletes our keys now rather than after the TTL.
    fn drop(&mut self) {
        self.inner
            .life
            .close_on_drop_with(&self.inner, |inner| async move { remove_all(&inner).await });
    }
}
