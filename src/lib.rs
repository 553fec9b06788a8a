//! # meshline
//!
//! Find a cluster of servers through a service registry and spread requests across it.
//!
//! This is the facade crate: it re-exports the core types and builds the registry your
//! configuration names. Each registry backend is a cargo feature (`file`, the default,
//! `nacos`, `etcd`, `zookeeper`, `redis`, `consul`, `eureka`, `raft`, `namingserver`;
//! `all` for every one, a `-tls` feature each), so a build carries only the clients it
//! needs. [`registry::REGISTRY_TYPES`] is the one description of each backend (its
//! `registry.type` names, feature, crate, centre and constructor); the README's table
//! of registries is checked against it, and `meshline types` prints it for a build.
//!
//! The load balancers are always here ([`loadbalance`]); the rpc-client ([`rpc`]) is the
//! default feature `rpc`. Runnable programs built on this crate (a quickstart with two
//! servers, the crash demo, `tc-server`, `tm-client`) are in the workspace's
//! `meshline-example-tc` crate: `cargo run -p meshline-example-tc --bin quickstart`.
//!
//! Feature `tower` adds `meshline::tower`: a registry watch as a tower `Discover`, so
//! tower and tonic balancers follow a cluster (it lives here rather than in the core so
//! that the core depends on no service framework).
//!
//! ```no_run
//! # async fn demo() -> Result<(), meshline::RegistryError> {
//! let config = meshline::Config::load(None)?;            // Seata's defaults
//! let discovery = meshline::registry::discovery_from_config(&config).await?;
//! for tc in discovery.lookup(&config.tx_service_group).await? {
//!     println!("{tc}");                                   // 127.0.0.1:8091
//! }
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod centre;
pub mod parts;
pub mod registry;
#[cfg(feature = "tower")]
pub mod tower;

/// The load balancers (`meshline-loadbalance`), with the configuration's reader of
/// their Seata keys (`client.loadBalance.*`, from `meshline-config`): the balancer crate
/// takes plain values, and this path keeps both under one name.
pub mod loadbalance {
    pub use meshline_loadbalance::*;
    pub use meshline_registry_core::config::balancer::{CENTRE_KEYS, LoadBalanceConfig};
}
#[cfg(feature = "rpc")]
pub use meshline_rpc_client as rpc;
/// The transaction current in the task, Seata's propagation modes and hooks
/// (`meshline::tx::current()`, `TransactionManager::transactional`): the same module as
/// `meshline::rpc::tx`, at the top for the code that uses it most.
#[cfg(feature = "rpc")]
pub use meshline_rpc_client::tx;

pub use meshline_registry_core as core;
pub use meshline_registry_core::config::{ConfigLoader, Format};
pub use meshline_registry_core::{
    Backoff, Config, Discovery, EmptyProtection, Health, Instance, InstanceKey, RegistryError,
    RegistryService, Snapshot, Watch, WatchHub,
};

#[cfg(feature = "etcd")]
pub use meshline_registry_etcd as etcd;
#[cfg(feature = "file")]
pub use meshline_registry_file as file;
#[cfg(feature = "nacos")]
pub use meshline_registry_nacos as nacos;
#[cfg(feature = "_others")]
pub use meshline_registry_others as others;

/// The README's Rust examples compile as doctests, so they cannot drift from the API.
#[cfg(all(doctest, feature = "rpc", feature = "file"))]
#[doc = include_str!("../README.md")]
mod readme_doctests {}
