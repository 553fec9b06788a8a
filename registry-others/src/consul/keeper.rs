//! Keeping our registrations alive: the keeper task that passes every TTL check each
//! TTL/3 and registers a service again when the agent lost it (404), and the
//! deregistration of them all on close and drop. Separate because it is the write
//! side's background task.

use std::sync::Arc;
use std::time::Duration;

use meshline_registry_core::{Backoff, RegistryError};
use reqwest::{Method, StatusCode};

use super::agent::{CallError, REQUEST_TIMEOUT};
use super::{Inner, KIND, parse};

/// Keeps every registration's TTL check passing; re-registers on 404.
pub(super) async fn keeper(inner: Arc<Inner>) {
    let period = (inner.ttl / 3).max(Duration::from_millis(50));
    let mut backoff = Backoff::new(Duration::from_millis(100), period);
    let mut delay = period;
    loop {
        if !inner.life.sleep(delay).await {
            return;
        }
        let mut failed = false;
        for (id, body) in inner.regs.snapshot().await {
            let cid = parse::check_id(&id);
            let r = inner
                .call(
                    Method::PUT,
                    &["v1", "agent", "check", "pass", &cid],
                    &[],
                    None,
                    REQUEST_TIMEOUT,
                )
                .await;
            match r {
                Ok(_) => {}
                Err(CallError::Status(StatusCode::NOT_FOUND, _)) => {
                    // Still ours? unregister may have raced with this round; the lock
                    // keeps one from starting until this re-registration is done.
                    let regs = inner.regs.lock().await;
                    if !regs.contains_key(&id) {
                        continue;
                    }
                    let written = inner.put_registration(&body).await;
                    drop(regs);
                    match written {
                        Ok(()) => tracing::info!(
                            registry = KIND,
                            service_id = id,
                            "the agent had lost our service; registered it again"
                        ),
                        Err(e) => {
                            failed = true;
                            tracing::warn!(
                                registry = KIND,
                                service_id = id,
                                error = e.describe(),
                                "re-registration failed; retrying"
                            );
                        }
                    }
                }
                Err(e) => {
                    failed = true;
                    tracing::warn!(
                        registry = KIND,
                        service_id = id,
                        error = e.describe(),
                        "TTL pass failed; retrying"
                    );
                }
            }
        }
        delay = if failed {
            backoff.next_delay()
        } else {
            backoff.reset();
            period
        };
    }
}
/// Deregisters every service we registered (close and drop); every failure is logged,
/// the first is returned after trying them all.
pub(super) async fn deregister_all(inner: &Inner) -> Result<(), RegistryError> {
    inner
        .regs
        .remove_all(KIND, |id, _| async move {
            inner
                .deregister(&id)
                .await
                .map_err(|e| e.into_registry(inner.server(), "deregister"))
        })
        .await
}

/// Deregisters `id` in the background until the agent confirms, unless it was
/// registered again meanwhile or the client closed (close deregisters what is still
/// pending, once more).
pub(super) fn retry_deregister(inner: &Arc<Inner>, id: String) {
    let weak = Arc::downgrade(inner);
    let i = id.clone();
    inner.life.retry_removal(id, move || {
        let (weak, id) = (weak.clone(), i.clone());
        async move {
            let Some(inner) = weak.upgrade() else {
                return Ok(true);
            };
            // Held so that a concurrent register of the service waits for us.
            let _regs = inner.regs.lock().await;
            if !inner.regs.is_removing(&id) {
                return Ok(true);
            }
            inner
                .deregister(&id)
                .await
                .map_err(|e| e.into_registry(inner.server(), "deregister"))?;
            inner.regs.removal_done(&id);
            Ok(true)
        }
    });
}
