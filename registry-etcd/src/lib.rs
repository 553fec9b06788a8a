//! # meshline-registry-etcd
//!
//! The etcd v3 registry backend of meshline ([`EtcdRegistry`]), compatible with Seata's
//! `etcd3` registry in both directions.
//!
//! ## Layout (Seata's)
//!
//! - A member of cluster `<cluster>` is the key `registry-seata-<cluster>-<ip>:<port>`
//!   with the value `<ip>:<port>` (Java's address form: IPv6 unbracketed and
//!   uncompressed, see [`Instance::to_java_string`]).
//! - Our keys are attached to one lease per client (TTL `registry.etcd3.ttl`, default
//!   10 s as Seata's), kept alive at a third of the TTL.
//!
//! ## Lookup and watch
//!
//! A prefix get on `registry-seata-<cluster>-` (note the trailing `-`: unlike Seata,
//! asking for `default` does not also return `default2`), keeping only keys whose
//! address part equals their value, so `a` never picks up members of `a-b` either.
//! Values that are not addresses are skipped with a `warn!` naming the key; they never
//! empty the list. The watch then follows a prefix watch from the get's revision and
//! applies the events to its member map, publishing full lists into a [`WatchHub`](meshline_registry_core::WatchHub).
//!
//! ## Self-healing
//!
//! - Watch cancelled by the server, compacted, or its stream broken: the cluster is
//!   marked stale (watchers keep the last snapshot), then re-listed and re-watched from
//!   the new revision with jittered backoff; it is marked connected once the re-list
//!   succeeds.
//! - Lease lost (expired while we were cut off, or revoked by someone else): a new lease
//!   is granted and every key this client registered is put again. After any broken
//!   keep-alive stream the keys are re-put once the stream is back (cheap, and covers a
//!   server that lost its data).
//! - A silent etcd (host gone, network cut) is found by HTTP/2 keep-alive pings: after
//!   10 s without traffic, with a 5 s timeout, and only while a watch or lease stream is
//!   open, which etcd's default keep-alive policy accepts (pings at most every 5 s, none
//!   without a stream). Shorter intervals get the connection closed by etcd for "too
//!   many pings" every few seconds (see `KEEP_ALIVE_INTERVAL` in the source).
//! - Open, closed, abandoned, close-once, drop-time revocation and shared watches come
//!   from [`Lifecycle`]: a cluster's watch stream is cancelled when the last
//!   [`Watch`] on it is dropped.
//! - `server-addr` takes a comma-separated endpoint list; the client balances over the
//!   endpoints and fails over when one dies. Requests carry etcd's "require leader"
//!   flag, so a member cut off from its cluster is not trusted.
//! - [`RegistryService::close`] revokes the lease (removing every key at once) and
//!   stops all background tasks; dropping the registry stops them too and revokes the
//!   lease in the background when a tokio runtime is still running.
//!
//! ## Convergence (measured)
//!
//! `cargo run --release -p meshline-registry-etcd --example etcd_convergence` starts a
//! real etcd (meshline-testkit), registers 200 instances one by one on one client and
//! times each from the `register` call until a second client's watch shows it, then
//! crashes a registrant (lease TTL 3 s) three times. On the 2-core development machine
//! (etcd 3.4.23, load average about 2 from other builds):
//!
//! | register -> watch (200) | p50 | p99 | max |
//! |---|---|---|---|
//! | etcd | 0.58 ms | 4.99 ms | 7.02 ms |
//!
//! A crashed registrant disappeared from watches after 2.83 s, 3.00 s and 3.00 s (TTL
//! 3 s): when its lease expires. Details in `CONVERGENCE.md`.

#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Client, ConnectOptions, EventType, GetOptions, KeyValue, PutOptions, WatchOptions,
};
use meshline_registry_core::{
    Backoff, Config, Instance, Lifecycle, RegistryError, RegistryService, Watch,
    WatchScope,
};
use tokio::sync::Notify;

mod settings;
pub use settings::EtcdSettings;

const KIND: &str = "etcd3";

