//! The life of a registry client, written once for every backend.
//!
//! Every network backend has the same life: it is open until [`close`] or drop; a
//! closed client refuses calls with [`RegistryError::Closed`]; its background tasks
//! (keep-alive, watch loops) end when it closes; `close` removes everything the client
//! registered, exactly once; dropping it without `close` does the same in the
//! background when a tokio runtime is there; and tests can [`abandon`] it to play a
//! crashed process (everything stops, nothing is removed, so the registry must notice
//! by itself). [`Lifecycle`] holds that state and [`Registrations`] the client's own
//! announcements, so a backend only says what is special about it: how to write,
//! refresh, remove and read its entries.
//!
//! Watches are shared per cluster name: the first [`Lifecycle::watch`] on a name reads
//! the registry once, publishes into the [`WatchHub`] and starts the backend's follow
//! task; later ones subscribe to the same channel. When the last [`Watch`] on a name is
//! dropped, the follow task is told to stop (its [`WatchScope`] is cancelled) and the
//! hub forgets the name, so neither the hub nor the backend keep every name a
//! long-running process ever watched.
//!
//! [`close`]: crate::RegistryService::close
//! [`abandon`]: Lifecycle::abandon

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::{EmptyProtection, Instance, PublishOutcome, RegistryError, Watch, WatchHub};

mod renewal;
pub use renewal::Renewal;

/// The shared state of one registry client: open or closed, abandoned or not, its
/// [`WatchHub`] and its running watches. Cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct Lifecycle {
    shared: Arc<Shared>,
}

struct Shared {
    kind: &'static str,
    cancel: CancellationToken,
    abandoned: AtomicBool,
    hub: WatchHub,
    /// Cluster name -> the token that stops its follow task.
    watches: tokio::sync::Mutex<HashMap<String, CancellationToken>>,
}

impl std::fmt::Debug for Lifecycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lifecycle")
            .field("kind", &self.shared.kind)
            .field("closed", &self.is_closed())
            .field("hub", &self.shared.hub)
            .finish()
    }
}

