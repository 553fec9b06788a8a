//! # meshline
//!
//! Find a cluster of servers through a service registry and spread requests across it.
//!
//! This is the facade crate: it re-exports the core types and builds the registry your
//! configuration names. Each registry backend is a cargo feature, so a build carries
//! only the clients it needs:
//!
//! | feature | registry type(s) (`registry.type`) | crate |
//! |---|---|---|
//! | `file` (default) | `file` | `meshline-registry-file` |
//! | `nacos` | `nacos` | `meshline-registry-nacos` |
//! | `etcd` | `etcd3`, `etcd` | `meshline-registry-etcd` |
//! | `zookeeper` | `zk`, `zookeeper` | `meshline-registry-others` |
//! | `redis` | `redis` | `meshline-registry-others` |
//! | `consul` | `consul` | `meshline-registry-others` |
//! | `eureka` | `eureka` | `meshline-registry-others` |
//! | `all` | every backend above | |
//!
//! The load balancers are always here ([`loadbalance`]); the rpc-client ([`rpc`]) is the
//! default feature `rpc`. Runnable programs built on this crate (a quickstart with two
//! servers, the crash demo, `tc-server`, `tm-client`) are in the workspace's
//! `meshline-examples` crate: `cargo run -p meshline-examples --bin quickstart`.
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
pub mod registry;

pub use meshline_loadbalance as loadbalance;
#[cfg(feature = "rpc")]
pub use meshline_rpc_client as rpc;

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
#[cfg(any(
    feature = "zookeeper",
    feature = "redis",
    feature = "consul",
    feature = "eureka"
))]
pub use meshline_registry_others as others;

/// The README's Rust examples compile as doctests, so they cannot drift from the API.
#[cfg(all(doctest, feature = "rpc", feature = "file"))]
#[doc = include_str!("../README.md")]
mod readme_doctests {}
