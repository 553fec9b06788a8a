//! Every session of a gateway ([`Sessions`]): by id and by account, with the store
//! behind them; lookups, removal and expiry. Logins, resumes, groups and the store's
//! upkeep are in the sibling files, as further `impl Sessions` blocks.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::dirty::{Change, Dirty, WarnLimiter};
use super::ended::Ended;
use super::pushes::PushLimits;
use super::redis_store::RedisStore;
use super::state::Session;
use super::store::{MemoryStore, SessionStore, StoreError};
use crate::gateway::settings::{GatewaySettings, SessionStoreKind};

/// Every session of this gateway, the fan-out groups, and the store behind them.
#[derive(Debug)]
pub struct Sessions {
    pub(super) by_id: Mutex<HashMap<String, Arc<Session>>>,
    /// The latest session of each account.
    pub(super) by_account: Mutex<HashMap<String, String>>,
    pub(super) groups: Mutex<HashMap<String, HashSet<String>>>,
    pub(super) store: Arc<dyn SessionStore>,
    /// Set when the store is shared.
    pub(super) dirty: Option<Arc<Dirty>>,
    pub(super) window: Duration,
    pub(super) warn: WarnLimiter,
    pub(super) limits: PushLimits,
    /// Sessions that ended, for the backends to hear of.
    pub(super) ended: Ended,
}

impl Default for Sessions {
    /// In memory, with a 60 s resume window.
    fn default() -> Self {
        Sessions::new(Arc::new(MemoryStore), Duration::from_secs(60))
    }
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
            ended: Ended::default(),
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

    /// The sessions that ended and are not yet announced to the backends.
    pub fn ended(&self) -> &Ended {
        &self.ended
    }

    /// How long a detached session can be resumed.
    pub fn window(&self) -> Duration {
        self.window
    }

    pub(super) fn mark(&self, id: &str, change: Change) {
        if let Some(d) = &self.dirty {
            d.mark(id, change);
        }
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
        self.ended.push(s.clone());
        Some(s)
    }

    /// Drops session `id` from memory only.
    pub(super) fn forget(&self, id: &str) -> Option<Arc<Session>> {
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

    /// Sessions now.
    pub fn len(&self) -> usize {
        self.by_id.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
            if let Some(s) = self.forget(id) {
                self.ended.push(s);
            }
        }
        expired.len()
    }
}