impl Lifecycle {
    /// An open client of registry type `kind` whose hub applies `policy`.
    pub fn new(kind: &'static str, policy: EmptyProtection) -> Self {
        Lifecycle {
            shared: Arc::new(Shared {
                kind,
                cancel: CancellationToken::new(),
                abandoned: AtomicBool::new(false),
                hub: WatchHub::new(kind, policy),
                watches: tokio::sync::Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The registry type (`etcd3`, `zk`, ...).
    pub fn kind(&self) -> &'static str {
        self.shared.kind
    }

    /// The hub the backend publishes into.
    pub fn hub(&self) -> &WatchHub {
        &self.shared.hub
    }

    /// `Err(Closed)` once the client was closed, dropped or abandoned.
    pub fn check_open(&self) -> Result<(), RegistryError> {
        if self.is_closed() {
            Err(RegistryError::Closed {
                kind: self.shared.kind,
            })
        } else {
            Ok(())
        }
    }

    /// True once the client was closed, dropped or abandoned.
    pub fn is_closed(&self) -> bool {
        self.shared.cancel.is_cancelled()
    }

    /// Resolves when the client closes (for `select!` in background loops).
    pub async fn closed(&self) {
        self.shared.cancel.cancelled().await
    }

    /// A token cancelled when the client closes, for tasks that outlive a borrow.
    pub fn token(&self) -> CancellationToken {
        self.shared.cancel.clone()
    }

    /// Sleeps for `d`; false when the client closed meanwhile (the caller returns).
    pub async fn sleep(&self, d: Duration) -> bool {
        tokio::select! {
            _ = self.shared.cancel.cancelled() => false,
            _ = tokio::time::sleep(d) => true,
        }
    }

    /// Stops every background task at once **without** removing what was registered,
    /// as if the process had crashed: the registry must expire the entries itself.
    /// Watches end. Used by tests that measure how fast watchers notice a dead
    /// registrant.
    pub fn abandon(&self) {
        self.shared.abandoned.store(true, Ordering::SeqCst);
        self.shared.cancel.cancel();
        self.shared.hub.close();
    }

    /// True after [`abandon`](Self::abandon).
    pub fn is_abandoned(&self) -> bool {
        self.shared.abandoned.load(Ordering::SeqCst)
    }

    /// Closes the client once: stops the background tasks, runs `remove_all` (the
    /// backend's removal of everything it registered), then ends every watch. A
    /// second call, or a call after drop or abandon, does nothing and returns `Ok`.
    pub async fn close<F>(&self, remove_all: F) -> Result<(), RegistryError>
    where
        F: Future<Output = Result<(), RegistryError>>,
    {
        if !self.begin_close() {
            return Ok(());
        }
        let result = remove_all.await;
        self.shared.hub.close();
        result
    }

    /// The drop-time half of [`close`](Self::close), for a backend's `Drop`: when the
    /// client is still open and not abandoned, `remove_all` runs in the background if a
    /// tokio runtime is there (best effort: entries go now rather than after their
    /// TTL), and the watches end after it; without a runtime they end at once.
    pub fn close_on_drop<F>(&self, remove_all: impl FnOnce() -> F)
    where
        F: Future<Output = Result<(), RegistryError>> + Send + 'static,
    {
        if !self.begin_close() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                let fut = remove_all();
                let life = self.clone();
                handle.spawn(async move {
                    if let Err(e) = fut.await {
                        tracing::warn!(registry = life.kind(), error = %e, "removing our registrations on drop failed");
                    }
                    life.shared.hub.close();
                });
            }
            Err(_) => self.shared.hub.close(),
        }
    }

    /// [`close_on_drop`](Self::close_on_drop) for a backend whose state `owner` is
    /// shared behind an `Arc`: `remove_all` gets a handle of its own, since the removal
    /// runs on in the background after the dropped client is gone.
    pub fn close_on_drop_with<I, F>(&self, owner: &Arc<I>, remove_all: impl FnOnce(Arc<I>) -> F)
    where
        F: Future<Output = Result<(), RegistryError>> + Send + 'static,
    {
        let owner = owner.clone();
        self.close_on_drop(move || remove_all(owner));
    }

    /// Retries a removal that failed, in the background, until `attempt` succeeds or
    /// the client closes (its close removes what is still pending, once more).
    ///
    /// `attempt` returns `Ok(true)` when the entry is gone (or no longer wanted gone:
    /// it was registered again), `Ok(false)` to try again later, or an error (logged,
    /// tried again). Delays grow from 200 ms to 30 s: a registry that is down is not
    /// hammered, and one that comes back sees the delete within 30 s.
    pub fn retry_removal<F, Fut>(&self, what: String, mut attempt: F)
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<bool, RegistryError>> + Send + 'static,
    {
        let life = self.clone();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        handle.spawn(async move {
            let mut backoff =
                crate::Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
            loop {
                if !life.sleep(backoff.next_delay()).await {
                    return;
                }
                match attempt().await {
                    Ok(true) => {
                        tracing::info!(registry = life.kind(), what, "removed after retrying");
                        return;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::debug!(registry = life.kind(), what, error = %e, "removal failed again; retrying")
                    }
                }
            }
        });
    }

    /// Marks the client closed; true only for the first call.
    fn begin_close(&self) -> bool {
        let first = !self.shared.cancel.is_cancelled();
        self.shared.cancel.cancel();
        first
    }

    /// A [`Watch`] on `cluster`, shared with every other watch on the same name.
    ///
    /// The first watch on a name runs `start` (one read of the registry, returning the
    /// members and whatever the follow task needs, such as a revision to watch from),
    /// publishes the members, marks the cluster connected, and spawns `follow` with a
    /// [`WatchScope`]. The follow task must return soon after its scope is cancelled:
    /// when the client closes, or when the last `Watch` on the name is dropped (the hub
    /// then forgets the name). An error from `start` is returned and nothing is kept.
    pub async fn watch<S, Start, StartFut, Follow, FollowFut>(
        &self,
        cluster: &str,
        start: Start,
        follow: Follow,
    ) -> Result<Watch, RegistryError>
    where
        Start: FnOnce() -> StartFut,
        StartFut: Future<Output = Result<(Vec<Instance>, S), RegistryError>>,
        Follow: FnOnce(S, WatchScope) -> FollowFut,
        FollowFut: Future<Output = ()> + Send + 'static,
    {
        self.check_open()?;
        // Held across the first read, so two first watches on a name do not both start
        // a follow task, and the supervisor cannot forget the name meanwhile.
        let mut watches = self.shared.watches.lock().await;
        if let Some(token) = watches.get(cluster)
            && !token.is_cancelled()
        {
            return Ok(self.shared.hub.subscribe(cluster));
        }
        let (members, state) = start().await?;
        self.check_open()?;
        let watch = self.shared.hub.subscribe(cluster);
        // Connected first: see `WatchScope::publish_read`.
        self.shared.hub.mark_connected(cluster);
        self.shared.hub.publish(cluster, members);
        let token = self.shared.cancel.child_token();
        watches.insert(cluster.to_string(), token.clone());
        drop(watches);
        let scope = WatchScope {
            cluster: cluster.to_string(),
            token: token.clone(),
            life: self.clone(),
        };
        tokio::spawn(follow(state, scope));
        tokio::spawn(self.clone().supervise(cluster.to_string(), token));
        Ok(watch)
    }

    /// Ends the follow task of `cluster` once no `Watch` on it is left.
    async fn supervise(self, cluster: String, token: CancellationToken) {
        loop {
            tokio::select! {
                _ = token.cancelled() => return,
                _ = self.shared.hub.watchers_gone(&cluster) => {}
            }
            let mut watches = self.shared.watches.lock().await;
            // Forgotten now, or already gone with the whole hub (closed).
            let hub = &self.shared.hub;
            if hub.forget_if_unwatched(&cluster) || hub.current(&cluster).is_none() {
                // The entry is ours: a newer one replaces it only after its token was
                // cancelled, which only this task and close do.
                watches.remove(&cluster);
                token.cancel();
                tracing::debug!(
                    registry = self.kind(),
                    cluster,
                    "last watch dropped; stopped following"
                );
                return;
            }
            drop(watches);
            // A new watch arrived between the last drop and the lock: wait again.
            tokio::task::yield_now().await;
        }
    }

    /// The cluster names with a running follow task, sorted. Backends with one shared
    /// loop for every cluster (a full fetch, a file) publish these.
    pub async fn watched(&self) -> Vec<String> {
        let watches = self.shared.watches.lock().await;
        let mut v: Vec<String> = watches
            .iter()
            .filter(|(_, t)| !t.is_cancelled())
            .map(|(c, _)| c.clone())
            .collect();
        v.sort();
        v
    }
}

/// What a backend's follow task gets: its cluster, its stop signal, and publishing
/// that stops once the task was told to stop (so a late answer cannot overwrite what a
/// newer watch published).
pub struct WatchScope {
    cluster: String,
    token: CancellationToken,
    life: Lifecycle,
}

impl std::fmt::Debug for WatchScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchScope")
            .field("cluster", &self.cluster)
            .field("stopped", &self.is_stopped())
            .finish()
    }
}