/// HTTP/2 keep-alive: how long a connection may stay silent before we ping etcd.
///
/// etcd enforces a minimum interval between client pings (`--grpc-keepalive-min-time`,
/// default 5 s) and, by default, refuses pings on a connection with no open stream.
/// gRPC's server counts every early ping as a strike, resets the count only when it
/// sends data, and after the third strike closes the connection (GOAWAY
/// `too_many_pings`). An idle watch stream sends nothing, so the 2 s pings used before
/// this value were cut after about 8 s: the watch broke ("h2 protocol error ...
/// BrokenPipe"), went stale and re-listed, and the lease keep-alive stream on the same
/// connection broke with it, every ~8 s against a stock etcd.
///
/// Hyper pings only after this long without receiving anything (a pong counts), so two
/// pings are always at least 10 s apart: twice etcd's default minimum, with room for
/// timer jitter. 10 s is also the floor gRPC's Go client (under etcd's own client)
/// raises any shorter keep-alive time to. A server started with
/// `--grpc-keepalive-min-time` above 10 s would need a longer interval.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// How long a ping may wait for its acknowledgement before the connection is declared
/// dead. With [`KEEP_ALIVE_INTERVAL`], a silently vanished etcd (host gone, network cut)
/// is noticed by a watch within about 15 s; a crashed etcd process is noticed at once
/// (the kernel resets the connection), and the lease keeper notices within its own
/// operation timeout regardless of pings.
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(5);

// Pings are sent only while a stream is open (`with_keep_alive_while_idle(false)`): a
// watch or a lease keep-alive stream needs them to detect a dead peer; a connection
// used only for unary calls does not (each call has its own deadline, see `timed`), and
// etcd's default policy (`PermitWithoutStream = false`) counts every ping on a
// connection without streams as a strike.

/// The key prefix of `cluster`'s members, with the trailing `-`.
pub fn cluster_prefix(cluster: &str) -> String {
    format!("registry-seata-{cluster}-")
}

/// The key under which `instance` is a member of `cluster` (Seata's layout).
pub fn instance_key(cluster: &str, instance: &Instance) -> String {
    format!("{}{}", cluster_prefix(cluster), instance.to_java_string())
}

/// What one key under a cluster prefix turned out to be.
#[derive(Debug, PartialEq)]
enum Entry {
    Member(Instance),
    /// A key of another cluster sharing the prefix (`a-b` when asked for `a`).
    OtherCluster,
    Bad(String),
}

fn classify(prefix: &str, key: &[u8], value: &[u8]) -> Entry {
    let Ok(key) = std::str::from_utf8(key) else {
        return Entry::Bad("key is not UTF-8".into());
    };
    let Some(addr_part) = key.strip_prefix(prefix) else {
        return Entry::OtherCluster;
    };
    let Ok(value) = std::str::from_utf8(value) else {
        return Entry::Bad("value is not UTF-8".into());
    };
    let value = value.trim();
    let inst = match Instance::parse(value) {
        Ok(i) => i,
        Err(e) => return Entry::Bad(format!("value is not an address: {e}")),
    };
    if addr_part == value {
        return Entry::Member(inst);
    }
    if let Ok(k) = Instance::parse(addr_part)
        && k.key() == inst.key()
    {
        return Entry::Member(inst);
    }
    if addr_part.ends_with(&format!("-{value}")) {
        return Entry::OtherCluster;
    }
    Entry::Bad(format!(
        "the address in the key does not match the value `{value}`"
    ))
}

/// Parses a range of key-values of `cluster` into members (bad entries are logged).
fn parse_members(cluster: &str, kvs: &[KeyValue]) -> BTreeMap<Vec<u8>, Instance> {
    let prefix = cluster_prefix(cluster);
    let mut out = BTreeMap::new();
    for kv in kvs {
        if let Some(inst) = member_of(&prefix, cluster, kv) {
            out.insert(kv.key().to_vec(), inst);
        }
    }
    out
}

fn member_of(prefix: &str, cluster: &str, kv: &KeyValue) -> Option<Instance> {
    match classify(prefix, kv.key(), kv.value()) {
        Entry::Member(i) => Some(i),
        Entry::OtherCluster => None,
        Entry::Bad(reason) => {
            tracing::warn!(
                registry = KIND,
                cluster,
                key = %String::from_utf8_lossy(kv.key()),
                value = %String::from_utf8_lossy(kv.value()),
                "skipping malformed registry entry: {reason}"
            );
            None
        }
    }
}

