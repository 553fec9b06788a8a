//! The example TC's integration tests that can share a process, as one test binary.
//!
//! Each file under `tests/` is a crate of its own: cargo compiles the TC's and the
//! rpc-client's generic code, tokio's and the test helpers into every one and links
//! each separately. Gathered here as modules, that is paid once.
//!
//! A test stays a file of its own under `tests/` when it needs a place of its own in the
//! run or a feature of its own:
//! - the fault and flood tests (`frozen_tc.rs`, `slow_tc.rs`, `half_open.rs`,
//!   `sick_tc.rs`, `scoreboard.rs`): `scripts/run-tests.py` reads the phase a binary
//!   runs in from its main file's text;
//! - `tcc_transfer.rs` and `tc_server_etcd.rs`: built only with their cargo features
//!   (`required-features` in Cargo.toml).
//!
//! Tests here run as many at a time as libtest runs (one per core), as they did in their
//! own binaries; each starts its own TCs and clients on free loopback ports.

#[path = "../common/mod.rs"]
mod common;
#[path = "../tx_world/mod.rs"]
mod tx_world;

mod demo;
mod grpc_transport;
mod process_kill;
mod protobuf_codec;
mod quickstart;
mod raft_leader;
mod rm_phase_two;
mod rm_unregister;
mod tc_as_seata;
mod tc_batch_results;
mod tcc;
mod tm_rm_clients;
mod transaction_faults;
mod transactions;
mod tx_context;
mod tx_layers;
