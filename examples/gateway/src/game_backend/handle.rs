//! What a game backend does with each message a gateway sends: the gateway's commands
//! (`rebind`, `moved`, `dropkey`, `ended`), and the client requests of each module.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use meshline::rpc::{Connection, ConnectionId, InboundRequest, Payload};

use super::{State, modules};
use crate::gateway::{command, wire};

fn answer(body: impl Into<Bytes>) -> Option<Payload> {
    Some(Payload::new(body))
}

/// `rebind`: session `sid` is reached through `conn` (its new gateway) from now on.
fn rebind(state: &State, conn: &Connection, sid: &str) {
    state.rebinds.fetch_add(1, Ordering::Relaxed);
    let mut rooms_in = Vec::new();
    for (name, room) in state
        .rooms
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter_mut()
    {
        if let Some(via) = room.members.get_mut(sid) {
            *via = conn.id();
            rooms_in.push(name.clone());
        }
    }
    // The new gateway may not know the session's groups (a memory store elsewhere):
    // joining again is harmless where it does.
    for room in rooms_in {
        let _ = conn.try_send_oneway(
            command("join", Bytes::new())
                .with_head(wire::TO, sid)
                .with_head(wire::GROUP, format!("room:{room}")),
        );
    }
}

/// Remembers a connection a gateway reaches us through (room fan-out uses it).
fn remember_gateway(state: &State, conn: &Connection) {
    state
        .gateways
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(conn.id(), conn.clone());
}

/// `moved`: room `key` lives here now, with `members` reached through `conn`: started
/// afresh if it is not here yet.
fn moved_here(state: &State, conn: &Connection, key: &str, members: &[&str]) {
    let mut rooms = state.rooms.lock().unwrap_or_else(|p| p.into_inner());
    let room = rooms.entry(key.to_string()).or_default();
    for sid in members {
        room.members.insert(sid.to_string(), conn.id());
    }
    tracing::info!(backend = %state.id, room = key, members = members.len(), "room moved here");
}

/// The room name and the rest of a room payload: `<room>[ <rest>]`.
fn room_of(body: &[u8]) -> (String, String) {
    let text = String::from_utf8_lossy(body);
    match text.split_once(' ') {
        Some((room, rest)) => (room.to_string(), rest.to_string()),
        None => (text.into_owned(), String::new()),
    }
}

/// One client request, as the gateway stamped it: what it asks, who sent it, and the
/// gateway connection it came through.
struct Request<'a> {
    state: &'a State,
    payload: &'a Payload,
    module: u16,
    opcode: u16,
    account: String,
    sid: String,
    trace: &'a str,
    conn: Connection,
}

impl Request<'_> {
    /// The answer to a module or opcode this backend does not serve: an error naming the
    /// trace id, so the client's complaint can be found in the log.
    fn unknown(&self) -> Option<Payload> {
        let (trace, module, opcode) = (self.trace, self.module, self.opcode);
        tracing::debug!(trace, module, opcode, "unknown module or opcode");
        Some(
            Payload::new(format!(
                "unknown module {module} opcode {opcode} (trace {trace})"
            ))
            .with_head(wire::ERROR, "1"),
        )
    }

    /// The error answer for a room that is not held here.
    fn no_room(&self, room: &str) -> Option<Payload> {
        Some(
            Payload::new(format!("no room {room} on {}", self.state.id))
                .with_head(wire::ERROR, "1"),
        )
    }

    /// Sends the gateway command `cmd` for this session and `group` (join / leave).
    fn group_command(&self, cmd: &str, group: String) {
        let _ = self.conn.try_send_oneway(
            command(cmd, Bytes::new())
                .with_head(wire::TO, self.sid.clone())
                .with_head(wire::GROUP, group),
        );
    }

    /// Sends the gateway command `cmd` for this session and the bind module (bind /
    /// unbind).
    fn bind_command(&self, cmd: &str) {
        let _ = self.conn.try_send_oneway(
            command(cmd, Bytes::new())
                .with_head(wire::TO, self.sid.clone())
                .with_head(wire::MODULES, modules::BIND.to_string()),
        );
    }
}

