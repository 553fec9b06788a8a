//! Sessions, kept apart from connections: a session (id, account, role, bindings, user
//! state, groups) outlives its connection, and a client that reconnects with the
//! session id and its resume secret gets it back.
//!
//! This store keeps sessions in the gateway's memory: a resume works on the same
//! gateway within the resume window. (A shared store, so that any gateway can resume a
//! session, is the next step; see the crate README.)

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use meshline::InstanceKey;

use super::outbound::Outbound;

/// The connection a session is attached to now.
#[derive(Debug)]
pub struct Link {
    /// The client's send queue.
    pub outbound: Arc<Outbound>,
    /// The client's address.
    pub addr: SocketAddr,
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
}

/// One player's session.
#[derive(Debug)]
pub struct Session {
    /// Session id (random, 128 bits, hex).
    pub id: String,
    /// The authenticated account.
    pub account: String,
    secret: String,
    m: Mutex<Mutable>,
}

impl Session {
    fn m(&self) -> MutexGuard<'_, Mutable> {
        self.m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The resume secret (sent to the client once, in AUTH_OK).
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The current link, if connected.
    pub fn link(&self) -> Option<Arc<Link>> {
        self.m().link.clone()
    }

    /// Attaches a new connection; returns the one it replaces (to be closed).
    pub fn attach(&self, link: Arc<Link>) -> Option<Arc<Link>> {
        let mut m = self.m();
        m.detached_at = None;
        m.link.replace(link)
    }

    /// Detaches `link` if it is still the current one.
    pub fn detach(&self, link: &Arc<Link>) {
        let mut m = self.m();
        if m.link.as_ref().is_some_and(|l| Arc::ptr_eq(l, link)) {
            m.link = None;
            m.detached_at = Some(Instant::now());
        }
    }

    /// The backend bound under `slot` (a cluster, or `m:<module>`).
    pub fn binding(&self, slot: &str) -> Option<InstanceKey> {
        self.m().bindings.get(slot).cloned()
    }

    /// Binds `slot` to `backend`.
    pub fn bind(&self, slot: String, backend: InstanceKey) {
        self.m().bindings.insert(slot, backend);
    }

    /// Drops the binding of `slot`.
    pub fn unbind(&self, slot: &str) {
        self.m().bindings.remove(slot);
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
        let mut m = self.m();
        m.role = state.split(';').next().unwrap_or("").to_string();
        m.user_state = state;
    }
}

/// Every session of this gateway, and the fan-out groups.
#[derive(Debug, Default)]
pub struct Sessions {
    by_id: Mutex<HashMap<String, Arc<Session>>>,
    groups: Mutex<HashMap<String, HashSet<String>>>,
}

fn random_hex() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

impl Sessions {
    /// A new session for `account`.
    pub fn create(&self, account: String) -> Arc<Session> {
        let s = Arc::new(Session {
            id: random_hex(),
            account,
            secret: random_hex(),
            m: Mutex::new(Mutable::default()),
        });
        self.by_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(s.id.clone(), s.clone());
        s
    }

    /// The session `id` if `secret` is its resume secret.
    pub fn resume(&self, id: &str, secret: &str) -> Option<Arc<Session>> {
        let s = self.get(id)?;
        // Compare without an early exit on the first differing byte.
        let a = s.secret.as_bytes();
        let b = secret.as_bytes();
        let same =
            a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0;
        same.then_some(s)
    }

    /// The session `id`.
    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.by_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    /// Ends session `id` (a kick without keep).
    pub fn remove(&self, id: &str) -> Option<Arc<Session>> {
        let s = self
            .by_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id)?;
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

    /// Adds session `id` to `group`.
    pub fn join(&self, id: &str, group: &str) {
        if let Some(s) = self.get(id) {
            s.m().groups.insert(group.to_string());
            self.groups
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(group.to_string())
                .or_default()
                .insert(id.to_string());
        }
    }

    /// Removes session `id` from `group`.
    pub fn leave(&self, id: &str, group: &str) {
        if let Some(s) = self.get(id) {
            s.m().groups.remove(group);
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

    /// Ends sessions detached for longer than `window`; returns how many.
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
            self.remove(id);
        }
        expired.len()
    }
}
