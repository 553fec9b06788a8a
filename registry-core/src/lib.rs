//! # meshline-registry-core
//!
//! The vocabulary every meshline registry backend and every consumer shares:
//!
//! - [`Instance`]: one server a registry knows about (`host:port`, weight, zone,
//!   metadata), with parsing of every address form Seata writes (`ip:port`,
//!   `[v6]:port`, Java's unbracketed `v6:port`).
//! - [`RegistryService`]: the trait each backend (file, etcd, ZooKeeper, Redis, Nacos,
//!   Consul, Eureka) implements: register / unregister / lookup / watch / close.
//! - [`Watch`] and [`WatchHub`]: full-snapshot membership watches with revision numbers,
//!   de-duplication, empty-list protection and registry health (connected, or stale
//!   since when). Backends publish into a hub; users read a `Watch`.
//! - [`Discovery`]: Seata's indirection `tx-service-group -> vgroupMapping -> cluster`.
//! - [`Config`]: one configuration type loaded from YAML / TOML / JSON, Seata's flat
//!   `.properties` keys, seata-go's `seata:` YAML and environment variables.
//! - [`Backoff`]: the jittered exponential backoff every reconnect loop uses.
//! - [`Lifecycle`]: open/closed/abandoned, shared watches that end with their last
//!   [`Watch`], close-once and drop-time clean-up: the life every backend shares.
//!
//! Why a separate crate: backends, the load balancer and the rpc-client all depend on
//! these types and on nothing of each other, so each can be compiled alone behind a
//! cargo feature of the `meshline` facade.

#![warn(missing_docs)]

mod backoff;
pub mod config;
mod discovery;
mod error;
mod instance;
pub mod lifecycle;
pub mod probe;
mod registry;
mod watch;

pub use backoff::Backoff;
pub use config::Config;
pub use discovery::Discovery;
pub use error::RegistryError;
pub use instance::{Instance, InstanceKey};
pub use lifecycle::{Lifecycle, Registrations, WatchScope};
pub use registry::RegistryService;
pub use watch::{EmptyProtection, Health, PublishOutcome, Snapshot, Watch, WatchHub};
