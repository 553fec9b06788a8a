//! Sessions, kept apart from connections: a session (id, account, role, bindings, user
//! state, groups) outlives its connection, and a client that reconnects with the
//! session id and its resume secret gets it back.
//!
//! Every gateway holds the sessions it serves in memory ([`Sessions`]): the live part
//! (the connection, [`Link`]) lives only there. Where the durable part is kept as well
//! is the [`SessionStore`], chosen by `gateway.session-store`:
//!
//! - `memory` ([`MemoryStore`], the default): nowhere else. A resume works on the same
//!   gateway within the resume window, and nowhere else.
//! - `redis` ([`RedisStore`], at `gateway.redis-url`): the durable part (id, account,
//!   a SHA-256 of the resume secret, never the secret itself, role, user state,
//!   bindings, groups, and which gateway holds the session now) is a Redis hash
//!   `meshline:gw:session:<id>` ([`KEY_PREFIX`]), rewritten whenever it changes, with a
//!   TTL of the resume window, refreshed while the client is connected. A resume on
//!   *any* gateway loads it from Redis (Redis is the authority: a session another
//!   gateway took over is never resumed from a stale copy in memory), checks the secret
//!   against the stored hash in constant time, and claims the session for this gateway.
//!   A gateway that finds, on its next write or TTL refresh, that another gateway
//!   claimed one of its sessions drops its copy and closes that old connection.
//!
//! Redis is never on the path of normal traffic: changes are marked and written by a
//! background task ([`Sessions::maintain`]), so requests, pushes and new logins keep
//! working while Redis is down (failed writes are retried, logged at warn at most every
//! ten seconds). Only a resume needs Redis; without it the resume is refused with
//! [`Refusal::StoreUnavailable`] and the client can authenticate again.
//!
//! Pushes to a session are numbered and kept for a while ([`pushes`]): a resume replays
//! what the client missed and reports what it cannot replay as a gap. One account has
//! one session by default: a new login ends the account's other session on this
//! gateway (`duplicate-login`, see [`DuplicateLogin`]).
//!
//! Redis restarted empty (no persistence): the TTL refresh finds the connected
//! sessions' records missing and writes them again; detached sessions are lost.
//! One Redis (or a primary with replicas), not Redis Cluster: the refresh script
//! touches many keys at once. Gateways sharing a Redis need distinct `gateway.id`s:
//! the id in a record says which gateway holds the session.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use meshline::InstanceKey;
use tokio_util::sync::CancellationToken;

mod dirty;
pub mod pushes;
mod redis_store;
mod store;

use bytes::Bytes;
use dirty::{Change, Dirty, WarnLimiter};
use pushes::{PushBuffer, PushLimits, Replay};
pub use redis_store::{KEY_PREFIX, RedisStore};
use store::same;
pub use store::{
    MemoryStore, Refreshed, Saved, SessionRecord, SessionStore, StoreError, secret_sha256,
};

use crate::gateway::admission::Refusal;
use crate::gateway::kick::Kick;
use crate::gateway::outbound::Outbound;
use crate::gateway::protocol::{self, ClientFrame, GATEWAY_MODULE, op};
use crate::gateway::settings::{GatewaySettings, SessionStoreKind};

/// What a new login does to the account's session already on this gateway
/// (`duplicate-login`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DuplicateLogin {
    /// The new login ends the old session; its connection, if any, is kicked with
    /// [`Kick::DuplicateLogin`] (the default).
    #[default]
    KickOld,
    /// The new login is refused with [`Refusal::AlreadyOnline`] while the old session
    /// lives (connected, or detached within the resume window).
    RefuseNew,
    /// Both sessions live.
    Allow,
}

/// The connection a session is attached to now.
#[derive(Debug)]
pub struct Link {
    /// The client's send queue.
    pub outbound: Arc<Outbound>,
    /// The client's address.
    pub addr: SocketAddr,
    /// The client's address as stamped on every forwarded message (written once).
    pub addr_text: String,
}

#[derive(Debug, Default)]
struct Mutable {
    role: String,
    user_state: String,
    /// Static bindings by cluster, dynamic ones by `m:<module>`.
    bindings: HashMap<String, InstanceKey>,
    groups: HashSet<String>,
    link: Option<Arc<Link>>,
    detached_at: Option<Instant>,
    pushes: PushBuffer,
}

