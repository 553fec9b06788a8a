//! What the gateway and its backends say to each other: RPC frames (the rpc-client's
//! Seata v1 frames) whose head map carries the facts and whose body is the client's
//! payload, never decoded or copied by the gateway.
//!
//! **Gateway -> backend** (a request per client message; the answer's body goes back to
//! the client as a reply with the same sequence): the head map holds the trusted
//! identity the gateway stamps, which a client cannot forge (clients send no head map
//! at all; every key below is written by the gateway):
//! [`MODULE`], [`OPCODE`], [`SEQ`], [`ACCOUNT`], [`SESSION`], [`GATEWAY`], [`ADDR`],
//! [`ROLE`], [`STATE`], [`TRACE`] (a trace id unique to this one message, the same on
//! each attempt to deliver it), and [`RESENT`] on an attempt after one that may have
//! reached a backend. An answer
//! with [`ERROR`] set is sent to the client as an error reply; an answer with
//! [`NO_REPLY`] is not sent.
//!
//! **Gateway -> backend commands** (one-way requests, [`CMD`] set, no client message):
//! - `rebind`: session [`SESSION`] was resumed on gateway [`GATEWAY`] (this or another
//!   one), whose connection carries this request: a backend holding state for the
//!   session (it is bound there, statically or dynamically) sends the session's pushes
//!   and fan-out through this connection from now on. Sent, on every resume, to every
//!   backend the session is bound to and to every alive backend of the keyed modules'
//!   clusters (a room holding the session as a member is on one of them).
//! - `moved`: key [`KEY`] of keyed module [`MODULE`] lives on the receiving backend from
//!   now on (its old home is gone, or the alive set changed); the sessions in [`TO`]
//!   are its members on gateway [`GATEWAY`], reached through this connection. The
//!   backend starts the key afresh with them (see [`keys`](super::keys)).
//! - `dropkey`: key [`KEY`] of keyed module [`MODULE`] now lives on another backend: the
//!   receiving backend drops what it holds for it (stops its room's pushes).
//! - `ended`: the sessions in [`TO`] ended (removed, kicked for good, replaced by a new
//!   login of their account, or detached past the resume window; not taken over by
//!   another gateway, where they go on): the receiving backend drops what it keeps for
//!   them (a room's members). Sent to every backend they were bound to and to every
//!   alive backend of the keyed modules' clusters, as `rebind` is.
//!
//! **Backend -> gateway** (one-way requests on the same connection): [`CMD`] names the
//! command and the other keys its arguments:
//! - `send`: deliver the body to the sessions in [`TO`] as module [`MODULE`], opcode
//!   [`OPCODE`] (reliable when [`RELIABLE`] is `1`: then numbered and kept for a resume,
//!   see [`pushes`](super::session::pushes));
//! - `bcast`: deliver the body to every member of group [`GROUP`] (`*` = every session
//!   on this gateway): the backend sends once per gateway, the gateway copies;
//! - `join` / `leave`: add / remove the sessions in [`TO`] to / from [`GROUP`];
//! - `kick`: disconnect the sessions in [`TO`] with reason [`REASON`]: the client gets
//!   `KICK 8 <reason>` (the session ends unless [`KEEP`] is `1`, which only closes the
//!   connection and keeps the session resumable);
//! - `bind` / `unbind`: bind the sessions in [`TO`] to the sending backend for the
//!   modules in [`MODULES`] (dynamic binding), or drop those bindings;
//! - `state`: set the sessions' user state to the body (UTF-8);
//! - `disable` / `enable`: the sending backend takes no new sessions / takes them again;
//! - `load`: the sending backend's load, 0..=100 in the body (over 90 = overloaded: no
//!   new sessions; when every backend of the cluster is over `protect.shed-load`, the
//!   modules' sheddable opcodes are answered `busy: shed`, see
//!   [`protect`](super::protect)).

/// Client module id.
pub const MODULE: &str = "m";
/// Client opcode.
pub const OPCODE: &str = "op";
/// Client sequence number.
pub const SEQ: &str = "seq";
/// The session's account.
pub const ACCOUNT: &str = "acct";
/// The session id.
pub const SESSION: &str = "sid";
/// The gateway's id.
pub const GATEWAY: &str = "gw";
/// The client's address.
pub const ADDR: &str = "addr";
/// The session's role.
pub const ROLE: &str = "role";
/// The session's user state.
pub const STATE: &str = "state";
/// The message's trace id: 16 lowercase hex digits (64 random bits), a new one for every
/// client message the gateway forwards (a message the client sends again is a new
/// message), the same on every attempt the gateway makes to deliver it. Backends log it
/// with whatever the message causes, so one message can be followed from the gateway's
/// logs through every backend it reached; and it is the message's idempotency key (see
/// [`RESENT`]).
pub const TRACE: &str = "tr";
/// Set (`1`) on a request the gateway sends again after an attempt that may have reached
/// a backend (written to a connection that died before the answer): the modules with
/// `replay` (by default the stateless ones) are at-least-once. A backend whose effect
/// must happen once keeps the [`TRACE`] ids it applied where every backend of the
/// cluster can see them, for as long as a re-send can come (the hold, `hold-for`), and
/// answers a repeat without applying it again. A module with `replay: false` is
/// at-most-once instead: the client is told the request may have been processed.
pub const RESENT: &str = "rs";
/// In an answer: the request failed; the body is the error text.
pub const ERROR: &str = "err";
/// In an answer: send nothing to the client.
pub const NO_REPLY: &str = "noreply";
/// Backend command.
pub const CMD: &str = "cmd";
/// Session ids, comma-separated.
pub const TO: &str = "to";
/// A fan-out group.
pub const GROUP: &str = "grp";
/// `1`: the frame must not be dropped under backpressure.
pub const RELIABLE: &str = "rel";
/// Module ids, comma-separated.
pub const MODULES: &str = "mods";
/// A kick's reason.
pub const REASON: &str = "why";
/// `1`: a kick keeps the session (only the connection closes).
pub const KEEP: &str = "keep";
/// A keyed module's key (`moved`, `dropkey`).
pub const KEY: &str = "key";

/// Splits a comma-separated list, skipping empty items.
pub fn list(v: Option<&str>) -> impl Iterator<Item = &str> {
    v.unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
}
