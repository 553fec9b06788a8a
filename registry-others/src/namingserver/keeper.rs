//! The registrant's background work, as a Seata TC does it
//! (`server/.../instance/ServerInstance.java`, `VGroupMappingStoreManager.notifyMapping`):
//! every heartbeat period, check every namingserver's health and send our
//! registrations again to the healthy ones. A restarted namingserver (which keeps
//! nothing) so has them back within one period; one that stayed down is skipped until
//! its health check passes, then gets them at once.

use std::sync::Arc;

use super::{Inner, KIND, Reg};
use meshline_registry_core::RegistryError;

/// Runs until the registry closes.
pub(super) async fn keeper(inner: Arc<Inner>) {
    loop {
        if !inner.life.sleep(inner.heartbeat).await {
            return;
        }
        check_health(&inner).await;
        let regs = inner.regs.snapshot().await;
        if regs.is_empty() {
            continue;
        }
        let targets = inner.healthy_servers();
        for (key, reg) in regs {
            for base in &targets {
                if inner.life.is_closed() {
                    return;
                }
                if let Err(e) = inner
                    .send_registration(base, "register", &reg.cluster, &reg.unit, &reg.body)
                    .await
                {
                    tracing::debug!(registry = KIND, key, error = %e, "heartbeat failed");
                }
            }
        }
    }
}

/// Health-checks every namingserver, logging the ones that go offline or come back.
pub(super) async fn check_health(inner: &Inner) {
    for base in inner.servers.all() {
        let ok = inner.healthy(base).await;
        let mut down = crate::seata_http::lock(&inner.unhealthy);
        let was_down = down.contains(base);
        if ok && was_down {
            down.retain(|b| b != base);
            tracing::info!(registry = KIND, server = %base, "namingserver is back");
        } else if !ok && !was_down {
            down.push(base.clone());
            tracing::warn!(registry = KIND, server = %base, "namingserver failed its health check");
        }
    }
}

/// Sends `op` (`register` / `unregister`) of `reg` to every namingserver (healthy ones
/// when any is): Ok when at least one took it, else every failure.
pub(super) async fn to_all(inner: &Inner, op: &str, reg: &Reg) -> Result<(), RegistryError> {
    let mut failures = Vec::new();
    let targets = inner.healthy_servers();
    let mut ok = false;
    // The namingserver announces an unregistration with the `term` of the body it
    // gets, and a watch whose term is not behind the announced one waits instead of
    // being answered: with the first registration's term, a watcher between two
    // polls would miss the removal until its 30 s pull. A fresh term is past every
    // term we sent before.
    let mut body = reg.body.clone();
    if op == "unregister" {
        let now = super::next_term();
        body["term"] = now.into();
        body["timestamp"] = now.into();
    }
    for base in &targets {
        match inner
            .send_registration(base, op, &reg.cluster, &reg.unit, &body)
            .await
        {
            Ok(()) => ok = true,
            Err(e) => failures.push(e),
        }
    }
    if ok {
        Ok(())
    } else {
        Err(RegistryError::unavailable(
            KIND,
            inner.servers.shown(),
            failures.join("; "),
        ))
    }
}

/// Unregisters everything we registered (close, drop).
pub(super) async fn unregister_all(inner: &Inner) -> Result<(), RegistryError> {
    inner
        .regs
        .remove_all(KIND, |_, reg| async move {
            to_all(inner, "unregister", &reg).await
        })
        .await
}
