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
//!
//! # Adding a backend
//!
//! A new registry type (Kubernetes endpoints, say) touches three places, and no code
//! in this crate:
//!
//! 1. **The backend itself**, in its own crate or a module of `registry-others`
//!    behind a feature:
//!    - a settings type that reads the type's section of the configuration,
//!      `config.registry.section(&["<alias>", "<name>"])`, with a
//!      [`SectionReader`](config::SectionReader) (its defaults, units, validation,
//!      and `finish()` reporting keys it does not know), as
//!      `meshline_registry_etcd::EtcdSettings` does;
//!    - a type implementing [`RegistryService`] on a [`Lifecycle`]: `check_open` at
//!      the top of each call, [`Lifecycle::watch`] with the first read and the follow
//!      loop (publishing through its [`WatchScope`], returning when the scope stops),
//!      [`Lifecycle::close`] and [`Lifecycle::close_on_drop`] with the removal of what
//!      it registered (kept in [`Registrations`]), and an `abandon` for crash tests;
//!      A backend whose registry renews each entry uses [`Lifecycle::keep_alive`];
//!      its `unregister` is [`Registrations::unregister_with`], which retries a
//!      refused removal in the background;
//!    - its tests: `meshline_testkit::conformance` runs the behaviours every backend
//!      must show (round trip, drop ends watches, crash removal, outage and resync,
//!      garbage skipped, empty protection; an unreachable server named, a refused
//!      removal retried, secrets never shown, `nearby`) against a server testkit
//!      starts: the test file implements the suite's traits for its server (`Harness`:
//!      its config and how to connect; `Crash`, `Garbage`, `Unreachable`,
//!      `RefuseRemoval`, `Secrets`, `SeataLayout` where they apply) and names the
//!      behaviours in one `conformance_tests!`; only what is special to the backend
//!      needs tests of its own.
//! 2. **The `meshline` facade**: a cargo feature in its `Cargo.toml` (and in `all`),
//!    and one `RegistryType` entry in `src/registry.rs`'s `REGISTRY_TYPES` (name,
//!    aliases, feature, the keys `--server` and `--ttl` set, the constructor). The
//!    "not compiled in" message, `is_compiled_in` and `from_config` come from the
//!    entry.
//! 3. **The CLI's `Cargo.toml`**: the same feature, forwarded to the facade.
//!
//! A program can also add a type at run time without any of these:
//! `meshline::registry::register_custom(name, constructor)` and then
//! `registry.type=custom`, `registry.custom.name=<name>`, as Seata's SPI does.

#![warn(missing_docs)]

mod backoff;
pub mod centre;
pub mod config;
mod discovery;
mod error;
mod instance;
pub mod lifecycle;
mod nearby;
pub mod probe;
pub mod redact;
mod registry;
#[cfg(test)]
mod test_support;
pub mod tls;
mod watch;

pub use backoff::Backoff;
pub use config::Config;
pub use discovery::Discovery;
pub use error::RegistryError;
pub use instance::{Instance, InstanceKey};
pub use lifecycle::{Lifecycle, Registrations, WatchScope};
pub use nearby::Nearby;
pub use registry::RegistryService;
pub use watch::{EmptyProtection, Health, PublishOutcome, Snapshot, Watch, WatchHub};
