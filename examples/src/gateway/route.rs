//! Routing one client message to a backend: which cluster, which backend in it (balanced,
//! or the one the session is bound to), and with what trusted identity.

use std::sync::Arc;

use bytes::Bytes;
use meshline::InstanceKey;
use meshline::loadbalance::PickRequest;
use meshline::rpc::{CallOptions, HeadMap, Payload, RpcClient, RpcError};

use super::protocol::ClientFrame;
use super::session::Session;
use super::settings::{ModuleKind, ModuleRoute, RouteKey};
use super::wire;

/// Who is asking: the facts the gateway stamps on every forwarded message.
#[derive(Debug, Clone)]
pub struct Identity<'a> {
    /// The session.
    pub session: &'a Session,
    /// This gateway's id.
    pub gateway: &'a str,
    /// The client's address.
    pub addr: std::net::SocketAddr,
}

/// The RPC payload for a client frame: the body untouched, the head map written by the
/// gateway only.
pub fn forward_payload(frame: &ClientFrame, who: &Identity<'_>) -> Payload {
    let mut payload = Payload::new(frame.payload.clone());
    // One allocation for the ten entries; the keys are constants (not copied).
    payload.head = HeadMap::with_capacity(10);
    payload
        .with_head(wire::MODULE, frame.module.to_string())
        .with_head(wire::OPCODE, frame.opcode.to_string())
        .with_head(wire::SEQ, frame.seq.to_string())
        .with_head(wire::ACCOUNT, who.session.account.clone())
        .with_head(wire::SESSION, who.session.id.clone())
        .with_head(wire::GATEWAY, who.gateway.to_string())
        .with_head(wire::ADDR, who.addr.to_string())
        .with_head(wire::ROLE, who.session.role())
        .with_head(wire::STATE, who.session.user_state())
        .with_head(wire::TRACE, trace_id())
}

/// A new trace id ([`wire::TRACE`]): 64 random bits in hex. Random rather than a
/// counter so ids from several gateways (and restarts of one) do not collide, with no
/// state shared between the tasks that forward.
pub fn trace_id() -> String {
    format!("{:016x}", fastrand::u64(..))
}

/// The binding slot of a module: its cluster for static modules, `m:<id>` for dynamic.
pub fn slot(route: &ModuleRoute) -> Option<String> {
    match route.kind {
        ModuleKind::Stateless => None,
        ModuleKind::Static => Some(route.cluster.clone()),
        ModuleKind::Dynamic => Some(format!("m:{}", route.id)),
    }
}

/// Why a message could not be routed (sent to the client as an error reply).
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// The module id is not configured.
    #[error("unknown module {0}")]
    UnknownModule(u16),
    /// The session is bound to a backend that is gone: its state went with it.
    #[error("the backend holding this session's {slot} state ({backend}) is unavailable")]
    BoundBackendGone {
        /// Binding slot.
        slot: String,
        /// The backend.
        backend: InstanceKey,
    },
    /// The call failed.
    #[error(transparent)]
    Rpc(#[from] RpcError),
}

/// Sends `frame` to the right backend of `client` and returns the answer.
///
/// `refused` lists backends that take no new sessions (disabled or overloaded); they
/// are excluded when a new static binding is made.
pub async fn route(
    route: &ModuleRoute,
    client: &RpcClient,
    frame: &ClientFrame,
    who: &Identity<'_>,
    refused: &[InstanceKey],
) -> Result<Payload, RouteError> {
    let payload = forward_payload(frame, who);
    if let Some(slot) = slot(route)
        && let Some(bound) = who.session.binding(&slot)
    {
        return match client.call_to(&bound, payload, None).await {
            Ok(r) => Ok(r.payload),
            Err(RpcError::NoEndpoint { .. }) => Err(RouteError::BoundBackendGone {
                slot,
                backend: bound,
            }),
            Err(e) => Err(e.into()),
        };
    }
    // Only the key a route balances by is read (stateless unkeyed routes, the common
    // case, read none: no copy, no session lock).
    let role: String;
    let prefix: Bytes;
    let mut pick = PickRequest::default();
    match route.key {
        RouteKey::None => {}
        RouteKey::Account => pick = pick.with_key(who.session.account.as_bytes()),
        RouteKey::Role => {
            role = who.session.role();
            pick = pick.with_key(role.as_bytes());
        }
        RouteKey::Source => pick = pick.with_source(who.addr.ip()),
        RouteKey::Prefix(n) => {
            prefix = frame.payload.slice(..n.min(frame.payload.len()));
            pick = pick.with_key(&prefix);
        }
    }
    let new_binding = route.kind == ModuleKind::Static;
    if new_binding && !refused.is_empty() {
        pick = pick.excluding(refused);
    }
    let r = client.call(payload, CallOptions::route(pick)).await?;
    if new_binding && let Some(slot) = slot(route) {
        // Zeze's static binding: this backend now serves every static module of its
        // cluster for this session.
        who.session.bind(slot, r.endpoint.key().clone());
    }
    Ok(r.payload)
}

/// Shares a refused-backends list cheaply.
pub type Refused = Arc<[InstanceKey]>;
