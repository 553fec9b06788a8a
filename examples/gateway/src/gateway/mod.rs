//! A game gateway built on the rpc-client: the single public entry of a game backend.
//!
//! Clients connect over TCP or WebSocket (one frame per binary message; a browser is
//! a client too: see [`admin`]) and speak the frame of [`protocol`]; the gateway admits
//! them ([`admission`]), keeps their sessions, routes every message by
//! its module to a backend cluster found in the registry, and writes backends' pushes
//! back through a bounded per-client queue ([`outbound`]).
//!
//! One concept per module:
//! - [`protocol`]: the client frame and its codec (length cap before allocation);
//! - `transport`: TCP and WebSocket behind one frame reader and one frame writer;
//! - [`admission`]: HMAC-SHA256 tokens, expiry, replay refusal, reason codes;
//! - [`limits`]: connection rates per IP (allow-listed NATs apart) and gateway-wide,
//!   message rates per account and opcode (governor, bounded memory);
//! - [`queue`]: the login queue (position and ETA instead of an error, FIFO);
//! - [`outbound`]: the per-client send queue (soft limit drops unreliable frames,
//!   hard limit disconnects);
//! - [`session`]: sessions apart from connections (resume), bindings, fan-out groups,
//!   kept in memory or in Redis (resume on any gateway);
//! - [`settings`]: the `gateway:` config section;
//! - [`route`]: module -> cluster -> backend (balanced, bound per session, or by key),
//!   identity stamping, a binding to a dead backend released;
//! - `release`: bindings to a backend that left released, the sessions told at once
//!   (`REBOUND`);
//! - [`keys`]: keyed modules (rooms): a key's home by rendezvous hashing, the same on
//!   every gateway, and moving keys (members told) when homes change;
//! - [`kick`]: the KICK codes (why an admitted client's connection was closed);
//! - [`protect`]: per-module bulkheads, per-cluster circuit breakers, holding requests
//!   while a cluster has no endpoint (replayed in order), shedding under overload;
//! - [`wire`]: the head-map vocabulary between gateway and backends;
//! - [`admin`]: the admin HTTP port serving the browser client page;
//! - [`drain`]: graceful drain (unregister, stop accepting, reconnect advice, deadline);
//! - [`metrics`]: Prometheus `/metrics` and the `/status` page on the admin port;
//! - `core`: the running gateway, its listeners and shared state ([`Gateway`]);
//! - `serve`: one client connection: accept, admission flow, read loop, writer, refusals;
//! - `forward`: a client message to its backend and the answer back (the hot path);
//! - `commands`: what backends push (send, broadcast, groups, kick, ...; [`command`]).

pub mod admin;
pub mod admission;
mod backend_news;
mod commands;
mod core;
pub mod drain;
mod forward;
pub mod history;
pub mod keys;
pub mod kick;
pub mod limits;
pub mod metrics;
pub mod outbound;
pub mod protect;
pub mod protocol;
pub mod queue;
mod release;
pub mod route;
mod serve;
pub mod session;
pub mod settings;
pub(crate) mod transport;
pub mod wire;

pub use commands::command;
pub use core::{Gateway, GatewayStats};
pub use drain::{DrainReport, DrainSettings};
