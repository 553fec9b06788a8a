//! The gateway's integration tests that can share a process, as one test binary.
//!
//! Each file under `tests/` is a crate of its own: cargo compiles the gateway's generic
//! code, tokio's and the test helpers into every one and links each separately, about
//! 6 s of a 2-core machine per file. Gathered here as modules, that is paid once.
//!
//! A test stays a file of its own under `tests/` when it needs its process to itself or
//! a place of its own in the run:
//! - `gateway_alloc.rs`: a counting global allocator;
//! - `gateway_metrics.rs`: the process-global metrics recorder;
//! - the fault and flood tests (`gateway_client_partition.rs`, `gateway_half_open_backend.rs`,
//!   `gateway_lossy_link.rs`, `gateway_frozen_backend.rs`, `gateway_hardening.rs`):
//!   `scripts/run-tests.py` reads the phase a binary runs in from its main file's text.
//!
//! Tests here run as many at a time as libtest runs (one per core), as they did in
//! their own binaries; each starts its own gateways and backends on free loopback ports.

#[path = "../gateway_world/mod.rs"]
mod gateway_world;

mod browser;
mod gateway;
mod gateway_commands;
mod gateway_drain;
mod gateway_kicks;
mod gateway_limits;
mod gateway_protocol_doc;
mod gateway_pushes;
mod gateway_python;
mod gateway_release;
mod gateway_rooms;
mod gateway_sessions;