impl WatchScope {
    /// The cluster this task follows.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The client this task belongs to.
    pub fn life(&self) -> &Lifecycle {
        &self.life
    }

    /// Where this cluster's watchers ask for a read now ([`Watch::refresher`](crate::Watch::refresher)):
    /// a follow task whose registry is polled waits on it beside its poll.
    pub fn refresher(&self) -> crate::Refresher {
        self.life.hub().refresher(&self.cluster)
    }

    /// Resolves when the task must stop (client closed, or no watch left).
    pub async fn stopped(&self) {
        self.token.cancelled().await
    }

    /// True when the task must stop.
    pub fn is_stopped(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Sleeps for `d`; false when the task must stop meanwhile.
    pub async fn sleep(&self, d: Duration) -> bool {
        tokio::select! {
            _ = self.token.cancelled() => false,
            _ = tokio::time::sleep(d) => true,
        }
    }

    /// Publishes the full member list (see [`WatchHub::publish`]); nothing once the
    /// task was told to stop.
    pub fn publish(&self, members: Vec<Instance>) -> Option<PublishOutcome> {
        if self.is_stopped() {
            return None;
        }
        Some(self.life.hub().publish(&self.cluster, members))
    }

    /// Publishes a list just read from the registry: marks the cluster connected, then
    /// publishes. In this order a watcher that sees the new list also sees the
    /// registry as reachable (the other order let a watcher read a fresh list beside a
    /// stale health for a moment: `redis_blackhole` failed on it in CI). Every
    /// backend's follow loop uses this after a successful read.
    pub fn publish_read(&self, members: Vec<Instance>) -> Option<PublishOutcome> {
        self.mark_connected();
        self.publish(members)
    }

    /// Marks the cluster stale (see [`WatchHub::mark_stale`]) unless stopped.
    pub fn mark_stale(&self, reason: &str) {
        if !self.is_stopped() {
            self.life.hub().mark_stale(&self.cluster, reason);
        }
    }

    /// Marks the cluster connected (see [`WatchHub::mark_connected`]) unless stopped.
    pub fn mark_connected(&self) {
        if !self.is_stopped() {
            self.life.hub().mark_connected(&self.cluster);
        }
    }
}

/// What a client registered, keyed by the backend's own key (a path, a key, a
/// service id), with whatever the backend needs to write it again or remove it.
///
/// An async mutex: backends hold it across the write of a registration, so a
/// concurrent re-registration after a session loss sees either both or neither.
///
/// An entry whose removal failed stays here as *to remove* (see
/// [`begin_removal`](Self::begin_removal)) rather than being forgotten: it is no
/// longer written again after a session loss, [`remove_all`](Self::remove_all) still
/// removes it on close, and [`Lifecycle::retry_removal`] keeps trying in the
/// background. Forgetting it before the delete succeeded left a zombie: the key stayed
/// in the registry, kept alive by our own lease or session.
pub struct Registrations<V> {
    map: tokio::sync::Mutex<BTreeMap<String, V>>,
    /// Entries we want gone whose removal has not succeeded yet.
    removing: std::sync::Mutex<BTreeMap<String, V>>,
}

impl<V> Default for Registrations<V> {
    fn default() -> Self {
        Registrations {
            map: tokio::sync::Mutex::new(BTreeMap::new()),
            removing: std::sync::Mutex::new(BTreeMap::new()),
        }
    }
}

impl<V> std::fmt::Debug for Registrations<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.map.try_lock() {
            Ok(m) => f.debug_set().entries(m.keys()).finish(),
            Err(_) => f.write_str("Registrations(<in use>)"),
        }
    }
}