fn backend_err(server: &str, op: &str, e: etcd_client::Error) -> RegistryError {
    RegistryError::backend(KIND, server, op.to_string(), EtcdError(e))
}

/// An etcd-client error with its cause exposed: etcd-client's own error type does not
/// implement `source()`, and its `Display` for a transport error is only "transport
/// error: transport error", so "Connection refused" would be lost.
#[derive(Debug)]
struct EtcdError(etcd_client::Error);

impl std::fmt::Display for EtcdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            // tonic's transport error says only "transport error"; its causes follow.
            etcd_client::Error::TransportError(_) => f.write_str("transport error"),
            // tonic's status text ends with its source's `Debug` form; the source
            // follows as a cause instead.
            etcd_client::Error::GRpcStatus(s) => {
                write!(f, "gRPC status {:?}", s.code())?;
                if !s.message().is_empty() {
                    write!(f, ": {}", s.message())?;
                }
                Ok(())
            }
            other => other.fmt(f),
        }
    }
}

impl std::error::Error for EtcdError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0 {
            etcd_client::Error::TransportError(e) => std::error::Error::source(e),
            etcd_client::Error::GRpcStatus(s) => std::error::Error::source(s),
            etcd_client::Error::IoError(e) => std::error::Error::source(e),
            etcd_client::Error::InvalidUri(e) => Some(e),
            _ => None,
        }
    }
}

/// True for errors worth retrying at once on another endpoint (a member that is down,
/// a connection that broke).
fn transient(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => s.code() == tonic_code_unavailable(),
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        _ => false,
    }
}

fn tonic_code_unavailable() -> tonic::Code {
    tonic::Code::Unavailable
}

/// Runs the call made by `f` against `server` (the endpoint list, for error messages)
/// with a deadline (the balanced gRPC channel waits forever when no endpoint is
/// reachable), retrying transient failures within it: with several endpoints, a request
/// routed to a dead member fails fast and the next attempt goes elsewhere.
///
/// When the deadline passes after transient failures, the error is the last failure
/// (a refused connection says why), not a bare timeout.
async fn timed<T, F, Fut>(
    server: &str,
    op: &'static str,
    after: Duration,
    mut f: F,
) -> Result<T, RegistryError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    let deadline = tokio::time::Instant::now() + after;
    let mut attempt = 0u32;
    let mut last = None;
    loop {
        match tokio::time::timeout_at(deadline, f()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => {
                let pause = (Duration::from_millis(20) * 2u32.pow(attempt.min(4)))
                    .min(Duration::from_millis(200));
                if transient(&e) && tokio::time::Instant::now() + pause < deadline {
                    attempt += 1;
                    last = Some(e);
                    tokio::time::sleep(pause).await;
                    continue;
                }
                return Err(backend_err(server, op, e));
            }
            Err(_) => {
                return Err(match last {
                    Some(e) => backend_err(
                        server,
                        &format!("{op}: no answer within {after:?}, last failure"),
                        e,
                    ),
                    None => RegistryError::timeout(KIND, server, op, after),
                });
            }
        }
    }
}

#[derive(Default)]
struct LeaseState {
    /// The lease our keys are attached to, once granted.
    id: Option<i64>,
    /// Every key we registered, with its value.
    keys: BTreeMap<String, String>,
}

struct Inner {
    client: Client,
    /// The configured endpoints, comma-separated: the address in error messages.
    servers: String,
    life: Lifecycle,
    ttl: Duration,
    op_timeout: Duration,
    lease: tokio::sync::Mutex<LeaseState>,
    lease_granted: Notify,
}

/// The etcd v3 registry (Seata `etcd3` layout). See the [crate docs](crate).
pub struct EtcdRegistry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EtcdRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdRegistry")
            .field("ttl", &self.inner.ttl)
            .field("life", &self.inner.life)
            .finish()
    }
}

