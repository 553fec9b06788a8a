//! The rpc-client's integration tests that can share a process, as one test binary.
//!
//! Each file under `tests/` is a crate of its own: cargo compiles the client's generic
//! code, tokio's and the test helpers into every one and links each separately.
//! Gathered here as modules, that is paid once. Each test starts its own servers on
//! free loopback ports and its own runtime (paused-time tests pause only theirs).
//!
//! A test stays a file of its own under `tests/` when it needs a place of its own in the
//! run: `hedging.rs` and `slow_start.rs` measure a flood of calls, and
//! `scripts/run-tests.py` reads the phase a binary runs in from its files' text.

#[path = "../common/mod.rs"]
mod common;

mod call_limits;
mod client;
mod client_lifecycle;
mod faults;
mod grpc_interop;
mod outlier_detection;
mod paused_schedules;
mod retry_budget;
mod rm_config;
mod seata_outcomes;
mod server;
mod silent_peers;
