//! After a close: says so when a registration we removed is listed again.
//!
//! A Nacos 2 server removes an ephemeral instance only for the connection that
//! registered it, and nacos-sdk 0.8.3 leaks a connection it replaces: the replaced
//! connection's stream task keeps answering the server, so whatever it registered stays
//! listed until the process exits. After a node of a cluster is cut and restored, a
//! close leaves the registration listed that way in one run in five to one in two
//! (15 of 50 runs on 2026-12-04, in four series: 2 of 14, 3 of 16, 6 of 12, 4 of 8;
//! `tests/nacos_node_cut.rs`, docs/faults.md), and deregistering again does not help:
//! nacos-sdk sends it on its current connection.
//!
//! Nothing on our side can remove it, so the close must not pass for clean: a little
//! after each close (and drop) the server is asked once more, and an instance of ours
//! still listed is logged at `WARN`, by address and cluster, with both possible causes
//! (another client registering the same address is the other one). An operator who
//! sees a TC listed after it left finds the reason in its log.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::grpc::ServiceInstance;

use crate::Inner;

/// How long after the deregistration the server is asked: nacos-sdk redoes a
/// registration on a new connection within about a second of a reconnect (0.6 s
/// measured), and a deregistration usually reaches every node within 0.5 s.
pub(crate) const CHECK_AFTER: Duration = Duration::from_secs(2);

/// Checks what a close deregistered ([`CHECK_AFTER`] from now, in the background)
/// when a tokio runtime is running: at process exit there is none, and the
/// connections close with the process anyway. Holds the registry's internals (its
/// nacos-sdk client) until then.
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
                     client registered the same address, or nacos-sdk 0.8.3 kept the \
                     registration on a connection it replaced (after a failover), and \
                     Nacos lists it until this process exits (docs/faults.md)"
                );
            }
        }
    }
}