impl EtcdRegistry {
    /// Connects with `registry.etcd3.*` ([`EtcdSettings`]: endpoints, TTL, credentials)
    /// and `registry.empty-protection`.
    ///
    /// Connecting is lazy: this fails only on an invalid endpoint list or bad
    /// credentials; an unreachable etcd shows up as errors of the first operations
    /// (after their operation timeout, TTL / 2 clamped to 1..5 s), which name the
    /// endpoints and the cause (`etcd3 registry at http://127.0.0.1:2379: get: ...
    /// Connection refused`).
    pub async fn connect(config: &Config) -> Result<Self, RegistryError> {
        let c = EtcdSettings::from_config(config)?;
        let endpoints: Vec<String> = c
            .server_addr
            .split([',', ';'])
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        if endpoints.is_empty() {
            return Err(RegistryError::Config(
                "registry.etcd3.serverAddr is empty: give one or more endpoints, e.g. http://127.0.0.1:2379".into(),
            ));
        }
        let ttl = c.ttl.max(Duration::from_secs(1));
        let op_timeout = (ttl / 2).clamp(Duration::from_secs(1), Duration::from_secs(5));
        let mut opts = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_keep_alive(KEEP_ALIVE_INTERVAL, KEEP_ALIVE_TIMEOUT)
            .with_keep_alive_while_idle(false)
            .with_require_leader(true);
        if let Some(user) = &c.username {
            // etcd's auth tokens expire (simple tokens after 5 idle minutes): refresh
            // them instead of failing a long-running registration.
            opts = opts
                .with_user(user.clone(), c.password.clone().unwrap_or_default())
                .with_auto_token_refresh(true);
        }
        let servers = endpoints.join(",");
        let client = tokio::time::timeout(op_timeout * 2, Client::connect(&endpoints, Some(opts)))
            .await
            .map_err(|_| RegistryError::timeout(KIND, &servers, "connect", op_timeout * 2))?
            .map_err(|e| backend_err(&servers, "connect", e))?;
        let policy = config.registry.empty_policy();
        let inner = Arc::new(Inner {
            client,
            servers,
            life: Lifecycle::new(KIND, policy),
            ttl,
            op_timeout,
            lease: tokio::sync::Mutex::new(LeaseState::default()),
            lease_granted: Notify::new(),
        });
        tokio::spawn(keeper_loop(inner.clone()));
        Ok(EtcdRegistry { inner })
    }

    /// The lease our keys are attached to (None before the first registration).
    pub async fn lease_id(&self) -> Option<i64> {
        self.inner.lease.lock().await.id
    }

    /// Stops every background task at once **without** removing our keys, as if the
    /// process had crashed: the keys expire with the lease TTL. Used by tests that
    /// measure how fast watchers notice a dead registrant.
    pub fn abandon(&self) {
        self.inner.life.abandon();
    }

    fn check_open(&self) -> Result<(), RegistryError> {
        self.inner.life.check_open()
    }
}

impl Inner {
    fn ttl_secs(&self) -> i64 {
        self.ttl.as_secs().max(1) as i64
    }

    async fn grant(&self) -> Result<i64, RegistryError> {
        let ttl = self.ttl_secs();
        let resp = timed(&self.servers, "lease grant", self.op_timeout, || {
            let mut lease = self.client.lease_client();
            async move { lease.grant(ttl, None).await }
        })
        .await?;
        tracing::info!(
            registry = KIND,
            lease = resp.id(),
            ttl = resp.ttl(),
            "lease granted"
        );
        Ok(resp.id())
    }

    async fn put(&self, key: &str, value: &str, lease: i64) -> Result<(), RegistryError> {
        timed(&self.servers, "put", self.op_timeout, || {
            let mut kv = self.client.kv_client();
            async move {
                kv.put(key, value, Some(PutOptions::new().with_lease(lease)))
                    .await
            }
        })
        .await
        .map(|_| ())
    }

    /// Grants a new lease and puts every registered key on it. Caller holds the lock.
    async fn regrant_locked(&self, st: &mut LeaseState) -> Result<i64, RegistryError> {
        let id = self.grant().await?;
        st.id = Some(id);
        self.lease_granted.notify_one();
        self.reput_locked(st, id).await?;
        Ok(id)
    }

