//! Logins: a new session for an account, and what it does to the account's session
//! already on this gateway ([`DuplicateLogin`]).

use std::sync::{Arc, Mutex};

use super::state::{Mutable, Session};
use super::store::secret_sha256;
use super::table::Sessions;
use crate::gateway::admission::Refusal;

/// What a new login does to the account's session already on this gateway
/// (`duplicate-login`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DuplicateLogin {
    /// The new login ends the old session; its connection, if any, is kicked with
    /// [`Kick::DuplicateLogin`](crate::gateway::kick::Kick::DuplicateLogin) (the default).
    #[default]
    KickOld,
    /// The new login is refused with [`Refusal::AlreadyOnline`] while the old session
    /// lives (connected, or detached within the resume window).
    RefuseNew,
    /// Both sessions live.
    Allow,
}

/// A login: its new session, and the account's session it ended (to be kicked).
#[derive(Debug)]
pub struct Login {
    /// The new session.
    pub session: Arc<Session>,
    /// The account's previous session, ended by `duplicate-login: kick-old`.
    pub replaced: Option<Arc<Session>>,
}

fn random_hex() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

impl Sessions {
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
        let previous = self.index(s);
        s.changed();
        previous
    }

    /// Makes `s` findable by its id and as its account's session; returns the id of
    /// the account's session before it, if any.
    pub(super) fn index(&self, s: &Arc<Session>) -> Option<String> {
        self.by_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(s.id.clone(), s.clone());
        self.by_account
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(s.account.clone(), s.id.clone())
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
}
