//! Sessions, kept apart from connections: a session (id, account, role, bindings, user
//! state, groups) outlives its connection, and a client that reconnects with the
//! session id and its resume secret gets it back.
//!
//! Every gateway holds the sessions it serves in memory ([`Sessions`]): the live part
//! (the connection, [`Link`]) lives only there. Where the durable part is kept as well
//! is the [`SessionStore`], chosen by `gateway.session-store`:
//!
//! - `memory` ([`MemoryStore`], the default): nowhere else. A resume works on the same
//!   gateway within the resume window, and nowhere else.
//! - `redis` ([`RedisStore`], at `gateway.redis-url`): the durable part (id, account,
//!   a SHA-256 of the resume secret, never the secret itself, role, user state,
//!   bindings, groups, and which gateway holds the session now) is a Redis hash
//!   `meshline:gw:session:<id>` ([`KEY_PREFIX`]), rewritten whenever it changes, with a
//!   TTL of the resume window, refreshed while the client is connected. A resume on
//!   *any* gateway loads it from Redis (Redis is the authority: a session another
//!   gateway took over is never resumed from a stale copy in memory), checks the secret
//!   against the stored hash in constant time, and claims the session for this gateway.
//!   A gateway that finds, on its next write or TTL refresh, that another gateway
//!   claimed one of its sessions drops its copy and closes that old connection.
//!
//! Redis is never on the path of normal traffic: changes are marked and written by a
//! background task ([`Sessions::maintain`]), so requests, pushes and new logins keep
//! working while Redis is down (failed writes are retried, logged at warn at most every
//! ten seconds). Only a resume needs Redis; without it the resume is refused with
//! [`Refusal::StoreUnavailable`](crate::gateway::admission::Refusal::StoreUnavailable)
//! and the client can authenticate again.
//!
//! Pushes to a session are numbered and kept for a while ([`pushes`]): a resume replays
//! what the client missed and reports what it cannot replay as a gap. One account has
//! one session by default: a new login ends the account's other session on this
//! gateway (`duplicate-login`, see [`DuplicateLogin`]).
//!
//! Redis restarted empty (no persistence): the TTL refresh finds the connected
//! sessions' records missing and writes them again; detached sessions are lost.
//! One Redis (or a primary with replicas), not Redis Cluster: the refresh script
//! touches many keys at once. Gateways sharing a Redis need distinct `gateway.id`s:
//! the id in a record says which gateway holds the session.
//!
//! One concept per file: [`Session`] (one player's session and its connection) in
//! `state`; the [`Sessions`] table in `table`; logins and the duplicate-login policy in
//! `login`; resumes in `resume`; fan-out groups in `groups`; the background upkeep
//! ([`Sessions::maintain`]: expiry, writing marked changes, TTL refresh) in `upkeep`;
//! the push buffer in [`pushes`]; the stores in `store` and `redis_store`; the sessions
//! that ended, for the backends to hear of, in `ended` ([`Ended`]).

mod dirty;
mod ended;
mod groups;
mod login;
pub mod pushes;
mod redis_store;
mod resume;
mod state;
mod store;
mod table;
mod upkeep;

pub use ended::Ended;
pub use login::{DuplicateLogin, Login};
pub use redis_store::{KEY_PREFIX, RedisStore};
pub use state::{Link, Session};
pub use store::{
    MemoryStore, Refreshed, Saved, SessionRecord, SessionStore, StoreError, secret_sha256,
};
pub use table::Sessions;
