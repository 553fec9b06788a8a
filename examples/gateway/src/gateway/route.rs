//! Routing one client message to a backend: which cluster, which backend in it (balanced,
//! or the one the session is bound to), and with what trusted identity.

use std::sync::atomic::{AtomicBool, Ordering};

use meshline::InstanceKey;
use meshline::loadbalance::PickRequest;
use meshline::rpc::{CallOptions, HeadMap, Payload, RpcClient, RpcError};

use super::keys::KeyHomes;
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
    /// The same, as text (formatted once per connection).
    pub addr_text: &'a str,
}

/// The RPC payload for a client frame: the body untouched, the head map written by the
/// gateway only.
/// `trace` is the message's trace id, the same for every attempt; `resent` says an
/// earlier attempt may have reached a backend ([`wire::RESENT`]).
pub fn forward_payload(
    frame: &ClientFrame,
    who: &Identity<'_>,
    trace: &str,
    resent: bool,
) -> Payload {
    let mut payload = Payload::new(frame.payload.clone());
    // Two allocations for the entries (the entries, and one buffer for every value);
    // the keys are constants (not copied), numbers are written on the stack, role and
    // user state read under one lock without copies.
    let (mut module, mut opcode, mut seq) = ([0; 10], [0; 10], [0; 10]);
    let mut head = HeadMap::writer(11, 128);
    head.entry(wire::MODULE, decimal(frame.module.into(), &mut module))
        .entry(wire::OPCODE, decimal(frame.opcode.into(), &mut opcode))
        .entry(wire::SEQ, decimal(frame.seq, &mut seq))
        .entry(wire::ACCOUNT, &who.session.account)
        .entry(wire::SESSION, &who.session.id)
        .entry(wire::GATEWAY, who.gateway)
        .entry(wire::ADDR, who.addr_text);
    who.session.with_role_and_state(|role, state| {
        head.entry(wire::ROLE, role).entry(wire::STATE, state);
    });
    head.entry(wire::TRACE, trace);
    if resent {
        head.entry(wire::RESENT, "1");
    }
    payload.head = head.finish();
    payload
}

/// `n` in decimal, written into `digits` without the formatting machinery (three of
/// these per message).
fn decimal(mut n: u32, digits: &mut [u8; 10]) -> &str {
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    std::str::from_utf8(&digits[at..]).unwrap_or_default()
}

/// A new trace id ([`wire::TRACE`]): 64 random bits in hex. Random rather than a
/// counter so ids from several gateways (and restarts of one) do not collide, with no
/// state shared between the tasks that forward.
pub fn trace_id() -> String {
    trace_id_into(&mut [0; 16]).to_string()
}

/// A new trace id written into `out` (no allocation).
pub(super) fn trace_id_into(out: &mut [u8; 16]) -> &str {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let x = fastrand::u64(..);
    for (i, d) in out.iter_mut().enumerate() {
        *d = HEX[((x >> ((15 - i) * 4)) & 0xf) as usize];
    }
    std::str::from_utf8(out).unwrap_or_default()
}

/// The binding slot of a module: its cluster for static modules, `m:<id>` for dynamic;
/// `None` for modules that bind no session (stateless, keyed).
pub fn slot(route: &ModuleRoute) -> Option<String> {
    match route.kind {
        ModuleKind::Stateless | ModuleKind::Keyed => None,
        ModuleKind::Static => Some(route.cluster.clone()),
        ModuleKind::Dynamic => Some(format!("m:{}", route.id)),
    }
}

/// Why a message could not be routed (the client is told in an error reply that names
/// no backend; see `forward`).
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// The module id is not configured.
    #[error("unknown module {0}")]
    UnknownModule(u16),
    /// The call failed.
    #[error(transparent)]
    Rpc(#[from] RpcError),
}

/// What routing needs besides the message: the backends that take no new sessions, the
/// keyed modules' homes, and where to say that a binding moved.
#[derive(Debug, Clone, Copy)]
pub struct RouteContext<'a> {
    /// Backends that take no new sessions (disabled, overloaded, another major
    /// version): a new static binding avoids them.
    pub refused: &'a [InstanceKey],
    /// The homes of keyed modules' keys.
    pub keys: &'a KeyHomes,
    /// Set when the session's binding for this module was released because its
    /// backend is gone (the caller sends `REBOUND`).
    pub rebound: &'a AtomicBool,
    /// The message's trace id, kept by every attempt.
    pub trace: &'a str,
    /// An earlier attempt may have reached a backend: this one is marked
    /// [`wire::RESENT`].
    pub resent: bool,
}

