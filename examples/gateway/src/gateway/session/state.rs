//! One player's session: who it is, the connection it is attached to now ([`Link`]),
//! its bindings, user state and groups, and its push buffer.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;
use meshline::InstanceKey;

use super::dirty::{Change, Dirty};
use super::pushes::{PushBuffer, PushLimits, Replay};
use super::store::SessionRecord;
use crate::gateway::outbound::Outbound;
use crate::gateway::protocol::{self, ClientFrame, GATEWAY_MODULE, op};

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

/// A session's changing part, under its lock.
#[derive(Debug, Default)]
pub(super) struct Mutable {
    pub(super) role: String,
    pub(super) user_state: String,
    /// Static bindings by cluster, dynamic ones by `m:<module>`.
    pub(super) bindings: HashMap<String, InstanceKey>,
    pub(super) groups: HashSet<String>,
    pub(super) link: Option<Arc<Link>>,
    pub(super) detached_at: Option<Instant>,
    pub(super) pushes: PushBuffer,
}

/// One player's session.
#[derive(Debug)]
pub struct Session {
    /// Session id (random, 128 bits, hex).
    pub id: String,
    /// The authenticated account.
    pub account: String,
    pub(super) secret: String,
    pub(super) secret_sha256: String,
    pub(super) m: Mutex<Mutable>,
    /// Set with a shared store: where changes are marked for writing.
    pub(super) dirty: Option<Arc<Dirty>>,
    /// The push buffer's bounds.
    pub(super) limits: PushLimits,
}

impl Session {
    pub(super) fn m(&self) -> MutexGuard<'_, Mutable> {
        self.m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the durable part changed (written by [`Sessions::maintain`](super::Sessions::maintain)).
    pub(super) fn changed(&self) {
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

    /// Delivers a push: numbers it (reliable ones, see [`pushes`](super::pushes)) and keeps it for a
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
    pub(super) fn prune_pushes(&self) {
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

    /// Calls `f` with the role and the user state, under the session's lock and
    /// without copying them (what every forwarded message stamps).
    pub fn with_role_and_state<R>(&self, f: impl FnOnce(&str, &str) -> R) -> R {
        let m = self.m();
        f(&m.role, &m.user_state)
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