/// One player's session.
#[derive(Debug)]
pub struct Session {
    /// Session id (random, 128 bits, hex).
    pub id: String,
    /// The authenticated account.
    pub account: String,
    secret: String,
    secret_sha256: String,
    m: Mutex<Mutable>,
    /// Set with a shared store: where changes are marked for writing.
    dirty: Option<Arc<Dirty>>,
    /// The push buffer's bounds.
    limits: PushLimits,
}

impl Session {
    fn m(&self) -> MutexGuard<'_, Mutable> {
        self.m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the durable part changed (written by [`Sessions::maintain`]).
    fn changed(&self) {
        if let Some(d) = &self.dirty {
            d.mark(&self.id, Change::Save);
        }
    }

    /// The resume secret (sent to the client once, in AUTH_OK).
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The current link, if connected.
    pub fn link(&self) -> Option<Arc<Link>> {
        self.m().link.clone()
    }

    /// Attaches a new connection and queues its first frames on it, before any push can
    /// reach it: `welcome` (AUTH_OK), then for a resume (`resumed_after`: the last push
    /// number the client received) a `GAP` if pushes it missed are no longer kept, and
    /// the kept ones it missed. Returns the connection it replaces (to be kicked).
    pub fn attach(
        &self,
        link: Arc<Link>,
        welcome: ClientFrame,
        resumed_after: Option<u32>,
    ) -> Option<Arc<Link>> {
        let mut m = self.m();
        m.detached_at = None;
        link.outbound.push(welcome);
        if let Some(last) = resumed_after {
            let Replay { gap, frames } = m.pushes.replay_after(last, self.limits);
            if let Some((first, last)) = gap {
                let last = last.map_or_else(|| "?".to_string(), |l| l.to_string());
                link.outbound.push(
                    ClientFrame::new(
                        GATEWAY_MODULE,
                        op::GAP,
                        0,
                        Bytes::from(format!("{first} {last}")),
                    )
                    .with_flags(protocol::RELIABLE),
                );
            }
            for f in frames {
                link.outbound.push(f);
            }
        }
        m.link.replace(link)
    }

    /// Delivers a push: numbers it (reliable ones, see [`pushes`]) and keeps it for a
    /// resume, then hands it to `send` with the connection, if the session is connected.
    /// Under the session's lock, so the numbers reach the connection in order.
    pub fn deliver(&self, frame: ClientFrame, send: impl FnOnce(&Outbound, ClientFrame)) {
        let mut m = self.m();
        let frame = m.pushes.number(frame, self.limits);
        if let Some(link) = &m.link {
            send(&link.outbound, frame);
        }
    }

    /// Drops pushes past the buffer's limits (the buffer is otherwise pruned as pushes
    /// come).
    fn prune_pushes(&self) {
        self.m().pushes.prune(self.limits, Instant::now());
    }

    /// Numbered pushes kept for a resume now.
    pub fn kept_pushes(&self) -> usize {
        self.m().pushes.len()
    }

    /// Detaches `link` if it is still the current one.
    pub fn detach(&self, link: &Arc<Link>) {
        let mut m = self.m();
        if m.link.as_ref().is_some_and(|l| Arc::ptr_eq(l, link)) {
            m.link = None;
            m.detached_at = Some(Instant::now());
            drop(m);
            // Rewritten so the stored TTL (the resume window) counts from now.
            self.changed();
        }
    }

    /// The backend bound under `slot` (a cluster, or `m:<module>`).
    pub fn binding(&self, slot: &str) -> Option<InstanceKey> {
        self.m().bindings.get(slot).cloned()
    }

    /// Every binding: slot (a cluster, or `m:<module>`) and backend.
    pub fn bindings(&self) -> Vec<(String, InstanceKey)> {
        let mut v: Vec<_> = self
            .m()
            .bindings
            .iter()
            .map(|(s, k)| (s.clone(), k.clone()))
            .collect();
        v.sort();
        v
    }

    /// Binds `slot` to `backend`.
    pub fn bind(&self, slot: String, backend: InstanceKey) {
        let old = self.m().bindings.insert(slot, backend.clone());
        if old.as_ref() != Some(&backend) {
            self.changed();
        }
    }

