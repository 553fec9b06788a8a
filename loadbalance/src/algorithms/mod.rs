//! The algorithms, one file each. Each is a [`crate::LoadBalance`] that builds a
//! [`crate::Picker`]; the machinery they plug into (the balancer, endpoints, stats, the
//! load board, requests, the factory) lives at the crate root.
//!
//! - Seata's five: [`xid`], [`random`], [`round_robin`], [`consistent_hash`] (on the
//!   fast [`ring`] or Seata-Java's [`java_ring`]), [`least_active`];
//! - the ones Seata lacks: [`p2c`] (peak-EWMA), [`bounded`] (bounded-load consistent
//!   hashing), [`jump`] (jump consistent hash), [`zone`] (zone preference), and the game
//!   gateways' choice types in [`game`].

pub(crate) mod bounded;
pub(crate) mod consistent_hash;
pub mod game;
pub(crate) mod java_ring;
pub(crate) mod jump;
pub(crate) mod least_active;
pub(crate) mod p2c;
pub(crate) mod paged_ring;
pub(crate) mod random;
pub(crate) mod ring;
pub(crate) mod round_robin;
pub(crate) mod xid;
pub(crate) mod xid_first;
pub(crate) mod zone;

#[cfg(test)]
mod incremental_tests;
