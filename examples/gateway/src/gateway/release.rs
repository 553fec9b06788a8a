//! Session bindings whose backend is gone, released and told at once.
//!
//! A session bound to a backend (a static module's cluster, or a dynamic module the
//! game bound) depends on it: the game state it holds (a bag, a match) and the pushes it
//! sends. When that backend leaves its cluster's alive set while others are alive (it
//! crashed, or went silent and the rpc-client's heartbeat or probe closed its
//! connection), every connected session bound to it has the binding released and gets
//! `REBOUND` (module 0, opcode 9, sequence 0: no request caused it) naming the modules
//! whose binding moved, so a client waiting for that backend's pushes learns at once
//! that they will not come; its next request of those modules goes to another backend.
//!
//! A session with no connection keeps its binding until its next request after a resume,
//! which releases it and sends `REBOUND` before the reply (see [`route`](super::route)).
//! With no backend alive at all, bindings are kept: requests are held until one comes
//! back (the bound backend restarting, most likely; see [`protect`](super::protect)).
//! A binding released by a request (`REBOUND` before its reply) is not released here
//! again, nor the other way round: a session is told once.

use std::sync::Weak;

use bytes::Bytes;
use meshline::rpc::{AliveSet, RpcClient};

use super::core::{Shared, alive_changed};
use super::forward::{push, rebound_modules};
use super::protocol::{self, ClientFrame, GATEWAY_MODULE, op};
use super::route;
use super::settings::ModuleKind;

/// Follows the alive set of `cluster` (served by `client`) and releases the bindings to
/// backends that left it (module docs). Returns when the gateway stops or is dropped.
pub(crate) async fn follow(shared: Weak<Shared>, cluster: String, client: RpcClient) {
    // The binding slots served by this cluster, each with the modules a REBOUND names.
    let (slots, stop) = match shared.upgrade() {
        Some(s) => {
            let mut slots: Vec<(String, Bytes)> = s
                .settings
                .modules
                .values()
                .filter(|m| {
                    m.cluster == cluster
                        && matches!(m.kind, ModuleKind::Static | ModuleKind::Dynamic)
                })
                .filter_map(|m| Some((route::slot(m)?, rebound_modules(&s.settings, m))))
                .collect();
            slots.sort();
            // Every static module of the cluster shares one slot.
            slots.dedup_by(|a, b| a.0 == b.0);
            (slots, s.stop.clone())
        }
        None => return,
    };
    if slots.is_empty() {
        return;
    }
    let mut alive = client.subscribe_alive();
    loop {
        tokio::select! {
            changed = alive_changed(&mut alive, &shared) => {
                let Some((shared, now)) = changed else { return };
                release(&shared, &cluster, &slots, &now);
            }
            _ = stop.cancelled() => return,
        }
    }
}

/// Releases every connected session's binding in `slots` whose backend is not in
/// `alive` (unless nothing is alive), and tells each session.
fn release(shared: &Shared, cluster: &str, slots: &[(String, Bytes)], alive: &AliveSet) {
    if alive.is_empty() {
        return;
    }
    let mut released = 0u64;
    for session in shared.sessions.members("*") {
        let Some(link) = session.link() else {
            continue;
        };
        for (slot, modules) in slots {
            let Some(backend) = session.binding(slot) else {
                continue;
            };
            if alive.get(&backend).is_some() || !session.release(slot, &backend) {
                continue;
            }
            released += 1;
            tracing::debug!(session = %session.id, %cluster, %slot, %backend, "binding released: its backend is gone");
            push(
                shared,
                &link.outbound,
                ClientFrame::new(GATEWAY_MODULE, op::REBOUND, 0, modules.clone())
                    .with_flags(protocol::RELIABLE),
            );
        }
    }
    if released > 0 {
        shared
            .stats
            .rebound
            .fetch_add(released, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(%cluster, sessions = released, "bindings to a backend that left released");
    }
}
