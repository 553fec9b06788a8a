//! The Nacos backend's integration tests that can share a process, as one test binary.
//!
//! Each file under `tests/` is a crate of its own: cargo compiles nacos-sdk's and the
//! backend's generic code, tokio's and the test helpers into every one and links each
//! separately. Gathered here as modules, that is paid once. Each test starts its own
//! rnacos on a free loopback port.
//!
//! A test stays a file of its own under `tests/` when it needs its process to itself or
//! a place of its own in the run:
//! - `nacos_calls.rs` and `nacos_secrets.rs`: each installs the process's global log
//!   subscriber, to count or search what is logged;
//! - `nacos_stall.rs` and `nacos_node_cut.rs`: `scripts/run-tests.py` reads the phase a
//!   binary runs in from its main file's text;
//! - `nacos_tls_build_plain_server.rs`: built only with the `tls` feature.

mod support;

mod nacos;
mod nacos_nearby;
mod nacos_v1;
