//! The durable part of a session ([`SessionRecord`]) and where it is kept
//! ([`SessionStore`]): nowhere but memory ([`MemoryStore`]) or in Redis
//! ([`RedisStore`](super::RedisStore)).

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use meshline::InstanceKey;
use sha2::{Digest, Sha256};

/// The durable part of a session: what a shared store keeps and another gateway
/// restores. The live part (the connection) is not in it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionRecord {
    /// Session id.
    pub id: String,
    /// The authenticated account.
    pub account: String,
    /// SHA-256 of the resume secret, lower-case hex (the secret itself is never stored).
    pub secret_sha256: String,
    /// The role.
    pub role: String,
    /// The user state.
    pub user_state: String,
    /// Bindings by slot (a cluster, or `m:<module>`).
    pub bindings: BTreeMap<String, InstanceKey>,
    /// Fan-out groups.
    pub groups: BTreeSet<String>,
}

/// A store that cannot be reached or answered wrongly.
#[derive(Debug, thiserror::Error)]
#[error("session store {store}: {reason}")]
pub struct StoreError {
    store: String,
    reason: String,
}

impl StoreError {
    pub(super) fn new(store: impl Into<String>, reason: impl std::fmt::Display) -> StoreError {
        StoreError {
            store: store.into(),
            reason: reason.to_string(),
        }
    }
}

/// What [`SessionStore::save`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Saved {
    /// Written (with the TTL of the resume window).
    Written,
    /// Not written: another gateway has claimed the session since.
    Taken,
}

/// What [`SessionStore::refresh`] found for one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refreshed {
    /// Ours; its TTL starts again.
    Kept,
    /// Not in the store (expired, or the store restarted empty): write it again.
    Missing,
    /// Another gateway has claimed it.
    Taken,
}

/// Where the durable part of sessions is kept beyond this gateway's memory.
#[async_trait]
pub trait SessionStore: Send + Sync + std::fmt::Debug {
    /// A name for logs (`memory`, `redis`).
    fn name(&self) -> &'static str;

    /// False for a store that keeps nothing beyond memory: nothing is written to it.
    fn is_shared(&self) -> bool;

    /// The record of session `id`, `None` when the store has none.
    async fn load(&self, id: &str) -> Result<Option<SessionRecord>, StoreError>;

    /// Writes `record` as held by this gateway. With `claim` it is written whoever held
    /// it (a resume here); without, only if no other gateway has claimed it.
    async fn save(&self, record: &SessionRecord, claim: bool) -> Result<Saved, StoreError>;

    /// Restarts the TTL of sessions this gateway holds; one answer per id, in order.
    async fn refresh(&self, ids: &[String]) -> Result<Vec<Refreshed>, StoreError>;

    /// Ends session `id` in the store, if this gateway holds it.
    async fn delete(&self, id: &str) -> Result<(), StoreError>;
}

/// Sessions in this gateway's memory only (the default): a resume works on the same
/// gateway, within the resume window.
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryStore;

#[async_trait]
impl SessionStore for MemoryStore {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn is_shared(&self) -> bool {
        false
    }

    async fn load(&self, _id: &str) -> Result<Option<SessionRecord>, StoreError> {
        Ok(None)
    }

    async fn save(&self, _record: &SessionRecord, _claim: bool) -> Result<Saved, StoreError> {
        Ok(Saved::Written)
    }

    async fn refresh(&self, ids: &[String]) -> Result<Vec<Refreshed>, StoreError> {
        Ok(vec![Refreshed::Kept; ids.len()])
    }

    async fn delete(&self, _id: &str) -> Result<(), StoreError> {
        Ok(())
    }
}

/// SHA-256 of a resume secret, lower-case hex: what stores keep.
pub fn secret_sha256(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Equal, compared without an early exit on the first differing byte.
pub(super) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
