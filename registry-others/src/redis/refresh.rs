//! Our own keys: writing, announcing, refreshing and removing them. The refresh loop
//! keeps them from expiring and, after Redis comes back, writes and announces them all
//! again. Separate because it is the write side of the backend, with its own task.

use std::sync::Arc;
use std::time::Duration;

use meshline_registry_core::{Backoff, RegistryError};

use super::{Inner, KIND};

impl Inner {
    fn ttl_secs(&self) -> u64 {
        self.ttl.as_secs().max(1)
    }

    pub(super) async fn write_key(&self, key: &str) -> Result<(), RegistryError> {
        let mut setex = redis::cmd("SETEX");
        setex.arg(key).arg(self.ttl_secs()).arg(&self.identity);
        self.servers.query::<()>("setex", &setex).await
    }

    pub(super) async fn announce(&self, chan: &str, message: String) -> Result<(), RegistryError> {
        let mut publish = redis::cmd("PUBLISH");
        publish.arg(chan).arg(message);
        self.servers
            .query::<i64>("publish", &publish)
            .await
            .map(|_| ())
    }

    pub(super) async fn remove_key(
        &self,
        key: &str,
        chan: &str,
        addr: &str,
    ) -> Result<(), RegistryError> {
        self.servers
            .query::<i64>("del", redis::cmd("DEL").arg(key))
            .await?;
        self.announce(chan, format!("{addr}-unregister")).await
    }
}

/// Refreshes our keys before they expire; after a failure, writes them all again and
/// re-announces them once Redis answers.
pub(super) async fn refresh_loop(inner: Arc<Inner>) {
    let mut backoff = Backoff::new(Duration::from_millis(100), inner.refresh);
    let mut announce = false;
    loop {
        let delay = if announce {
            backoff.next_delay()
        } else {
            inner.refresh
        };
        if !inner.life.sleep(delay).await {
            return;
        }
        // Held across the write, so an unregister's DEL cannot fall between our
        // snapshot and our SETEX (which would write the key again).
        let guard = inner.registered.lock().await;
        let regs: Vec<(String, (String, String))> =
            guard.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        if regs.is_empty() {
            continue;
        }
        let ttl = inner.ttl_secs();
        let identity = inner.identity.clone();
        let written = inner
            .servers
            .run("refresh", |mut c| {
                let mut pipe = redis::pipe();
                for (k, _) in &regs {
                    pipe.cmd("SETEX").arg(k).arg(ttl).arg(&identity).ignore();
                }
                async move { pipe.query_async::<()>(&mut c).await }
            })
            .await;
        drop(guard);
        match written {
            Ok(()) => {
                if announce {
                    for (_, (ch, addr)) in &regs {
                        if let Err(e) = inner.announce(ch, format!("{addr}-register")).await {
                            tracing::warn!(registry = KIND, error = %e, "re-announcing failed");
                        }
                    }
                    tracing::info!(
                        registry = KIND,
                        keys = regs.len(),
                        "registrations written again after reconnect"
                    );
                    announce = false;
                    backoff.reset();
                }
            }
            Err(e) => {
                if !announce {
                    tracing::warn!(registry = KIND, error = %e, "refreshing our keys failed; retrying");
                }
                announce = true;
            }
        }
    }
}

/// Deletes every key we wrote and announces it (close and drop).
pub(super) async fn remove_all(inner: &Inner) -> Result<(), RegistryError> {
    inner
        .registered
        .remove_all(KIND, |key, (chan, addr)| async move {
            inner.remove_key(&key, &chan, &addr).await
        })
        .await
}
