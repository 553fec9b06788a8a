//! Keyed modules (`kind: keyed`): state that belongs to a key, not to a session (a room,
//! a match, a guild), lives on one backend, and every gateway sends that key's requests
//! there.
//!
//! **Where a key lives.** Each request of a keyed module carries its key in the payload
//! (the module's `key`: `word`, the payload up to its first space, or `prefix:N`). The
//! gateway sends it to the key's *home*: of the cluster's alive backends, the one with
//! the highest rendezvous score `mix(xxh3(key) ^ xxh3(host, port))`. The score depends
//! on nothing but the key and the backends' addresses, so every gateway that sees the
//! same alive backends picks the same home, whichever gateway a room's members use, and
//! the room has one copy. A key's home changes only when the alive set changes: when its
//! home leaves (only its keys move, spread over the others) or when a backend joins
//! (only the keys it now wins move to it, about 1/n of them).
//!
//! **When a key moves.** Every gateway remembers the home each key it routed went to
//! (bounded: keys with no member on this gateway are forgotten). When the alive set of a
//! keyed module's cluster changes, each gateway compares, for each of its keys, the home
//! it remembers with the new one; for a key that moved and has members here (the
//! sessions in the fan-out group `<module name>:<key>`, the group the backend joins the
//! key's members to), it:
//!
//! 1. tells the old home, if still alive, to drop the key (`cmd=dropkey`, see [`wire`]);
//! 2. tells the new home the key is its now and who its members on this gateway are
//!    (`cmd=moved`, with [`wire::KEY`] and [`wire::TO`]): the example game backend starts
//!    the room afresh with those members;
//! 3. tells each member: a `MOVED` push (module 0, `module key`), numbered like every
//!    reliable push, so a member that was disconnected gets it on resume.
//!
//! **State.** The state the old home held is lost: a backend that died took it, and
//! one still alive drops it (handing a room's state over is the game's business; the
//! protocol says it is lost, and the example room restarts its snapshot count). A
//! backend that comes back after a crash wins its keys back: they move again, and again
//! start afresh.
//!
//! Two gateways that see the alive set change at slightly different moments route a
//! moving key to different homes for that moment; each tells the new home, and the old
//! home's `dropkey` ends its copy.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use meshline::InstanceKey;
use meshline::rpc::{AliveEndpoint, AliveSet, RpcClient};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use super::commands::command;
use super::core::{Shared, alive_changed};
use super::forward::push;
use super::protocol::{self, ClientFrame, GATEWAY_MODULE, op};
use super::settings::{GatewaySettings, ModuleKind, ModuleRoute};
use super::wire;

/// Keys remembered per module before the ones without a member here are forgotten.
const REMEMBERED: usize = 65_536;
/// How often keys without a member here are forgotten.
const FORGET_EVERY: Duration = Duration::from_secs(10);

/// The splitmix64 finaliser: a full-avalanche mix of the combined hashes.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The rendezvous hash of a backend: its host's bytes, seeded with its port.
fn backend_hash(key: &InstanceKey) -> u64 {
    xxh3_64_with_seed(key.host.as_bytes(), u64::from(key.port))
}

/// The home of `key` among `alive`: the backend with the highest rendezvous score (ties,
/// which need equal 64-bit scores, go to the first in the alive set's order).
pub fn home<'a>(alive: &'a AliveSet, key: &[u8]) -> Option<&'a AliveEndpoint> {
    let k = xxh3_64(key);
    alive
        .endpoints()
        .iter()
        .map(|e| (mix(k ^ backend_hash(e.instance.key())), e))
        .reduce(|best, next| if next.0 > best.0 { next } else { best })
        .map(|(_, e)| e)
}

/// The fan-out group of `key` of module `route`: `<module name>:<key>`.
pub fn group(route: &ModuleRoute, key: &str) -> String {
    format!("{}:{key}", route.name)
}

/// The homes this gateway routed each keyed module's keys to.
#[derive(Debug, Default)]
pub struct KeyHomes {
    modules: HashMap<u16, Mutex<HashMap<String, InstanceKey>>>,
    moved: AtomicU64,
}

impl KeyHomes {
    /// A table for every keyed module of `settings`.
    pub(crate) fn new(settings: &GatewaySettings) -> KeyHomes {
        KeyHomes {
            modules: settings
                .modules
                .values()
                .filter(|m| m.kind == ModuleKind::Keyed)
                .map(|m| (m.id, Mutex::default()))
                .collect(),
            moved: AtomicU64::new(0),
        }
    }

    /// Remembers that `key` of `module` went to `backend`, unless a home is remembered
    /// already (a different one is for the move check to find).
    pub(crate) fn routed(&self, module: u16, key: &[u8], backend: &InstanceKey) {
        let Some(table) = self.modules.get(&module) else {
            return;
        };
        let key = String::from_utf8_lossy(key);
        let mut t = table.lock().unwrap_or_else(|p| p.into_inner());
        if !t.contains_key(key.as_ref()) {
            t.insert(key.into_owned(), backend.clone());
        }
    }

