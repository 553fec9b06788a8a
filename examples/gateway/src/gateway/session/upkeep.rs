//! The store's upkeep, off the request path: marked changes written to a shared store
//! (retried after failures), the TTL of connected sessions refreshed, sessions another
//! gateway claimed dropped, and detached sessions expired.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::dirty::{Change, Dirty};
use super::store::{Refreshed, Saved};
use super::table::Sessions;
use crate::gateway::kick::Kick;

impl Sessions {
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

    /// Changes not yet written to the store.
    pub fn pending_writes(&self) -> usize {
        self.dirty.as_ref().map_or(0, |d| d.len())
    }

    /// Session store operations that failed so far (writes are retried; a resume
    /// that could not ask the store was refused).
    pub fn store_failures(&self) -> u64 {
        self.warn.failures()
    }

    /// Writes marked changes now; false when the store failed (they stay marked).
    /// When it returns true, every change marked before the call is in the store.
    pub async fn flush(&self) -> bool {
        let Some(dirty) = &self.dirty else {
            return true;
        };
        let _one_at_a_time = dirty.flushing.lock().await;
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
    use std::sync::Arc;
    use std::time::Duration;

    use meshline::Instance;

    use super::super::{RedisStore, Sessions};
    use crate::gateway::admission::Refusal;

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