impl<V: Clone + Send> Registrations<V> {
    /// No registrations.
    pub fn new() -> Self {
        Self::default()
    }

    /// The map itself, locked (to write a registration and record it as one step).
    pub async fn lock(&self) -> tokio::sync::MutexGuard<'_, BTreeMap<String, V>> {
        self.map.lock().await
    }

    /// Records `key` (a registration again cancels a pending removal of it).
    pub async fn insert(&self, key: String, value: V) {
        let mut map = self.map.lock().await;
        self.removing_map().remove(&key);
        map.insert(key, value);
    }

    fn removing_map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, V>> {
        self.removing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves `key` from the registrations to *to remove*, returning its value: call
    /// it before deleting the entry, then [`removal_done`](Self::removal_done) once the
    /// delete succeeded. `None` when `key` is neither registered nor being removed.
    pub async fn begin_removal(&self, key: &str) -> Option<V> {
        let mut map = self.map.lock().await;
        let mut removing = self.removing_map();
        match map.remove(key) {
            Some(v) => {
                removing.insert(key.to_string(), v.clone());
                Some(v)
            }
            None => removing.get(key).cloned(),
        }
    }

    /// Unregisters `key` the way every backend must, for an `owner` (a backend's shared
    /// state) whose [`Lifecycle`] and registrations `parts` finds: the key moves to *to
    /// remove* first (so nothing renews or writes it again), the registrations lock is
    /// held across `delete` (so a concurrent register waits), and a failed delete is
    /// returned and retried in the background with [`Lifecycle::retry_removal`] until
    /// the registry takes it, unless a register took the key back meanwhile or the
    /// owner is gone. Forgetting the key before the registry confirmed left it there,
    /// kept alive by our own lease, session or keeper.
    ///
    /// `delete(owner, key)` removes the entry from the registry; it is called for the
    /// first attempt and for each retry.
    pub async fn unregister_with<I, D, DF>(
        owner: &Arc<I>,
        parts: fn(&I) -> (&Lifecycle, &Registrations<V>),
        key: &str,
        delete: D,
    ) -> Result<(), RegistryError>
    where
        I: Send + Sync + 'static,
        V: 'static,
        D: Fn(Arc<I>, String) -> DF + Send + Sync + 'static,
        DF: Future<Output = Result<(), RegistryError>> + Send,
    {
        let (life, regs) = parts(owner);
        regs.begin_removal(key).await;
        let held = regs.lock().await;
        let deleted = delete(owner.clone(), key.to_string()).await;
        if deleted.is_ok() {
            regs.removal_done(key);
        }
        drop(held);
        let kind = life.kind();
        let Err(e) = deleted else {
            tracing::info!(registry = kind, key, "unregistered");
            return Ok(());
        };
        if regs.is_removing(key) {
            tracing::warn!(registry = kind, key, error = %e, "unregister failed; retrying in the background");
            let (weak, delete, k) = (Arc::downgrade(owner), Arc::new(delete), key.to_string());
            life.retry_removal(key.to_string(), move || {
                let (weak, delete, key) = (weak.clone(), delete.clone(), k.clone());
                async move {
                    let Some(owner) = weak.upgrade() else {
                        return Ok(true);
                    };
                    let (_, regs) = parts(&owner);
                    let _held = regs.lock().await;
                    if !regs.is_removing(&key) {
                        return Ok(true);
                    }
                    delete(owner.clone(), key.clone()).await?;
                    regs.removal_done(&key);
                    Ok(true)
                }
            });
        }
        Err(e)
    }

    /// The delete of `key` succeeded: it is forgotten.
    pub fn removal_done(&self, key: &str) {
        self.removing_map().remove(key);
    }

    /// True while `key` is waiting for its removal to succeed.
    pub fn is_removing(&self, key: &str) -> bool {
        self.removing_map().contains_key(key)
    }

    /// Forgets `key`, returning what was recorded.
    pub async fn remove(&self, key: &str) -> Option<V> {
        self.map.lock().await.remove(key)
    }

    /// True when `key` is recorded.
    pub async fn contains(&self, key: &str) -> bool {
        self.map.lock().await.contains_key(key)
    }

    /// A copy of every registration, in key order.
    pub async fn snapshot(&self) -> Vec<(String, V)> {
        self.map
            .lock()
            .await
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Removes every registration, and every entry still waiting to be removed, with
    /// `remove` (the backend's delete), one after another; the map is emptied first, so
    /// nothing is removed twice. Every failure is logged; the first is returned.
    pub async fn remove_all<F, Fut>(
        &self,
        kind: &'static str,
        remove: F,
    ) -> Result<(), RegistryError>
    where
        F: Fn(String, V) -> Fut,
        Fut: Future<Output = Result<(), RegistryError>>,
    {
        let mut all = std::mem::take(&mut *self.map.lock().await);
        all.extend(std::mem::take(&mut *self.removing_map()));
        let mut first_err = None;
        for (key, value) in all {
            if let Err(e) = remove(key.clone(), value).await {
                tracing::warn!(registry = kind, key, error = %e, "removing a registration failed");
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests;
