//! The balancers' integration tests, as one test binary.
//!
//! Each file under `tests/` is a crate of its own: cargo compiles the balancers'
//! generic code and the test helpers into every one, optimised (this package builds at
//! `opt-level = 2` even for tests, see the workspace's Cargo.toml), and links each
//! separately. Gathered here as modules, that is paid once.
//!
//! `no_alloc.rs` stays a file of its own: its counting global allocator must see only
//! its own test's allocations.

mod algorithms;
mod edits;
mod extreme_weights;
mod java_compat;
mod properties;
