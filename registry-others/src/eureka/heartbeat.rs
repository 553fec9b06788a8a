//! Keeping our registrations alive: the heartbeat task that renews each instance every
//! renewal interval and registers it again when the server answers 404, and the
//! cancellation of them all on close and drop. Separate because it is the write side's
//! background task.

use std::sync::Arc;

use meshline_registry_core::RegistryError;
use meshline_registry_core::lifecycle::Renewal;
use reqwest::{Method, StatusCode};

use super::{Inner, KIND, Registration};
use crate::common::Call;

/// Renews every registration each renewal interval; registers an instance again when
/// the server answers 404 (it restarted, or evicted the lease).
pub(super) async fn heartbeat(inner: Arc<Inner>) {
    let inner = &*inner;
    let renew = |id: String, Registration { app, .. }| async move {
        let status = [("status", "UP".to_string())];
        match inner
            .call(Call::new(Method::PUT, &["apps", &app, &id]).query(&status))
            .await
        {
            Ok((StatusCode::OK, _)) => Renewal::Renewed,
            Ok((StatusCode::NOT_FOUND, _)) => Renewal::Lost,
            Ok((s, b)) => Renewal::Failed(format!(
                "heartbeat refused: {s}: {}",
                String::from_utf8_lossy(&b)
            )),
            Err(e) => Renewal::Failed(format!("heartbeat: {}", e.describe())),
        }
    };
    let rewrite = |_id, Registration { app, body }| async move {
        inner
            .post_registration(&app, &body)
            .await
            .map_err(|e| e.describe())
    };
    inner
        .life
        .keep_alive(&inner.regs, inner.renewal, renew, rewrite)
        .await;
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
                .map_err(|e| e.into_registry(KIND, &inner.server(), "cancel"))
        })
        .await
}