/// A gateway command (`cmd` set in the head: `rebind`, `moved`, `dropkey`, `ended`):
/// never answered.
fn on_command(state: &State, req: &InboundRequest, cmd: &str) {
    let head = &req.payload.head;
    match cmd {
        "rebind" => {
            let conn = req.connection.clone();
            remember_gateway(state, &conn);
            if let Some(sid) = head.get(wire::SESSION) {
                rebind(state, &conn, sid);
            }
        }
        "moved" => {
            let conn = req.connection.clone();
            remember_gateway(state, &conn);
            if let Some(key) = head.get(wire::KEY) {
                let members: Vec<&str> = wire::list(head.get(wire::TO)).collect();
                moved_here(state, &conn, key, &members);
            }
        }
        "ended" => {
            let ended: HashSet<&str> = wire::list(head.get(wire::TO)).collect();
            state.ended.fetch_add(ended.len() as u64, Ordering::Relaxed);
            for room in state
                .rooms
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values_mut()
            {
                room.members.retain(|sid, _| !ended.contains(sid.as_str()));
            }
            let mut bags = state.bags.lock().unwrap_or_else(|p| p.into_inner());
            for sid in &ended {
                bags.remove(*sid);
            }
        }
        "dropkey" => {
            if let Some(key) = head.get(wire::KEY)
                && state
                    .rooms
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(key)
                    .is_some()
            {
                tracing::info!(backend = %state.id, room = key, "room moved away; dropped");
            }
        }
        other => {
            tracing::debug!(cmd = other, "unknown command; ignored");
        }
    }
}

/// One message from a gateway: a command (never answered), or a client request of a
/// module, answered.
pub(super) async fn handle(state: Arc<State>, req: InboundRequest) -> Option<Payload> {
    let head = &req.payload.head;
    if let Some(cmd) = head.get(wire::CMD) {
        on_command(&state, &req, cmd);
        return None;
    }
    state.requests.fetch_add(1, Ordering::Relaxed);
    let module: u16 = head.get(wire::MODULE)?.parse().ok()?;
    let opcode: u16 = head.get(wire::OPCODE)?.parse().ok()?;
    let account = head.get(wire::ACCOUNT).unwrap_or("?").to_string();
    let sid = head.get(wire::SESSION).unwrap_or("").to_string();
    let trace = head.get(wire::TRACE).unwrap_or("");
    tracing::trace!(trace, module, opcode, session = %sid, "request");
    let conn = req.connection.clone();
    remember_gateway(&state, &conn);
    if let Some(gw) = head.get(wire::GATEWAY) {
        state
            .by_gateway
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(gw.to_string(), conn.clone());
    }
    let r = Request {
        state: &state,
        payload: &req.payload,
        module,
        opcode,
        account,
        sid,
        trace,
        conn,
    };
    match module {
        modules::LOBBY => lobby(&r).await,
        modules::CHAT if opcode == 1 => chat(&r),
        modules::ROOM => room(&r),
        modules::INVENTORY => inventory(&r),
        modules::BIND => bind(&r),
        _ => r.unknown(),
    }
}

/// Module 1, lobby: stateless request/response (see the module's doc for the opcodes).
async fn lobby(r: &Request<'_>) -> Option<Payload> {
    let head = &r.payload.head;
    match r.opcode {
        1 => answer(format!("{}@{}", r.account, r.state.id)),
        7 => answer(r.trace.to_string()),
        4 => answer(format!(
            "role={} state={}",
            head.get(wire::ROLE).unwrap_or(""),
            head.get(wire::STATE).unwrap_or("")
        )),
        3 => {
            let ms: u64 = std::str::from_utf8(&r.payload.body)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            answer(format!("slept {ms}"))
        }
        _ => Some(Payload::new(r.payload.body.clone())),
    }
}

/// Module 2, chat, opcode 1: the text to every player, one `bcast` per gateway.
fn chat(r: &Request<'_>) -> Option<Payload> {
    let state = r.state;
    let text = format!(
        "{}: {}",
        r.account,
        String::from_utf8_lossy(&r.payload.body)
    );
    let gateways: Vec<Connection> = state
        .by_gateway
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .filter(|c| !c.is_closed())
        .cloned()
        .collect();
    for g in gateways {
        state.fanout_sends.fetch_add(1, Ordering::Relaxed);
        let cmd = command("bcast", text.clone())
            .with_head(wire::GROUP, "*")
            .with_head(wire::MODULE, modules::CHAT.to_string())
            .with_head(wire::OPCODE, "2")
            .with_head(wire::RELIABLE, "1");
        let _ = g.try_send_oneway(cmd);
    }
    answer("sent")
}

