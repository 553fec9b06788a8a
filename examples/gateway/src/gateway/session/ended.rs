//! Sessions that ended, waiting to be announced to the backends that may hold state for
//! them ([`Ended`]).
//!
//! A session ends when it is removed (a backend's kick without keep, a new login of the
//! same account under `duplicate-login: kick-old`), when it stays detached past the
//! resume window (the expiry timer, or a RESUME that comes too late), never when
//! another gateway takes it over (it goes on there). A backend keeps state for sessions
//! (a room's members), and only the gateway knows that a session is over: the gateway
//! tells them (`cmd=ended`, see [`wire`](crate::gateway::wire)), off the path that ended
//! it.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::state::Session;

/// The most ended sessions kept unannounced. Past it (nobody takes them: a table used
/// without a gateway, or a flood of ends faster than the announcements), the oldest
/// are dropped with a warning: a backend then keeps a member that is gone until its
/// key moves.
const MAX_UNANNOUNCED: usize = 65_536;

/// The ended sessions not yet announced, in the order they ended.
#[derive(Debug, Default)]
pub struct Ended {
    list: Mutex<Vec<Arc<Session>>>,
    ready: Notify,
}

impl Ended {
    /// `session` ended.
    pub(super) fn push(&self, session: Arc<Session>) {
        {
            let mut list = self.list.lock().unwrap_or_else(|p| p.into_inner());
            if list.len() >= MAX_UNANNOUNCED {
                let dropped = list.len() + 1 - MAX_UNANNOUNCED;
                list.drain(..dropped);
                tracing::warn!(
                    dropped,
                    "ended sessions not announced to the backends in time; the oldest dropped"
                );
            }
            list.push(session);
        }
        self.ready.notify_one();
    }

    /// The sessions that ended since the last call, waiting for one when there are
    /// none. One taker: the gateway's announcing task.
    pub async fn next(&self) -> Vec<Arc<Session>> {
        loop {
            let taken = std::mem::take(&mut *self.list.lock().unwrap_or_else(|p| p.into_inner()));
            if !taken.is_empty() {
                return taken;
            }
            self.ready.notified().await;
        }
    }

    /// How many are waiting.
    pub fn len(&self) -> usize {
        self.list.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// True when none is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
