//! # meshline-example-gateway
//!
//! The example game gateway and what runs around it, built only on the `meshline`
//! facade, the way an application would use it:
//!
//! | program | what it shows |
//! |---|---|
//! | `gateway` | the gateway ([`gateway`]): admission, sessions, module routing, fan-out, backpressure |
//! | `game-backend` | the game behind it ([`game_backend`]): lobby, chat, rooms, dynamic binding |
//! | `bot` | players: auth, room, chat, lobby requests; throughput and latency |
//! | `gateway-bench`, `gateway-idle`, `gateway-plot` | the measurements of `examples/gateway/BENCHMARKS.md` |
//!
//! ```text
//! cargo run --release -p meshline-example-gateway --bin gateway -- --config gateway.yaml
//! ```
//!
//! By default only the file registry is compiled in, so these build with a Rust
//! toolchain alone; with `--features all-registries` every registry backend is. The
//! library holds what the programs and the tests share: the gateway itself, the game
//! backend, a client ([`client`], and [`roaming`] for one that follows a draining
//! gateway's advice) and an in-process registry ([`memory_registry`]) for running all
//! of it in one process. The in-memory Seata TC is its own crate beside this one
//! (`examples/tc`).

#![warn(missing_docs)]

pub mod client;
pub mod game_backend;
pub mod gateway;
pub mod memory_registry;
pub mod roaming;
