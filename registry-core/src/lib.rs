//! # meshline-registry-core
//!
//! The vocabulary every meshline registry backend and every consumer shares:
//!
//! - [`Instance`]: one server a registry knows about (`host:port`, weight, zone,
//!   metadata), with parsing of every address form Seata writes (`ip:port`,
//!   `[v6]:port`, Java's unbracketed `v6:port`); it lives in the `meshline-instance`
//!   crate (the load balancer's only tie to discovery) and is re-exported here.
//! - [`RegistryService`]: the trait each backend (file, etcd, ZooKeeper, Redis, Nacos,
//!   Consul, Eureka) implements: register / unregister / lookup / watch / close.
//! - [`Watch`] and [`WatchHub`]: full-snapshot membership watches with revision numbers,
//!   de-duplication, empty-list protection and registry health (connected, or stale
//!   since when). Backends publish into a hub; users read a `Watch`.
//! - [`Discovery`]: Seata's indirection `tx-service-group -> vgroupMapping -> cluster`.
//! - [`Config`], [`config`] and [`centre`]: the configuration (files, environment, a
//!   live config centre), which lives in the `meshline-config` crate and is
//!   re-exported here, so a backend names one crate for both.
//! - [`Backoff`]: the jittered exponential backoff every reconnect loop uses (also
//!   from `meshline-config`, whose centre follower is its lowest user).
//! - [`Lifecycle`]: open/closed/abandoned, shared watches that end with their last
//!   [`Watch`], close-once and drop-time clean-up: the life every backend shares.
//!
//! Why a separate crate: backends, the load balancer and the rpc-client all depend on
//! these types and on nothing of each other, so each can be compiled alone behind a
//! cargo feature of the `meshline` facade.
//!
//! # Adding a backend
//!
//! A new registry type (Kubernetes endpoints, say) is its own folder, its test file,
//! one entry in the facade's table and its cargo features; no code in this crate
//! changes. As a module of `registry-others`, the files it touches are:
//!
//! 1. **Its folder**, `registry-others/src/<name>/`, and **its test file**,
//!    `registry-others/tests/<name>.rs`:
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
//!      needs tests of its own. A server it needs that testkit cannot start yet is
//!      added to testkit (a child process, or a double where no real server can run).
//! 2. **Its module line and feature** in `registry-others`: `pub mod <name>` behind
//!    `#[cfg(feature = "<name>")]` in `src/lib.rs`, and the feature (enabling
//!    `_common` and the client library) in its `Cargo.toml`.
//! 3. **One entry** in the facade's table, `REGISTRY_TYPES` in `src/registry.rs`:
//!    names and aliases, feature, crate, the keys `--server` and `--ttl` set,
//!    read-only or not, the centre (blob key, default blob, constructor) when
//!    `config.type` can name it too, and the constructor. Everything that lists
//!    backends reads it: `resolve_type`, the "not compiled in" errors, the centres
//!    (`meshline::centre::resolve_centre`), the doctor's centres, the CLI's help and
//!    `meshline types`, and the test script's refusal checks.
//! 4. **Its cargo features** in the facade's `Cargo.toml` (the feature enabling
//!    `_others` and `meshline-registry-others/<name>`, and in `all`; its `-tls`
//!    feature in `all-tls`) and in `cli/Cargo.toml` (forwarded).
//! 5. **Its row** in the README's table of registries.
//!
//! That is its folder, its test file and six files outside them (two in
//! `registry-others`, the facade's table, the two manifests, the README). A backend in
//! a crate of its own replaces step 2 with its crate (and a workspace member line in
//! the root `Cargo.toml`, the file of step 4). `tests/backend_lists.rs` in the facade
//! fails when one of steps 3 to 5 is missing or disagrees with the table (a feature
//! without an entry, an entry without its feature, `all`, `all-tls`, the CLI's
//! forwarding or the README row), and `src/registry.rs`'s own test when an entry's
//! constructor is compiled under another feature than the one it names; the same test
//! file holds the CLI's `all-tls` to every TLS feature and `cli/tests/backends.rs` to
//! an end-to-end test for every writable network backend. `scripts/check-features.py`
//! (part of the lint) builds the backends' crate with each feature alone and the facade
//! with each backend alone, so a `cfg(any(feature = ...))` list inside the crate (such
//! as `registry-others/src/tls.rs`'s) that misses the new feature fails the run.
//!
//! A program can also add a type at run time without any of these:
//! `meshline::registry::register_custom(name, constructor)` and then
//! `registry.type=custom`, `registry.custom.name=<name>`, as Seata's SPI does.

#![warn(missing_docs)]

mod discovery;
mod error;
pub mod lifecycle;
mod nearby;
pub mod probe;
pub mod redact;
mod registry;
#[cfg(test)]
mod test_support;
pub mod tls;
mod watch;

pub use discovery::Discovery;
pub use error::RegistryError;
pub use lifecycle::{Lifecycle, Registrations, WatchScope};
/// The configuration: `meshline-config`, re-exported whole.
pub use meshline_config as config;
/// The config centre: `meshline_config::centre`, re-exported.
pub use meshline_config::centre;
pub use meshline_config::{Backoff, Config};
pub use meshline_instance::{AddressError, Instance, InstanceKey, identity_order, sorted_unique};
pub use nearby::Nearby;
pub use registry::RegistryService;
pub use watch::{EmptyProtection, Health, PublishOutcome, Refresher, Snapshot, Watch, WatchHub};
