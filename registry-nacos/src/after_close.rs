//! After a close: says so when a registration we removed is still listed.
//!
//! A Nacos 2 server removes an ephemeral instance only for the connection that
//! registered it (or when that connection goes). The close deregisters on the live
//! connection, and the client closes every connection it leaves, so the registration
//! is normally gone everywhere within a second. Two things can still keep it listed:
//! another client that registered the same address, or a node that was cut off while
//! it held a connection this client left, and has neither heard the socket close nor
//! yet dropped the connection by its own detection (rnacos: 15 s without a word). The
//! first lasts; the second ends by itself.
//!
//! So the close must not pass for clean unchecked: a little after each close (and
//! drop) the server is asked once more, and an instance of ours still listed is logged
//! at `WARN`, by address and cluster, with both possible causes. An operator who sees a
//! TC listed after it left finds the reason in its log.
//!
//! (With nacos-sdk 0.8.3, the registry's client until 2026-12, the second cause lasted
//! as long as the process, in one run of `tests/nacos_node_cut.rs` in five to one in
//! two: it never closed a connection it replaced. See docs/faults.md.)

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::grpc::ServiceInstance;

use crate::Inner;

/// How long after the deregistration the server is asked: a deregistration usually
/// reaches every node of a cluster within 0.5 s.
pub(crate) const CHECK_AFTER: Duration = Duration::from_secs(2);

/// Checks what a close deregistered ([`CHECK_AFTER`] from now, in the background)
/// when a tokio runtime is running: at process exit there is none, and the
/// connections close with the process anyway. Holds the registry's internals (its
/// naming client) until then.
pub(crate) fn check(inner: Arc<Inner>, removed: Vec<ServiceInstance>) {
    if removed.is_empty() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        tokio::time::sleep(CHECK_AFTER).await;
        still_listed(&inner, &removed).await;
    });
}

/// Asks for each cluster's instances once and warns about each of `removed` listed.
async fn still_listed(inner: &Inner, removed: &[ServiceInstance]) {
    let mut by_cluster: BTreeMap<String, Vec<&ServiceInstance>> = BTreeMap::new();
    for si in removed {
        let cluster = si.cluster_name.clone().unwrap_or_default();
        by_cluster.entry(cluster).or_default().push(si);
    }
    for (cluster, ours_here) in by_cluster {
        let listed = match inner.query(&cluster).await {
            Ok(listed) => listed,
            Err(e) => {
                tracing::debug!(registry = "nacos", error = %e, cluster, "the check after close could not query");
                continue;
            }
        };
        for si in ours_here {
            let addr = format!("{}:{}", si.ip, si.port);
            let ours = |i: &meshline_registry_core::Instance| {
                *i.key().host == *si.ip && i32::from(i.key().port) == si.port
            };
            if !listed.iter().any(ours) {
                tracing::debug!(
                    registry = "nacos",
                    cluster,
                    instance = %addr,
                    "no longer listed after close"
                );
            } else {
                tracing::warn!(
                    registry = "nacos",
                    server = %inner.server,
                    service = %inner.service,
                    cluster,
                    instance = %addr,
                    after = ?CHECK_AFTER,
                    "still listed after this registry deregistered it: either another \
                     client registered the same address, or a Nacos node that was cut \
                     off still holds a connection this client left (it drops it when it \
                     hears the socket closed, or by its own detection; docs/faults.md)"
                );
            }
        }
    }
}