    /// The home remembered for `key` of `module`.
    pub fn remembered(&self, module: u16, key: &str) -> Option<InstanceKey> {
        let t = self.modules.get(&module)?;
        t.lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    /// Keys moved so far (each counted once per gateway that moved it).
    pub fn moved_total(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }

    fn table(
        &self,
        module: u16,
    ) -> Option<std::sync::MutexGuard<'_, HashMap<String, InstanceKey>>> {
        self.modules
            .get(&module)
            .map(|t| t.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// One key that moved.
struct Move {
    key: String,
    from: InstanceKey,
    to: InstanceKey,
}

/// Follows the alive set of `cluster` (served by `client`) for the keyed modules it
/// serves: moves keys whose home changed (see the module docs) and forgets keys without
/// members here. Ends when the gateway is dropped or stopped.
pub(crate) async fn follow(shared: Weak<Shared>, cluster: String, client: RpcClient) {
    let modules: Vec<ModuleRoute> = match shared.upgrade() {
        Some(s) => s
            .settings
            .modules
            .values()
            .filter(|m| m.kind == ModuleKind::Keyed && m.cluster == cluster)
            .cloned()
            .collect(),
        None => return,
    };
    if modules.is_empty() {
        return;
    }
    let stop = match shared.upgrade() {
        Some(s) => s.stop.clone(),
        None => return,
    };
    let mut alive = client.subscribe_alive();
    let mut forget = tokio::time::interval(FORGET_EVERY);
    loop {
        tokio::select! {
            changed = alive_changed(&mut alive, &shared) => {
                let Some((shared, now)) = changed else { return };
                for route in &modules {
                    move_keys(&shared, route, &client, &now).await;
                }
            }
            _ = forget.tick() => {
                let Some(shared) = shared.upgrade() else { return };
                for route in &modules {
                    forget_memberless(&shared, route, 0);
                }
            }
            _ = stop.cancelled() => return,
        }
    }
}

/// Forgets `route`'s keys without a member on this gateway, when more than `over` are
/// remembered.
fn forget_memberless(shared: &Shared, route: &ModuleRoute, over: usize) {
    let Some(mut t) = shared.keys.table(route.id) else {
        return;
    };
    if t.len() > over {
        t.retain(|key, _| !shared.sessions.members(&group(route, key)).is_empty());
    }
}

/// Moves the keys of `route` whose home in `alive` is not the one remembered.
async fn move_keys(shared: &Shared, route: &ModuleRoute, client: &RpcClient, alive: &AliveSet) {
    if alive.is_empty() {
        // No home at all: requests are held (see `protect`); keys move when one is back.
        return;
    }
    forget_memberless(shared, route, REMEMBERED);
    let moves: Vec<Move> = {
        let Some(mut t) = shared.keys.table(route.id) else {
            return;
        };
        t.iter_mut()
            .filter_map(|(key, from)| {
                let to = home(alive, key.as_bytes())?.instance.key().clone();
                (to != *from).then(|| Move {
                    key: key.clone(),
                    from: std::mem::replace(from, to.clone()),
                    to,
                })
            })
            .collect()
    };
    for m in moves {
        let members = shared.sessions.members(&group(route, &m.key));
        if members.is_empty() {
            continue;
        }
        shared.keys.moved.fetch_add(1, Ordering::Relaxed);
        tracing::info!(module = route.id, key = %m.key, from = %m.from, to = %m.to, members = members.len(), "key moved");
        if alive.get(&m.from).is_some() {
            let drop_it = command("dropkey", Bytes::new())
                .with_head(wire::MODULE, route.id.to_string())
                .with_head(wire::KEY, m.key.clone());
            if let Err(e) = client.send_oneway_to(&m.from, drop_it, None).await {
                tracing::debug!(key = %m.key, error = %e, "dropkey not sent");
            }
        }
        let ids: Vec<&str> = members.iter().map(|s| s.id.as_str()).collect();
        let moved = command("moved", Bytes::new())
            .with_head(wire::MODULE, route.id.to_string())
            .with_head(wire::KEY, m.key.clone())
            .with_head(wire::TO, ids.join(","))
            .with_head(wire::GATEWAY, shared.settings.id.clone());
        if let Err(e) = client.send_oneway_to(&m.to, moved, None).await {
            tracing::debug!(key = %m.key, error = %e, "moved not sent");
        }
        let notice = ClientFrame::new(
            GATEWAY_MODULE,
            op::MOVED,
            0,
            Bytes::from(format!("{} {}", route.id, m.key)),
        )
        .with_flags(protocol::RELIABLE);
        for s in members {
            s.deliver(notice.clone(), |outbound, f| push(shared, outbound, f));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_spreads_and_is_fixed() {
        // Fixed: every gateway, every build computes the same scores.
        assert_eq!(mix(0), 0);
        assert_eq!(mix(1), 0x5692_161d_100b_05e5);
        let k = |port| {
            meshline::Instance::new("127.0.0.1", port)
                .unwrap()
                .key()
                .clone()
        };
        // 3000 keys over 3 backends: each wins roughly a third.
        let backends = [k(7001), k(7002), k(7003)];
        let mut wins = [0usize; 3];
        for i in 0..3000 {
            let key = format!("room{i}");
            let kh = xxh3_64(key.as_bytes());
            let best = (0..3)
                .max_by_key(|&b| mix(kh ^ backend_hash(&backends[b])))
                .unwrap();
            wins[best] += 1;
        }
        assert!(wins.iter().all(|&w| (800..1200).contains(&w)), "{wins:?}");
    }
}