fn no_endpoint(route: &ModuleRoute) -> RouteError {
    RouteError::Rpc(RpcError::NoEndpoint {
        target: route.cluster.clone(),
    })
}

/// Sends `frame` to the right backend of `client` and returns the answer.
///
/// - keyed modules: to the key's home (see [`keys`](super::keys));
/// - a session bound for the module (static or dynamic): to that backend while it is
///   alive. A binding whose backend is gone (not alive while others are) is released:
///   the request is balanced as if the session had none (a static module binds the new
///   backend), and `ctx.rebound` is set;
/// - otherwise balanced by the module's `key`, a new static binding avoiding
///   `ctx.refused`.
///
/// With no alive backend at all the error is [`RpcError::NoEndpoint`], which the caller
/// holds (see [`protect`](super::protect)).
pub async fn route(
    route: &ModuleRoute,
    client: &RpcClient,
    frame: &ClientFrame,
    who: &Identity<'_>,
    ctx: RouteContext<'_>,
) -> Result<Payload, RouteError> {
    if route.kind == ModuleKind::Keyed {
        let key = route.key.of_payload(&frame.payload).unwrap_or_default();
        let home = {
            let alive = client.alive();
            match super::keys::home(&alive, key) {
                Some(e) => e.instance.key().clone(),
                None => return Err(no_endpoint(route)),
            }
        };
        let r = client
            .call_to(
                &home,
                forward_payload(frame, who, ctx.trace, ctx.resent),
                None,
            )
            .await?;
        ctx.keys.routed(route.id, key, &home);
        return Ok(r.payload);
    }
    let slot = slot(route);
    if let Some(slot) = &slot
        && let Some(bound) = who.session.binding(slot)
    {
        let alive = client.alive();
        if alive.get(&bound).is_some() {
            drop(alive);
            return Ok(client
                .call_to(
                    &bound,
                    forward_payload(frame, who, ctx.trace, ctx.resent),
                    None,
                )
                .await?
                .payload);
        }
        if alive.is_empty() {
            // Nothing alive: held, and sent once something is back (the bound backend
            // restarting, most likely).
            return Err(no_endpoint(route));
        }
        // Its backend is gone and others are alive: released, balanced again below.
        who.session.unbind(slot);
        ctx.rebound.store(true, Ordering::Relaxed);
    }
    let payload = forward_payload(frame, who, ctx.trace, ctx.resent);
    // Only the key a route balances by is read (stateless unkeyed routes, the common
    // case, read none: no copy, no session lock).
    let role: String;
    let mut pick = PickRequest::default();
    match route.key {
        RouteKey::None => {}
        RouteKey::Account => pick = pick.with_key(who.session.account.as_bytes()),
        RouteKey::Role => {
            role = who.session.role();
            pick = pick.with_key(role.as_bytes());
        }
        RouteKey::Source => pick = pick.with_source(who.addr.ip()),
        RouteKey::Prefix(_) | RouteKey::Word => {
            pick = pick.with_key(route.key.of_payload(&frame.payload).unwrap_or_default());
        }
    }
    let new_binding = route.kind == ModuleKind::Static;
    if new_binding && !ctx.refused.is_empty() {
        pick = pick.excluding(ctx.refused);
    }
    let r = client.call(payload, CallOptions::route(pick)).await?;
    if new_binding && let Some(slot) = slot {
        // Zeze's static binding: this backend now serves every static module of its
        // cluster for this session.
        who.session.bind(slot, r.endpoint.key().clone());
    }
    Ok(r.payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_trace_ids_are_written_as_before() {
        for n in [0u32, 7, 10, 65_535, u32::MAX] {
            assert_eq!(decimal(n, &mut [0; 10]), n.to_string());
        }
        let t = trace_id();
        assert_eq!(t.len(), 16);
        assert!(
            t.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_ne!(trace_id(), t);
    }
}
