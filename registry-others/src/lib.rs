//! # meshline-registry-others
//!
//! The meshline registry backends that share one crate: one folder (module) and one
//! cargo feature each, plus what they share (`common`: address lists and the
//! empty-list policy; `tls`: rustls set-up per client library; `seata_http`: the HTTP client of the two Seata
//! server APIs). The crate keeps the name the layout in DESIGN.md gives it; what it
//! holds:
//!
//! - `zookeeper`: `ZookeeperRegistry`, Seata's `zk` layout (ephemeral nodes
//!   `/registry/zk/<cluster>/<ip>:<port>` with data `true`).
//! - `redis`: `RedisRegistry`, Seata's `redis` layout (`SETEX
//!   registry.redis.<cluster>_<ip>:<port>` plus `PUBLISH` on `registry.redis.<cluster>`).
//! - `consul`: `ConsulRegistry`, Seata's `consul` layout (service = cluster, ID
//!   `<cluster>-<ip>:<port>`, tag `services`; TTL check kept passing; blocking queries).
//! - `eureka`: `EurekaRegistry`, Seata's `eureka` layout (application = upper-cased
//!   cluster, instance ID `<ip>:<cluster>:<port>`, metadata `weight`; heartbeats; full
//!   then delta fetches checked by `apps__hashcode`).
//! - `raft`: `RaftRegistry`, Seata 2.x raft clusters (`registry.type=raft`): the
//!   cluster metadata read from the TCs' HTTP API (`/metadata/v1/cluster`, the
//!   `/metadata/v1/watch` long poll), token login; read-only.
//! - `namingserver`: `NamingserverRegistry`, Seata's namingserver
//!   (`registry.type=seata`): registers like a TC, discovers and watches by vGroup.
//!
//! Every backend implements [`meshline_registry_core::RegistryService`], publishes full
//! member lists into a [`meshline_registry_core::WatchHub`], reconnects with
//! [`meshline_registry_core::Backoff`], re-registers its own instances after any session
//! loss, skips malformed registry entries with a warning, and stops its background tasks
//! on `close()` and on drop. Each backend's module documents its layout, its recovery
//! rules and its measured convergence times.

#![warn(missing_docs)]

#[cfg(feature = "zookeeper")]
pub mod zookeeper;
#[cfg(feature = "zookeeper")]
pub use zookeeper::ZookeeperRegistry;

#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "redis")]
pub use crate::redis::RedisRegistry;

#[cfg(feature = "consul")]
pub mod consul;
#[cfg(feature = "consul")]
pub use consul::ConsulRegistry;

#[cfg(feature = "eureka")]
pub mod eureka;
#[cfg(feature = "eureka")]
pub use eureka::EurekaRegistry;

#[cfg(feature = "raft")]
pub mod raft;
#[cfg(feature = "raft")]
pub use raft::RaftRegistry;

#[cfg(feature = "namingserver")]
pub mod namingserver;
#[cfg(feature = "namingserver")]
pub use namingserver::NamingserverRegistry;

#[cfg(any(feature = "raft", feature = "namingserver"))]
pub(crate) mod seata_http;

#[cfg(feature = "_common")]
pub(crate) mod common;

#[cfg(feature = "_common")]
pub(crate) mod tls;

#[cfg(all(test, any(feature = "consul", feature = "eureka")))]
mod testjson;
