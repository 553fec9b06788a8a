//! A game gateway built on the rpc-client: the single public entry of a game backend.
//!
//! Clients connect over TCP (or WebSocket) and speak the frame of [`protocol`]; the
//! gateway admits them ([`admission`]), keeps their sessions, routes every message by
//! its module to a backend cluster found in the registry, and writes backends' pushes
//! back through a bounded per-client queue ([`outbound`]).
//!
//! One concept per module:
//! - [`protocol`]: the client frame and its codec (length cap before allocation);
//! - [`admission`]: HMAC-SHA256 tokens, expiry, replay refusal, reason codes;
//! - [`outbound`]: the per-client send queue (soft limit drops unreliable frames,
//!   hard limit disconnects).

pub mod admission;
pub mod outbound;
pub mod protocol;
