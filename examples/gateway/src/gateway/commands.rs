//! What backends push to the gateway: commands (send, broadcast, groups, kick,
//! bindings, state, load reports; see [`wire`]) and [`command`] to build one.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use meshline::Instance;
use meshline::rpc::{InboundRequest, Payload};

use super::core::Shared;
use super::forward::push;
use super::kick::Kick;
use super::protocol::{self, ClientFrame};
use super::wire;

/// A command a backend pushed (see [`wire`]).
pub(super) fn backend_command(shared: &Shared, cluster: &str, req: InboundRequest) {
    let head = &req.payload.head;
    let Some(cmd) = head.get(wire::CMD) else {
        tracing::debug!(%cluster, "backend request without a command; ignored");
        return;
    };
    // The sending backend: its connection's label is the instance as the registry
    // listed it.
    let backend = Instance::parse(req.connection.label())
        .ok()
        .map(|i| i.key().clone());
    let frame = || {
        let module = head
            .get(wire::MODULE)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let opcode = head
            .get(wire::OPCODE)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let flags = if head.get(wire::RELIABLE) == Some("1") {
            protocol::RELIABLE
        } else {
            0
        };
        // `Bytes` clone: every member's frame shares the one body.
        ClientFrame::new(module, opcode, 0, req.payload.body.clone()).with_flags(flags)
    };
    let to = || wire::list(head.get(wire::TO));
    match cmd {
        // Each member's copy is numbered and kept by its session (reliable ones), and
        // written if the session is connected.
        "send" => {
            for sid in to() {
                if let Some(s) = shared.sessions.get(sid) {
                    s.deliver(frame(), |outbound, f| {
                        shared.stats.pushed.fetch_add(1, Ordering::Relaxed);
                        push(shared, outbound, f);
                    });
                }
            }
        }
        "bcast" => {
            shared.stats.fanouts.fetch_add(1, Ordering::Relaxed);
            let group = head.get(wire::GROUP).unwrap_or("*");
            let f = frame();
            for s in shared.sessions.members(group) {
                s.deliver(f.clone(), |outbound, f| {
                    shared.stats.pushed.fetch_add(1, Ordering::Relaxed);
                    push(shared, outbound, f);
                });
            }
        }
        "join" | "leave" => {
            let Some(group) = head.get(wire::GROUP) else {
                return;
            };
            for sid in to() {
                if cmd == "join" {
                    shared.sessions.join(sid, group);
                } else {
                    shared.sessions.leave(sid, group);
                }
            }
        }
        "kick" => {
            let reason = head.get(wire::REASON).unwrap_or("kicked").to_string();
            let keep = head.get(wire::KEEP) == Some("1");
            for sid in to() {
                let session = if keep {
                    shared.sessions.get(sid)
                } else {
                    shared.sessions.remove(sid)
                };
                if let Some(l) = session.and_then(|s| s.link()) {
                    l.outbound.kick(Kick::Game, &reason);
                }
            }
        }
        "bind" | "unbind" => {
            let Some(backend) = backend else { return };
            for sid in to() {
                let Some(s) = shared.sessions.get(sid) else {
                    continue;
                };
                for m in wire::list(head.get(wire::MODULES)) {
                    let slot = format!("m:{m}");
                    if cmd == "bind" {
                        s.bind(slot, backend.clone());
                    } else {
                        s.unbind(&slot);
                    }
                }
            }
        }
        "state" => {
            let state = String::from_utf8_lossy(&req.payload.body).into_owned();
            for sid in to() {
                if let Some(s) = shared.sessions.get(sid) {
                    s.set_user_state(state.clone());
                }
            }
        }
        "disable" | "enable" | "load" => {
            let Some(backend) = backend else { return };
            let refuse = match cmd {
                "disable" => true,
                "enable" => false,
                _ => {
                    let load = std::str::from_utf8(&req.payload.body)
                        .ok()
                        .and_then(|v| v.trim().parse::<u32>().ok());
                    // A report that is not a number says nothing: ignored.
                    let Some(load) = load else {
                        tracing::debug!(%cluster, %backend, "load report that is not a number; ignored");
                        return;
                    };
                    // Shedding reads every report; new sessions avoid the overloaded.
                    shared.protect.report_load(cluster, backend.clone(), load);
                    load > 90
                }
            };
            let mut r = shared.refused.lock().unwrap_or_else(|p| p.into_inner());
            let set = r.entry(cluster.to_string()).or_default();
            if refuse {
                set.insert(backend);
            } else {
                set.remove(&backend);
            }
        }
        other => tracing::debug!(%cluster, cmd = other, "unknown backend command; ignored"),
    }
}

/// Builds a backend command (for backends; see [`wire`]).
pub fn command(cmd: &str, body: impl Into<Bytes>) -> Payload {
    Payload::new(body).with_head(wire::CMD, cmd)
}
