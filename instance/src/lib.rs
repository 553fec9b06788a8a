//! # meshline-instance
//!
//! One server as a registry names it ([`Instance`]: `host:port`, weight, zone,
//! metadata), its identity ([`InstanceKey`]), and the identity order every list of
//! instances is kept in ([`identity_order`], [`sorted_unique`]).
//!
//! Why a crate of its own: these few types are all the load balancer needs of the
//! discovery side. `meshline-loadbalance` depends on this crate alone, not on
//! `meshline-registry-core` (registries, watches, the configuration), so the balancer
//! compiles and is used without any of that. `meshline-registry-core` re-exports these
//! items, and a parse failure ([`AddressError`]) converts into its `RegistryError`, so a
//! backend or a program names one crate for both.

#![warn(missing_docs)]

mod error;
mod identity_order;
mod instance;

pub use error::AddressError;
pub use identity_order::identity_order;
pub use instance::{Instance, InstanceKey, sorted_unique};
