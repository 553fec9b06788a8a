//! Keeping our registrations alive: the keeper task that passes every TTL check each
//! TTL/3 and registers a service again when the agent lost it (404), and the
//! deregistration of them all on close and drop. Separate because it is the write
//! side's background task.

use std::sync::Arc;

use meshline_registry_core::RegistryError;
use meshline_registry_core::lifecycle::Renewal;
use reqwest::{Method, StatusCode};

use super::agent::{CallError, REQUEST_TIMEOUT};
use super::{Inner, KIND, parse};
use crate::common::Call;

/// Keeps every registration's TTL check passing each TTL/3; registers a service again
/// when the agent answers 404 (it restarted and lost it).
pub(super) async fn keeper(inner: Arc<Inner>) {
    let inner = &*inner;
    let renew = |id: String, _body| async move {
        let cid = parse::check_id(&id);
        let path = ["v1", "agent", "check", "pass", &cid];
        match inner
            .agent
            .call(Call::new(Method::PUT, &path), REQUEST_TIMEOUT)
            .await
        {
            Ok(_) => Renewal::Renewed,
            Err(CallError::Status(StatusCode::NOT_FOUND, _)) => Renewal::Lost,
            Err(e) => Renewal::Failed(format!("TTL pass: {}", e.describe())),
        }
    };
    let rewrite = |_id, body: serde_json::Value| async move {
        inner
            .put_registration(&body)
            .await
            .map_err(|e| e.describe())
    };
    inner
        .life
        .keep_alive(&inner.regs, inner.ttl / 3, renew, rewrite)
        .await;
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
                .map_err(|e| e.into_registry(KIND, inner.server(), "deregister"))
        })
        .await
}