    async fn reput_locked(&self, st: &LeaseState, id: i64) -> Result<(), RegistryError> {
        for (k, v) in &st.keys {
            self.put(k, v, id).await?;
        }
        if !st.keys.is_empty() {
            tracing::info!(
                registry = KIND,
                lease = id,
                keys = st.keys.len(),
                "registrations written"
            );
        }
        Ok(())
    }

    async fn get_prefix(
        &self,
        cluster: &str,
    ) -> Result<(BTreeMap<Vec<u8>, Instance>, i64), RegistryError> {
        let prefix = cluster_prefix(cluster);
        let resp = timed(&self.servers, "get", self.op_timeout, || {
            let mut kv = self.client.kv_client();
            let prefix = prefix.clone();
            async move { kv.get(prefix, Some(GetOptions::new().with_prefix())).await }
        })
        .await?;
        let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
        Ok((parse_members(cluster, resp.kvs()), revision))
    }

    /// Sleeps for the backoff delay; false when the client closed meanwhile.
    async fn pause(&self, backoff: &mut Backoff) -> bool {
        self.life.sleep(backoff.next_delay()).await
    }
}

fn members_of(members: &BTreeMap<Vec<u8>, Instance>) -> Vec<Instance> {
    members.values().cloned().collect()
}

/// Keeps our lease alive; re-grants it (and re-puts our keys) when it is lost.
async fn keeper_loop(inner: Arc<Inner>) {
    let interval = (inner.ttl / 3).max(Duration::from_millis(300));
    let mut backoff = Backoff::new(Duration::from_millis(100), interval);
    // After a broken stream, our keys are written again once the lease answers.
    let mut reput = false;
    loop {
        if inner.life.is_closed() {
            return;
        }
        let id = inner.lease.lock().await.id;
        let Some(id) = id else {
            tokio::select! {
                _ = inner.life.closed() => return,
                _ = inner.lease_granted.notified() => continue,
            }
        };
        let (mut keeper, mut stream) = match timed(
            &inner.servers,
            "lease keep-alive",
            inner.op_timeout,
            || {
                let mut lease = inner.client.lease_client();
                async move { lease.keep_alive(id).await }
            },
        )
        .await
        {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(registry = KIND, lease = id, error = %e, "cannot open the lease keep-alive stream; retrying");
                reput = true;
                if !inner.pause(&mut backoff).await {
                    return;
                }
                continue;
            }
        };
        loop {
            let answer = tokio::time::timeout(inner.op_timeout, async {
                keeper.keep_alive().await?;
                stream.message().await
            })
            .await;
            match answer {
                Ok(Ok(Some(resp))) if resp.ttl() > 0 => {
                    backoff.reset();
                    if reput {
                        let st = inner.lease.lock().await;
                        if st.id == Some(id) {
                            match inner.reput_locked(&st, id).await {
                                Ok(()) => reput = false,
                                Err(e) => {
                                    tracing::warn!(registry = KIND, error = %e, "re-putting our keys failed; will retry")
                                }
                            }
                        }
                    }
                }
                Ok(Ok(Some(_))) => {
                    tracing::warn!(
                        registry = KIND,
                        lease = id,
                        "our lease expired or was revoked; granting a new one and re-registering"
                    );
                    let mut st = inner.lease.lock().await;
                    if st.id == Some(id) {
                        match inner.regrant_locked(&mut st).await {
                            Ok(_) => reput = false,
                            Err(e) => {
                                tracing::warn!(registry = KIND, error = %e, "re-granting the lease failed; retrying");
                                reput = true;
                                drop(st);
                                if !inner.pause(&mut backoff).await {
                                    return;
                                }
                            }
                        }
                    }
                    break;
                }
                other => {
                    let why = match other {
                        Ok(Err(e)) => e.to_string(),
                        Ok(Ok(None)) => "stream closed by the server".into(),
                        _ => format!("no answer within {:?}", inner.op_timeout),
                    };
                    tracing::warn!(registry = KIND, lease = id, reason = %why, "lease keep-alive broken; reconnecting");
                    reput = true;
                    if !inner.pause(&mut backoff).await {
                        return;
                    }
                    break;
                }
            }
            tokio::select! {
                _ = inner.life.closed() => return,
                _ = tokio::time::sleep(interval) => {}
            }
        }
    }
}

