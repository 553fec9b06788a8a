//! Keeping our registrations alive: the heartbeat task that renews each instance every
//! renewal interval and registers it again when the server answers 404, and the
//! cancellation of them all on close and drop. Separate because it is the write side's
//! background task.

use std::sync::Arc;
use std::time::Duration;

use meshline_registry_core::{Backoff, RegistryError};
use reqwest::{Method, StatusCode};

use super::{Inner, KIND, Registration};

/// Renews every registration each renewal interval; registers again on 404.
pub(super) async fn heartbeat(inner: Arc<Inner>) {
    let period = inner.renewal.max(Duration::from_millis(50));
    let mut backoff = Backoff::new(Duration::from_millis(100), period);
    let mut delay = period;
    loop {
        if !inner.life.sleep(delay).await {
            return;
        }
        let mut failed = false;
        for (id, Registration { app, body }) in inner.regs.snapshot().await {
            let r = inner
                .call(
                    Method::PUT,
                    &["apps", &app, &id],
                    &[("status", "UP".to_string())],
                    None,
                )
                .await;
            match r {
                Ok((StatusCode::OK, _)) => {}
                Ok((StatusCode::NOT_FOUND, _)) => {
                    // Still ours? unregister may have raced with this round; the lock
                    // keeps one from starting until this re-registration is done.
                    let regs = inner.regs.lock().await;
                    if !regs.contains_key(&id) {
                        continue;
                    }
                    let written = inner.post_registration(&app, &body).await;
                    drop(regs);
                    match written {
                        Ok(()) => tracing::info!(
                            registry = KIND,
                            instance = id,
                            "the server did not know our instance (404); registered it again"
                        ),
                        Err(e) => {
                            failed = true;
                            tracing::warn!(
                                registry = KIND,
                                instance = id,
                                error = e.describe(),
                                "re-registration failed; retrying"
                            );
                        }
                    }
                }
                Ok((s, b)) => {
                    failed = true;
                    tracing::warn!(registry = KIND, instance = id, status = %s, body = %String::from_utf8_lossy(&b), "heartbeat refused; retrying");
                }
                Err(e) => {
                    failed = true;
                    tracing::warn!(
                        registry = KIND,
                        instance = id,
                        error = e.describe(),
                        "heartbeat failed; retrying"
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
/// Cancels every instance we registered (close and drop); every failure is logged, the
/// first is returned after trying them all. A 404 (already gone) is fine.
pub(super) async fn cancel_all(inner: &Inner) -> Result<(), RegistryError> {
    inner
        .regs
        .remove_all(KIND, |id, Registration { app, .. }| async move {
            inner
                .cancel(&app, &id)
                .await
                .map_err(|e| e.into_registry(&inner.server(), "cancel"))
        })
        .await
}

/// Cancels `id` of `app` in the background until the server confirms (a 404, already
/// gone, counts), unless it was registered again meanwhile or the client closed (close
/// cancels what is still pending, once more).
pub(super) fn retry_cancel(inner: &Arc<Inner>, app: String, id: String) {
    let weak = Arc::downgrade(inner);
    let i = id.clone();
    inner.life.retry_removal(id, move || {
        let (weak, app, id) = (weak.clone(), app.clone(), i.clone());
        async move {
            let Some(inner) = weak.upgrade() else {
                return Ok(true);
            };
            // Held so that a concurrent register of the instance waits for us.
            let _regs = inner.regs.lock().await;
            if !inner.regs.is_removing(&id) {
                return Ok(true);
            }
            inner
                .cancel(&app, &id)
                .await
                .map_err(|e| e.into_registry(&inner.server(), "cancel"))?;
            inner.regs.removal_done(&id);
            Ok(true)
        }
    });
}
