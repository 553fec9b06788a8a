//! The facade's integration tests that can share a process, as one test binary.
//!
//! Each file under `tests/` is a crate of its own: cargo compiles the facade's generic
//! code, tokio's and the test helpers into every one and links each separately.
//! Gathered here as modules, that is paid once. The configuration centre's tests
//! (`centre_*`) are each compiled only with the features of their backend (a `cfg` at
//! the top of the module).
//!
//! A test stays a file of its own under `tests/` when it needs a feature of its own
//! (`required-features` in Cargo.toml: `tower_discover.rs`, `seata_shipped_parts.rs`,
//! `seata_registries.rs`) or is named by the docs as the check of a list
//! (`backend_lists.rs`, the files a new backend touches).

mod support;

mod centre_consul;
mod centre_etcd;
mod centre_grouplists;
mod centre_nacos;
mod centre_zk;
mod custom_registry;
mod hub_to_balancer;
