//! The hot path: one client message forwarded to its backend (bulkhead, breaker,
//! hold, routing) and the answer pushed back on the client's queue.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use meshline::InstanceKey;
use meshline::rpc::RpcClient;

use super::core::Shared;
use super::outbound::{Outbound, Pushed};
use super::protocol::{self, ClientFrame};
use super::route::{self, Identity};
use super::session::{Link, Session};
use super::settings::ModuleKind;
use super::wire;

pub(super) async fn forward(
    shared: &Shared,
    session: &Session,
    link: &Link,
    frame: ClientFrame,
    ticket: u64,
) {
    let reply = |flags: u8, payload: Bytes| {
        ClientFrame::new(frame.module, frame.opcode, frame.seq, payload)
            .with_flags(protocol::REPLY | protocol::RELIABLE | flags)
    };
    let Some(route) = shared.settings.modules.get(&frame.module) else {
        link.outbound.push(reply(
            protocol::ERROR,
            Bytes::from(format!("unknown module {}", frame.module)),
        ));
        return;
    };
    let Some(client) = shared.backends().get(&route.cluster) else {
        return;
    };
    // Bulkhead, shedding, breaker: a busy answer at once, without a backend.
    let pass = match shared.protect.admit(route, frame.opcode, client, ticket) {
        Ok(p) => p,
        Err(busy) => {
            return push(
                shared,
                &link.outbound,
                reply(protocol::ERROR, busy.to_string().into()),
            );
        }
    };
    // Only a new static binding consults the backends that take no new sessions:
    // every other message skips this work.
    let refused = if route.kind == ModuleKind::Static
        && route::slot(route).is_some_and(|slot| session.binding(&slot).is_none())
    {
        refused_backends(shared, &route.cluster, client)
    } else {
        Vec::new()
    };
    let who = Identity {
        session,
        gateway: &shared.settings.id,
        addr: link.addr,
    };
    shared.stats.forwarded.fetch_add(1, Ordering::Relaxed);
    let _timer = shared.metrics.time(frame.module);
    // One call per attempt (held while the cluster has no endpoint, then sent).
    let attempt = || route::route(route, client, &frame, &who, &refused);
    match shared.protect.forward(pass, client, attempt).await {
        Ok(answer) => {
            if answer.head.get(wire::NO_REPLY).is_some() {
                return;
            }
            let flags = if answer.head.get(wire::ERROR).is_some() {
                protocol::ERROR
            } else {
                0
            };
            push(shared, &link.outbound, reply(flags, answer.body));
        }
        Err(e) => {
            push(
                shared,
                &link.outbound,
                reply(protocol::ERROR, Bytes::from(e.to_string())),
            );
        }
    }
}

pub(super) fn push(shared: &Shared, outbound: &Outbound, frame: ClientFrame) {
    match outbound.push(frame) {
        Pushed::Queued => {}
        Pushed::QueuedAfterDropping(n) => {
            shared.stats.dropped.fetch_add(n as u64, Ordering::Relaxed);
        }
        Pushed::Dropped => {
            shared.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
        Pushed::Overflow => {
            shared.stats.overflowed.fetch_add(1, Ordering::Relaxed);
        }
        Pushed::Closed => {}
    }
}

/// Backends of `cluster` that take no new sessions: disabled or overloaded (backend
/// commands), or of another major app version than `gateway.app-version`.
fn refused_backends(shared: &Shared, cluster: &str, client: &RpcClient) -> Vec<InstanceKey> {
    let mut refused: Vec<InstanceKey> = shared
        .refused
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(cluster)
        .map(|s| s.iter().cloned().collect())
        .unwrap_or_default();
    if let Some(ours) = &shared.settings.app_version {
        let major = |v: &str| v.split('.').next().unwrap_or("").trim().to_string();
        let want = major(ours);
        for e in client.alive().endpoints() {
            if let Some(v) = e.instance.metadata().get("version")
                && major(v) != want
            {
                refused.push(e.instance.key().clone());
            }
        }
    }
    refused
}