/// Module 3, rooms: join, state, leave, say; every payload starts with the room's name.
fn room(r: &Request<'_>) -> Option<Payload> {
    let (room, rest) = room_of(&r.payload.body);
    match r.opcode {
        1 => room_join(r, room),
        2 => room_state(r, &room),
        3 => room_leave(r, room),
        4 => room_say(r, &room, &rest),
        _ => r.unknown(),
    }
}

/// Opcode 1: the session joins `room` here, and the gateway group `room:<room>`.
fn room_join(r: &Request<'_>, room: String) -> Option<Payload> {
    r.state
        .rooms
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(room.clone())
        .or_default()
        .members
        .insert(r.sid.clone(), r.conn.id());
    r.group_command("join", format!("room:{room}"));
    answer(format!("joined {room} on {}", r.state.id))
}

/// Opcode 2: the room's snapshots and members.
fn room_state(r: &Request<'_>, room: &str) -> Option<Payload> {
    let rooms = r.state.rooms.lock().unwrap_or_else(|p| p.into_inner());
    match rooms.get(room) {
        Some(s) => answer(format!(
            "{room} {} snapshots {} members on {}",
            s.snapshots,
            s.members.len(),
            r.state.id
        )),
        None => r.no_room(room),
    }
}

/// Opcode 3: the session leaves `room` (dropped when empty) and its gateway group.
fn room_leave(r: &Request<'_>, room: String) -> Option<Payload> {
    let mut rooms = r.state.rooms.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = rooms.get_mut(&room) {
        s.members.remove(&r.sid);
        if s.members.is_empty() {
            rooms.remove(&room);
        }
    }
    drop(rooms);
    r.group_command("leave", format!("room:{room}"));
    answer(format!("left {room}"))
}

/// Opcode 4: `text` to every member of `room`, a reliable push (opcode 5), one `bcast`
/// per gateway with members.
fn room_say(r: &Request<'_>, room: &str, text: &str) -> Option<Payload> {
    let state = r.state;
    let via: Vec<Connection> = {
        let rooms = state.rooms.lock().unwrap_or_else(|p| p.into_inner());
        let gws = state.gateways.lock().unwrap_or_else(|p| p.into_inner());
        let Some(s) = rooms.get(room) else {
            return r.no_room(room);
        };
        let ids: HashSet<&ConnectionId> = s.members.values().collect();
        ids.into_iter()
            .filter_map(|i| gws.get(i).cloned())
            .collect()
    };
    for g in via {
        state.fanout_sends.fetch_add(1, Ordering::Relaxed);
        let _ = g.try_send_oneway(
            command("bcast", format!("{}: {text}", r.account))
                .with_head(wire::GROUP, format!("room:{room}"))
                .with_head(wire::MODULE, modules::ROOM.to_string())
                .with_head(wire::OPCODE, "5")
                .with_head(wire::RELIABLE, "1"),
        );
    }
    answer("said")
}

/// Module 5, inventory: opcode 1 puts an item in the session's bag here, opcode 2
/// answers the bag.
fn inventory(r: &Request<'_>) -> Option<Payload> {
    match r.opcode {
        1 => {
            let item = String::from_utf8_lossy(&r.payload.body).into_owned();
            let mut bags = r.state.bags.lock().unwrap_or_else(|p| p.into_inner());
            let bag = bags.entry(r.sid.clone()).or_default();
            bag.push(item);
            answer(format!("{} items on {}", bag.len(), r.state.id))
        }
        2 => {
            let bags = r.state.bags.lock().unwrap_or_else(|p| p.into_inner());
            let items = bags
                .get(&r.sid)
                .filter(|b| !b.is_empty())
                .map_or_else(|| "empty".to_string(), |b| b.join(","));
            answer(format!("{items} on {}", r.state.id))
        }
        _ => r.unknown(),
    }
}

/// Module 4, dynamic binding: opcode 1 binds the session's module 4 here, opcode 2
/// answers this backend's id, opcode 3 unbinds; any other is unknown, as in every
/// module.
fn bind(r: &Request<'_>) -> Option<Payload> {
    match r.opcode {
        1 => {
            r.bind_command("bind");
            answer(format!("bound to {}", r.state.id))
        }
        2 => answer(r.state.id.clone()),
        3 => {
            r.bind_command("unbind");
            answer("unbound")
        }
        _ => r.unknown(),
    }
}