    /// Drops the binding of `slot`.
    pub fn unbind(&self, slot: &str) {
        if self.m().bindings.remove(slot).is_some() {
            self.changed();
        }
    }

    /// Drops the binding of `slot` if it is still `backend`; true when it was.
    pub fn release(&self, slot: &str, backend: &InstanceKey) -> bool {
        let mut m = self.m();
        if m.bindings.get(slot) != Some(backend) {
            return false;
        }
        m.bindings.remove(slot);
        drop(m);
        self.changed();
        true
    }

    /// The role (empty until a backend sets one through the user state).
    pub fn role(&self) -> String {
        self.m().role.clone()
    }

    /// The user state backends set.
    pub fn user_state(&self) -> String {
        self.m().user_state.clone()
    }

    /// Sets the user state (its first `;`-separated field is the role).
    pub fn set_user_state(&self, state: String) {
        {
            let mut m = self.m();
            m.role = state.split(';').next().unwrap_or("").to_string();
            m.user_state = state;
        }
        self.changed();
    }

    /// The fan-out groups the session is in.
    pub fn groups(&self) -> Vec<String> {
        let mut v: Vec<String> = self.m().groups.iter().cloned().collect();
        v.sort();
        v
    }

    /// The durable part, as a store keeps it.
    pub fn record(&self) -> SessionRecord {
        let m = self.m();
        SessionRecord {
            id: self.id.clone(),
            account: self.account.clone(),
            secret_sha256: self.secret_sha256.clone(),
            role: m.role.clone(),
            user_state: m.user_state.clone(),
            bindings: m
                .bindings
                .iter()
                .map(|(s, k)| (s.clone(), k.clone()))
                .collect(),
            groups: m.groups.iter().cloned().collect(),
        }
    }
}

/// Every session of this gateway, the fan-out groups, and the store behind them.
#[derive(Debug)]
pub struct Sessions {
    by_id: Mutex<HashMap<String, Arc<Session>>>,
    /// The latest session of each account.
    by_account: Mutex<HashMap<String, String>>,
    groups: Mutex<HashMap<String, HashSet<String>>>,
    store: Arc<dyn SessionStore>,
    /// Set when the store is shared.
    dirty: Option<Arc<Dirty>>,
    window: Duration,
    warn: WarnLimiter,
    limits: PushLimits,
}

/// A login: its new session, and the account's session it ended (to be kicked).
#[derive(Debug)]
pub struct Login {
    /// The new session.
    pub session: Arc<Session>,
    /// The account's previous session, ended by `duplicate-login: kick-old`.
    pub replaced: Option<Arc<Session>>,
}

impl Default for Sessions {
    /// In memory, with a 60 s resume window.
    fn default() -> Self {
        Sessions::new(Arc::new(MemoryStore), Duration::from_secs(60))
    }
}

fn random_hex() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