/// Follows one cluster: watch from `revision + 1`, re-list and re-watch on any break.
async fn watch_loop(
    inner: Arc<Inner>,
    scope: WatchScope,
    mut members: BTreeMap<Vec<u8>, Instance>,
    mut revision: i64,
) {
    let cluster = scope.cluster().to_string();
    let prefix = cluster_prefix(&cluster);
    // Capped at 1 s: after an election or a restart the watch is live again within a
    // second of the cluster answering.
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
    loop {
        // 1. Watch from the revision after our list.
        let opts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision + 1);
        let open = timed(&inner.servers, "watch", inner.op_timeout, || {
            let mut client = inner.client.watch_client();
            let (prefix, opts) = (prefix.clone(), opts.clone());
            async move { client.watch(prefix, Some(opts)).await }
        });
        let watched = tokio::select! {
            _ = scope.stopped() => return,
            w = open => w,
        };
        match watched {
            Ok(mut stream) => loop {
                let msg = tokio::select! {
                    _ = scope.stopped() => return,
                    m = stream.message() => m,
                };
                match msg {
                    Ok(Some(resp)) => {
                        if resp.canceled() || resp.compact_revision() > 0 {
                            tracing::info!(
                                registry = KIND,
                                cluster = %cluster,
                                compact_revision = resp.compact_revision(),
                                reason = resp.cancel_reason(),
                                "watch cancelled by the server; re-listing"
                            );
                            break;
                        }
                        if resp.created() {
                            backoff.reset();
                            scope.mark_connected();
                        }
                        for ev in resp.events() {
                            let Some(kv) = ev.kv() else { continue };
                            revision = revision.max(kv.mod_revision());
                            match ev.event_type() {
                                EventType::Put => match member_of(&prefix, &cluster, kv) {
                                    Some(i) => {
                                        members.insert(kv.key().to_vec(), i);
                                    }
                                    None => {
                                        members.remove(kv.key());
                                    }
                                },
                                EventType::Delete => {
                                    members.remove(kv.key());
                                }
                            }
                        }
                        if let Some(h) = resp.header() {
                            revision = revision.max(h.revision());
                        }
                        if !resp.events().is_empty() {
                            scope.publish(members_of(&members));
                        }
                    }
                    Ok(None) => {
                        scope.mark_stale("etcd closed the watch stream");
                        break;
                    }
                    Err(e) => {
                        scope.mark_stale(&format!("watch broken: {e}"));
                        break;
                    }
                }
            },
            Err(e) => {
                scope.mark_stale(&format!("cannot watch: {e}"));
            }
        }
        // 2. Re-list until it works, then loop to re-watch from the new revision.
        loop {
            if !scope.sleep(backoff.next_delay()).await {
                return;
            }
            match inner.get_prefix(&cluster).await {
                Ok((m, rev)) => {
                    members = m;
                    revision = rev;
                    scope.publish(members_of(&members));
                    scope.mark_connected();
                    break;
                }
                Err(e) => {
                    scope.mark_stale(&format!("cannot list: {e}"));
                }
            }
        }
    }
}

#[async_trait]
impl RegistryService for EtcdRegistry {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn register(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        self.check_open()?;
        let inner = &self.inner;
        let key = instance_key(cluster, instance);
        let value = instance.to_java_string();
        let mut st = inner.lease.lock().await;
        let id = match st.id {
            Some(id) => id,
            None => {
                let id = inner.grant().await?;
                st.id = Some(id);
                inner.lease_granted.notify_one();
                id
            }
        };
        if let Err(e) = inner.put(&key, &value, id).await {
            // The lease may have been revoked or expired behind our back: get a new one
            // (which also re-puts the other keys) and try once more.
            if !e.to_string().contains("lease not found") {
                return Err(e);
            }
            tracing::warn!(
                registry = KIND,
                lease = id,
                "lease gone while registering; granting a new one"
            );
            let id = inner.regrant_locked(&mut st).await?;
            inner.put(&key, &value, id).await?;
        }
        st.keys.insert(key.clone(), value);
        tracing::info!(registry = KIND, cluster, %instance, key, "registered");
        Ok(())
    }

