//! The hot path: one client message forwarded to its backend (bulkhead, breaker,
//! hold, routing) and the answer pushed back on the client's queue.
//!
//! What a client is told when its request gets no backend answer names the module and
//! the kind of failure, never a backend: addresses and cluster internals stay in the
//! gateway's log (with the message's trace id).

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use meshline::InstanceKey;
use meshline::rpc::RpcClient;

use super::core::Shared;
use super::outbound::{Outbound, Pushed};
use super::protect::Denied;
use super::protocol::{self, ClientFrame, GATEWAY_MODULE, op};
use super::route::{self, Identity, RouteContext, RouteError};
use super::session::{Link, Session};
use super::settings::{GatewaySettings, ModuleKind, ModuleRoute};
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
    // Only a new static binding (none yet, or its backend gone) consults the backends
    // that take no new sessions: every other message skips this work.
    let refused = if route.kind == ModuleKind::Static
        && route::slot(route).is_some_and(|slot| {
            session
                .binding(&slot)
                .is_none_or(|b| client.alive().get(&b).is_none())
        }) {
        refused_backends(shared, &route.cluster, client)
    } else {
        Vec::new()
    };
    let who = Identity {
        session,
        gateway: &shared.settings.id,
        addr: link.addr,
        addr_text: &link.addr_text,
    };
    shared.stats.forwarded.fetch_add(1, Ordering::Relaxed);
    let _timer = shared.metrics.time(frame.module);
    let rebound = AtomicBool::new(false);
    // One trace id for the message, whatever its attempts: a backend that sees it twice
    // (a re-send after an attempt that may have reached a backend, `rs=1`) knows the
    // request is the same one (see `wire::RESENT`).
    let mut trace = [0; 16];
    let trace = route::trace_id_into(&mut trace);
    let maybe_delivered = AtomicBool::new(false);
    // One call per attempt (held while the cluster has no endpoint, then sent).
    let attempt = || async {
        let ctx = RouteContext {
            refused: &refused,
            keys: &shared.keys,
            rebound: &rebound,
            trace,
            resent: maybe_delivered.load(Ordering::Relaxed),
        };
        let r = route::route(route, client, &frame, &who, ctx).await;
        if let Err(RouteError::Rpc(e)) = &r
            && !e.is_not_delivered()
        {
            maybe_delivered.store(true, Ordering::Relaxed);
        }
        r
    };
    let result = shared.protect.forward(pass, client, attempt).await;
    if rebound.load(Ordering::Relaxed) {
        shared.stats.rebound.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(session = %session.id, module = route.id, "binding released: its backend is gone");
        link.outbound.push(
            ClientFrame::new(
                GATEWAY_MODULE,
                op::REBOUND,
                frame.seq,
                rebound_modules(&shared.settings, route),
            )
            .with_flags(protocol::RELIABLE),
        );
    }
    match result {
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
            tracing::debug!(session = %session.id, module = route.id, error = %e, "request failed");
            push(
                shared,
                &link.outbound,
                reply(protocol::ERROR, Bytes::from(client_error(&e, route))),
            );
        }
    }
}

/// The modules whose binding moves with `route`'s: every static module of its cluster
/// (one binding serves them all), or the dynamic module alone.
pub(super) fn rebound_modules(settings: &GatewaySettings, route: &ModuleRoute) -> Bytes {
    let ids: Vec<String> = match route.kind {
        ModuleKind::Static => settings
            .modules
            .values()
            .filter(|m| m.kind == ModuleKind::Static && m.cluster == route.cluster)
            .map(|m| m.id.to_string())
            .collect(),
        _ => vec![route.id.to_string()],
    };
    Bytes::from(ids.join(" "))
}

/// What the client is told about a request that got no backend answer: the module and
/// what went wrong, no backend address.
pub(super) fn client_error(e: &Denied, route: &ModuleRoute) -> String {
    use meshline::rpc::RpcError;
    let name = &route.name;
    match e {
        Denied::Busy(b) => b.to_string(),
        Denied::Route(RouteError::UnknownModule(m)) => format!("unknown module {m}"),
        Denied::Route(RouteError::Rpc(e)) => match e {
            RpcError::Timeout { .. } => {
                format!(
                    "timeout: {name} did not answer in time; the request may have been processed"
                )
            }
            RpcError::MaybeDelivered { .. } => format!(
                "unavailable: {name} lost the connection; the request may have been processed"
            ),
            RpcError::NoEndpoint { .. }
            | RpcError::NotWritten { .. }
            | RpcError::RetriesExhausted { .. } => {
                format!("unavailable: {name}; the request was not processed")
            }
            RpcError::Overloaded { .. } => format!("busy: {name} overloaded"),
            _ => format!("error: {name} request failed"),
        },
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
    let mut refused = shared.refused_in(cluster);
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