/// A session id as [`Sessions::create`] makes them (32 hex digits): anything else is
/// refused before the store is asked.
fn plausible_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Sessions {
    /// Sessions kept in `store` too, detached ones ending after `window`.
    pub fn new(store: Arc<dyn SessionStore>, window: Duration) -> Sessions {
        Sessions {
            by_id: Mutex::default(),
            by_account: Mutex::default(),
            groups: Mutex::default(),
            dirty: store.is_shared().then(Arc::default),
            store,
            window,
            warn: WarnLimiter::default(),
            limits: PushLimits::default(),
        }
    }

    /// The same, with push buffers bounded by `limits`.
    pub fn with_push_limits(mut self, limits: PushLimits) -> Sessions {
        self.limits = limits;
        self
    }

    /// The store `settings` choose (`gateway.session-store`), with their resume window.
    pub fn from_settings(settings: &GatewaySettings) -> Result<Sessions, StoreError> {
        let store: Arc<dyn SessionStore> = match settings.session_store {
            SessionStoreKind::Memory => Arc::new(MemoryStore),
            SessionStoreKind::Redis => Arc::new(RedisStore::new(
                &settings.redis_url,
                &settings.id,
                settings.resume_window,
                settings.redis_timeout,
            )?),
        };
        tracing::info!(store = store.name(), window = ?settings.resume_window, "session store");
        Ok(Sessions::new(store, settings.resume_window).with_push_limits(settings.push_buffer))
    }

    /// The store.
    pub fn store(&self) -> &dyn SessionStore {
        &*self.store
    }

    /// How long a detached session can be resumed.
    pub fn window(&self) -> Duration {
        self.window
    }

    fn mark(&self, id: &str, change: Change) {
        if let Some(d) = &self.dirty {
            d.mark(id, change);
        }
    }

    /// A new session for `account` (whatever other sessions the account has).
    pub fn create(&self, account: String) -> Arc<Session> {
        let s = self.build(account);
        self.install(&s);
        s
    }

    /// A new session for `account`, with `policy` for the account's session already
    /// here (connected, or detached and resumable).
    pub fn login(&self, account: String, policy: DuplicateLogin) -> Result<Login, Refusal> {
        if policy == DuplicateLogin::RefuseNew && self.of_account(&account).is_some() {
            return Err(Refusal::AlreadyOnline);
        }
        let s = self.build(account);
        let previous = self.install(&s);
        let replaced = match policy {
            DuplicateLogin::KickOld => previous.and_then(|id| self.remove(&id)),
            _ => None,
        };
        Ok(Login {
            session: s,
            replaced,
        })
    }

    fn build(&self, account: String) -> Arc<Session> {
        let secret = random_hex();
        Arc::new(Session {
            id: random_hex(),
            account,
            secret_sha256: secret_sha256(&secret),
            secret,
            m: Mutex::new(Mutable::default()),
            dirty: self.dirty.clone(),
            limits: self.limits,
        })
    }

    /// Puts a new session in memory, the account's latest; returns the id of the
    /// account's session before it, if any.
    fn install(&self, s: &Arc<Session>) -> Option<String> {
        let previous = self
            .by_account
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(s.account.clone(), s.id.clone());
        self.by_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(s.id.clone(), s.clone());
        s.changed();
        previous
    }

    /// The session `account` has on this gateway, if any.
    pub fn of_account(&self, account: &str) -> Option<Arc<Session>> {
        let id = self
            .by_account
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(account)
            .cloned()?;
        self.get(&id)
    }

    /// The session `id` if `secret` is its resume secret: from memory with the memory
    /// store; from the store (whichever gateway held it) with a shared one, claimed for
    /// this gateway. [`Refusal::BadResume`] for an unknown session or a wrong secret,
    /// [`Refusal::StoreUnavailable`] when the shared store cannot be asked.
    pub async fn resume(&self, id: &str, secret: &str) -> Result<Arc<Session>, Refusal> {
        if !plausible_id(id) {
            return Err(Refusal::BadResume);
        }
        let presented = secret_sha256(secret);
        if !self.store.is_shared() {
            let s = self.get(id).ok_or(Refusal::BadResume)?;
            return if same(s.secret_sha256.as_bytes(), presented.as_bytes()) {
                Ok(s)
            } else {
                Err(Refusal::BadResume)
            };
        }
        let record = match self.store.load(id).await {
            Ok(Some(r)) => r,
            Ok(None) => return Err(Refusal::BadResume),
            Err(e) => {
                self.warn.warn("a resume could not load its session", &e);
                return Err(Refusal::StoreUnavailable);
            }
        };
        if !same(record.secret_sha256.as_bytes(), presented.as_bytes()) {
            return Err(Refusal::BadResume);
        }
        let s = self.restore(record, secret);
        match self.store.save(&s.record(), true).await {
            Ok(_) => {}
            Err(e) => {
                self.warn.warn("a resumed session could not be claimed", &e);
                self.mark(id, Change::Save);
            }
        }
        Ok(s)
    }

    /// Puts `record` in memory: a new session, or the durable part of the copy already
    /// here replaced (another gateway may have changed it since).
    fn restore(&self, record: SessionRecord, secret: &str) -> Arc<Session> {
        let new_groups: HashSet<String> = record.groups.iter().cloned().collect();
        let existing = self.get(&record.id);
        let (s, old_groups) = match existing {
            Some(s) => {
                let old = {
                    let mut m = s.m();
                    m.role = record.role;
                    m.user_state = record.user_state;
                    m.bindings = record.bindings.into_iter().collect();
                    std::mem::replace(&mut m.groups, new_groups.clone())
                };
                (s, old)
            }
            None => {
                let s = Arc::new(Session {
                    id: record.id,
                    account: record.account,
                    secret: secret.to_string(),
                    secret_sha256: record.secret_sha256,
                    m: Mutex::new(Mutable {
                        role: record.role,
                        user_state: record.user_state,
                        bindings: record.bindings.into_iter().collect(),
                        groups: new_groups.clone(),
                        link: None,
                        detached_at: Some(Instant::now()),
                        pushes: PushBuffer::restored(),
                    }),
                    dirty: self.dirty.clone(),
                    limits: self.limits,
                });
                self.by_account
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(s.account.clone(), s.id.clone());
                self.by_id
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(s.id.clone(), s.clone());
                (s, HashSet::new())
            }
        };
        let mut g = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        for name in old_groups.difference(&new_groups) {
            if let Some(members) = g.get_mut(name) {
                members.remove(&s.id);
                if members.is_empty() {
                    g.remove(name);
                }
            }
        }
        for name in &new_groups {
            g.entry(name.clone()).or_default().insert(s.id.clone());
        }
        drop(g);
        s
    }

    /// The session `id`.
    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.by_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    /// Ends session `id` (a kick without keep), in the store too.
    pub fn remove(&self, id: &str) -> Option<Arc<Session>> {
        let s = self.forget(id)?;
        self.mark(id, Change::Delete);
        Some(s)
    }

    /// Drops session `id` from memory only.
    fn forget(&self, id: &str) -> Option<Arc<Session>> {
        let s = self
            .by_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id)?;
        {
            let mut accounts = self.by_account.lock().unwrap_or_else(|p| p.into_inner());
            if accounts.get(&s.account).is_some_and(|i| i == id) {
                accounts.remove(&s.account);
            }
        }
        let groups: Vec<String> = s.m().groups.drain().collect();
        let mut g = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        for name in groups {
            if let Some(members) = g.get_mut(&name) {
                members.remove(id);
                if members.is_empty() {
                    g.remove(&name);
                }
            }
        }
        Some(s)
    }

    /// Another gateway claimed session `id`: drop this copy and close its connection.
    fn lost(&self, id: &str) {
        if let Some(s) = self.forget(id) {
            tracing::debug!(session = %id, "session taken over by another gateway");
            if let Some(l) = s.link() {
                l.outbound
                    .kick(Kick::Takeover, "session resumed on another gateway");
            }
        }
    }

    /// Sessions now.
    pub fn len(&self) -> usize {
        self.by_id.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds session `id` to `group`.
    pub fn join(&self, id: &str, group: &str) {
        if let Some(s) = self.get(id) {
            let added = s.m().groups.insert(group.to_string());
            self.groups
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(group.to_string())
                .or_default()
                .insert(id.to_string());
            if added {
                s.changed();
            }
        }
    }

    /// Removes session `id` from `group`.
    pub fn leave(&self, id: &str, group: &str) {
        if let Some(s) = self.get(id)
            && s.m().groups.remove(group)
        {
            s.changed();
        }
        let mut g = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(members) = g.get_mut(group) {
            members.remove(id);
            if members.is_empty() {
                g.remove(group);
            }
        }
    }

    /// The members of `group` (`*`: every session).
    pub fn members(&self, group: &str) -> Vec<Arc<Session>> {
        if group == "*" {
            return self
                .by_id
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .cloned()
                .collect();
        }
        let ids: Vec<String> = self
            .groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(group)
            .map(|m| m.iter().cloned().collect())
            .unwrap_or_default();
        ids.iter().filter_map(|id| self.get(id)).collect()
    }

    /// Drops sessions detached for longer than `window` from memory; returns how many.
    /// (A shared store's records expire on their own, by their TTL.)
    pub fn expire(&self, window: Duration) -> usize {
        let expired: Vec<String> = self
            .by_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|s| s.m().detached_at.is_some_and(|t| t.elapsed() > window))
            .map(|s| s.id.clone())
            .collect();
        for id in &expired {
            self.forget(id);
        }
        expired.len()
    }

    /// Changes not yet written to the store.
    pub fn pending_writes(&self) -> usize {
        self.dirty.as_ref().map_or(0, |d| d.len())
    }

    /// Writes marked changes now; false when the store failed (they stay marked).
    pub async fn flush(&self) -> bool {
        let Some(dirty) = &self.dirty else {
            return true;
        };
        let mut changes = dirty.take().into_iter();
        while let Some((id, change)) = changes.next() {
            let result = match change {
                Change::Save => match self.get(&id) {
                    Some(s) => match self.store.save(&s.record(), false).await {
                        Ok(Saved::Written) => Ok(()),
                        Ok(Saved::Taken) => {
                            self.lost(&id);
                            Ok(())
                        }
                        Err(e) => Err(e),
                    },
                    None => Ok(()),
                },
                Change::Delete => self.store.delete(&id).await,
            };
            if let Err(e) = result {
                self.warn.warn("writes fail (retrying)", &e);
                dirty.put_back(std::iter::once((id, change)).chain(changes));
                return false;
            }
        }
        true
    }

    /// Restarts the store TTL of every connected session (records found missing are
    /// written again, sessions another gateway claimed are dropped here).
    async fn refresh(&self) {
        let connected: Vec<String> = self
            .by_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|s| s.m().link.is_some())
            .map(|s| s.id.clone())
            .collect();
        for chunk in connected.chunks(256) {
            match self.store.refresh(chunk).await {
                Ok(found) => {
                    for (id, r) in chunk.iter().zip(found) {
                        match r {
                            Refreshed::Kept => {}
                            Refreshed::Missing => self.mark(id, Change::Save),
                            Refreshed::Taken => self.lost(id),
                        }
                    }
                }
                Err(e) => {
                    self.warn.warn("TTL refresh fails", &e);
                    return;
                }
            }
        }
    }

    /// Runs until `stop`: ends sessions detached past the window, and with a shared
    /// store writes changes as they are marked (retrying after failures) and refreshes
    /// the TTL of connected sessions every third of the window.
    pub async fn maintain(&self, stop: &CancellationToken) {
        let mut expire = tokio::time::interval(
            Duration::from_secs(5)
                .min(self.window)
                .max(Duration::from_millis(100)),
        );
        let every = (self.window / 3).clamp(Duration::from_millis(500), Duration::from_secs(30));
        let mut refresh = tokio::time::interval(every);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let idle = Arc::new(Dirty::default());
        let dirty = self.dirty.clone().unwrap_or(idle);
        let shared = self.dirty.is_some();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = expire.tick() => {
                    self.expire(self.window);
                    for s in self.members("*") {
                        s.prune_pushes();
                    }
                }
                _ = refresh.tick(), if shared => self.refresh().await,
                _ = dirty.wake.notified(), if shared => {
                    if !self.flush().await {
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        }
                        // Try again (the marks are still there).
                        dirty.wake.notify_one();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use meshline::Instance;

    use super::*;

    #[tokio::test]
    async fn memory_resume_checks_the_secret_and_the_id() {
        let sessions = Sessions::default();
        let s = sessions.create("alice".into());
        let back = sessions.resume(&s.id, s.secret()).await.unwrap();
        assert!(Arc::ptr_eq(&s, &back));
        assert_eq!(
            sessions.resume(&s.id, "wrong").await.unwrap_err(),
            Refusal::BadResume
        );
        assert_eq!(
            sessions.resume("*", s.secret()).await.unwrap_err(),
            Refusal::BadResume
        );
        assert_eq!(
            sessions.pending_writes(),
            0,
            "the memory store writes nothing"
        );
    }

    #[tokio::test]
    async fn an_unreachable_redis_refuses_resumes_and_keeps_changes_marked() {
        // Port 1 on loopback: nothing listens there, the connect is refused at once.
        let store = RedisStore::new(
            "redis://127.0.0.1:1/",
            "gw-1",
            Duration::from_secs(60),
            Duration::from_millis(300),
        )
        .unwrap();
        let sessions = Sessions::new(Arc::new(store), Duration::from_secs(60));
        let s = sessions.create("alice".into());
        s.bind(
            "room".into(),
            Instance::parse("127.0.0.1:9").unwrap().key().clone(),
        );
        assert_eq!(
            sessions.resume(&s.id, s.secret()).await.unwrap_err(),
            Refusal::StoreUnavailable
        );
        assert!(!sessions.flush().await);
        assert_eq!(sessions.pending_writes(), 1);
        assert_eq!(s.binding("room").unwrap().port, 9, "memory is untouched");
    }
}
