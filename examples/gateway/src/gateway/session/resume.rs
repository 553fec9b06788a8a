//! Resumes: a session found again by its id and resume secret, from memory or, with a
//! shared store, from the store (whichever gateway held it), and claimed for this one.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::dirty::Change;
use super::pushes::PushBuffer;
use super::state::{Mutable, Session};
use super::store::{SessionRecord, same, secret_sha256};
use super::table::Sessions;
use crate::gateway::admission::Refusal;

/// A session id as [`Sessions::create`] makes them (32 hex digits): anything else is
/// refused before the store is asked.
fn plausible_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Sessions {
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
            if !same(s.secret_sha256.as_bytes(), presented.as_bytes()) {
                return Err(Refusal::BadResume);
            }
            // The window is the rule, not the expiry timer that enforces it between
            // resumes: a session detached longer ago is over, whenever the timer runs.
            let expired = s.m().detached_at.is_some_and(|t| t.elapsed() > self.window);
            if expired {
                if let Some(s) = self.forget(id) {
                    self.ended.push(s);
                }
                return Err(Refusal::BadResume);
            }
            return Ok(s);
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
                self.index(&s);
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
}

#[cfg(test)]
mod tests {
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

    /// A session detached longer than the resume window is refused (and forgotten),
    /// though no expiry timer has run since; one detached within it resumes.
    #[tokio::test]
    async fn a_resume_past_the_window_is_refused_whatever_the_timer() {
        let window = std::time::Duration::from_secs(4);
        let sessions = Sessions::new(Arc::new(super::super::store::MemoryStore), window);
        let s = sessions.create("alice".into());
        s.m().detached_at = Some(Instant::now() - window / 2);
        assert!(sessions.resume(&s.id, s.secret()).await.is_ok());
        s.m().detached_at = Some(Instant::now() - window - std::time::Duration::from_secs(1));
        assert_eq!(
            sessions.resume(&s.id, s.secret()).await.unwrap_err(),
            Refusal::BadResume
        );
        assert!(
            sessions.get(&s.id).is_none(),
            "the expired session is forgotten"
        );
    }
}
