//! What the gateway tells the backends about a session they may hold state for: that
//! it was resumed on this gateway (`cmd=rebind`), and that it ended (`cmd=ended`; see
//! [`wire`]).
//!
//! Both go to the same backends: every backend the session is bound to (statically or
//! dynamically), and every alive backend of the keyed modules' clusters, since a room
//! keeps its members and the gateway does not track which room's backend holds which
//! session.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use meshline::InstanceKey;

use super::commands::command;
use super::core::Shared;
use super::session::Session;
use super::settings::ModuleKind;
use super::wire;

/// The most session ids one `ended` command carries (the head map stays small).
const ENDED_PER_COMMAND: usize = 256;

/// The clusters of the keyed modules (whose backends keep members).
fn keyed_clusters(shared: &Shared) -> BTreeSet<String> {
    shared
        .settings
        .modules
        .values()
        .filter(|m| m.kind == ModuleKind::Keyed)
        .map(|m| m.cluster.clone())
        .collect()
}

/// The backends `session` is bound to, by cluster (static slots are clusters; dynamic
/// ones `m:<module>`, served by the module's cluster).
fn bound_backends(shared: &Shared, session: &Session) -> Vec<(String, InstanceKey)> {
    session
        .bindings()
        .into_iter()
        .filter_map(|(slot, backend)| {
            let cluster = match slot.strip_prefix("m:") {
                Some(m) => m
                    .parse()
                    .ok()
                    .and_then(|m| shared.settings.modules.get(&m))?
                    .cluster
                    .clone(),
                None => slot,
            };
            Some((cluster, backend))
        })
        .collect()
}

/// Tells the backends that may hold state for a resumed session that the session is on
/// this gateway now: their pushes and fan-out for it go through this gateway's
/// connection, which carries the command.
pub(super) async fn rebind(shared: Arc<Shared>, session: Arc<Session>) {
    let cmd = || {
        command("rebind", Bytes::new())
            .with_head(wire::SESSION, session.id.clone())
            .with_head(wire::GATEWAY, shared.settings.id.clone())
    };
    for cluster in keyed_clusters(&shared) {
        if let Some(client) = shared.backends().get(&cluster) {
            for (backend, r) in client.send_oneway_to_all(cmd(), None).await {
                if let Err(e) = r {
                    tracing::debug!(session = %session.id, %cluster, backend = %backend, error = %e, "rebind not sent");
                }
            }
        }
    }
    for (cluster, backend) in bound_backends(&shared, &session) {
        let Some(client) = shared.backends().get(&cluster) else {
            continue;
        };
        if let Err(e) = client.send_oneway_to(&backend, cmd(), None).await {
            tracing::debug!(session = %session.id, %cluster, %backend, error = %e, "rebind not sent");
        }
    }
}

/// Tells the backends, as sessions end, that they ended: each backend drops what it
/// keeps for them (a room its member). Runs until the gateway stops.
pub(super) async fn announce_ended(shared: Arc<Shared>) {
    let keyed = keyed_clusters(&shared);
    loop {
        let ended = tokio::select! {
            e = shared.sessions.ended().next() => e,
            _ = shared.stop.cancelled() => return,
        };
        // Every keyed cluster's backends hear of every ended session; a bound backend
        // of the sessions bound to it (one command per backend and batch).
        let mut everyone: Vec<&str> = Vec::new();
        let mut bound: BTreeMap<(String, InstanceKey), Vec<&str>> = BTreeMap::new();
        for s in &ended {
            everyone.push(&s.id);
            for (cluster, backend) in bound_backends(&shared, s) {
                if !keyed.contains(&cluster) {
                    bound.entry((cluster, backend)).or_default().push(&s.id);
                }
            }
        }
        for ids in everyone.chunks(ENDED_PER_COMMAND) {
            for cluster in &keyed {
                if let Some(client) = shared.backends().get(cluster) {
                    for (backend, r) in client.send_oneway_to_all(ended_command(ids), None).await {
                        if let Err(e) = r {
                            tracing::debug!(%cluster, backend = %backend, error = %e, "ended not sent");
                        }
                    }
                }
            }
        }
        for ((cluster, backend), ids) in bound {
            let Some(client) = shared.backends().get(&cluster) else {
                continue;
            };
            for ids in ids.chunks(ENDED_PER_COMMAND) {
                if let Err(e) = client
                    .send_oneway_to(&backend, ended_command(ids), None)
                    .await
                {
                    tracing::debug!(%cluster, %backend, error = %e, "ended not sent");
                }
            }
        }
    }
}

fn ended_command(ids: &[&str]) -> meshline::rpc::Payload {
    command("ended", Bytes::new()).with_head(wire::TO, ids.join(","))
}