    async fn unregister(&self, cluster: &str, instance: &Instance) -> Result<(), RegistryError> {
        self.check_open()?;
        let key = instance_key(cluster, instance);
        let mut st = self.inner.lease.lock().await;
        st.keys.remove(&key);
        timed(&self.inner.servers, "delete", self.inner.op_timeout, || {
            let mut kv = self.inner.client.kv_client();
            let key = key.clone();
            async move { kv.delete(key, None).await }
        })
        .await?;
        tracing::info!(registry = KIND, cluster, %instance, key, "unregistered");
        Ok(())
    }

    async fn lookup(&self, cluster: &str) -> Result<Vec<Instance>, RegistryError> {
        self.check_open()?;
        let (members, _) = self.inner.get_prefix(cluster).await?;
        let mut v: Vec<Instance> = members.into_values().collect();
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
                || async {
                    let (members, revision) = inner.get_prefix(cluster).await?;
                    Ok((members_of(&members), (members, revision)))
                },
                move |(members, revision), scope| watch_loop(follower, scope, members, revision),
            )
            .await
    }

    async fn close(&self) -> Result<(), RegistryError> {
        self.inner.life.close(revoke_lease(&self.inner)).await
    }
}

/// Revokes our lease, which deletes every key attached to it in one step.
async fn revoke_lease(inner: &Inner) -> Result<(), RegistryError> {
    let mut st = inner.lease.lock().await;
    st.keys.clear();
    match st.id.take() {
        Some(id) => revoke(inner, id).await,
        None => Ok(()),
    }
}

async fn revoke(inner: &Inner, id: i64) -> Result<(), RegistryError> {
    timed(&inner.servers, "lease revoke", inner.op_timeout, || {
        let mut lease = inner.client.lease_client();
        async move { lease.revoke(id).await }
    })
    .await
    .map(|_| ())
}

impl Drop for EtcdRegistry {
    /// Unless closed or [`abandon`](EtcdRegistry::abandon)ed, revokes our lease in the
    /// background (best effort: our keys go now rather than after the TTL).
    fn drop(&mut self) {
        let inner = self.inner.clone();
        self.inner
            .life
            .close_on_drop(move || async move { revoke_lease(&inner).await });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(prefix: &str, key: &str, value: &str) -> Entry {
        classify(prefix, key.as_bytes(), value.as_bytes())
    }

    #[test]
    fn seata_vectors_parse() {
        let p = cluster_prefix("default");
        assert_eq!(
            member(
                &p,
                "registry-seata-default-172.0.0.1:8091",
                "172.0.0.1:8091"
            ),
            Entry::Member(Instance::parse("172.0.0.1:8091").unwrap())
        );
        let v6 = "2000:0000:0000:0000:0001:2345:6789:abcd:8091";
        match member(&p, &format!("registry-seata-default-{v6}"), v6) {
            Entry::Member(i) => {
                assert_eq!(i.port(), 8091);
                assert_eq!(i.ip(), Some("2000::1:2345:6789:abcd".parse().unwrap()));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn clusters_match_exactly() {
        let p = cluster_prefix("a");
        assert_eq!(
            member(&p, "registry-seata-a-b-10.0.0.1:80", "10.0.0.1:80"),
            Entry::OtherCluster
        );
        assert!(!"registry-seata-default2-10.0.0.1:80".starts_with(&cluster_prefix("default")));
    }

    #[test]
    fn garbage_is_bad_not_a_panic() {
        let p = cluster_prefix("c");
        assert!(matches!(
            member(&p, "registry-seata-c-x", "not an address"),
            Entry::Bad(_)
        ));
        assert!(matches!(
            classify(&p, b"registry-seata-c-1.1.1.1:1", &[0xff, 0xfe]),
            Entry::Bad(_)
        ));
        assert!(matches!(
            member(&p, "registry-seata-c-1.1.1.1:1", "2.2.2.2:2"),
            Entry::Bad(_)
        ));
    }

    #[test]
    fn our_keys_are_seata_keys() {
        let i = Instance::parse("[2000::1:2345:6789:abcd]:8091").unwrap();
        assert_eq!(
            instance_key("default", &i),
            "registry-seata-default-2000:0:0:0:1:2345:6789:abcd:8091"
        );
    }
}
