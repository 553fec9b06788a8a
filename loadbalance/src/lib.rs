//! # meshline-loadbalance
//!
//! Spreads requests over the endpoints of a cluster: Seata's five balancers done right
//! (including a ConsistentHash ring that agrees with Seata-Java's), and the ones Seata
//! lacks: P2C over peak-EWMA latency, bounded-load and jump consistent hashing, zone
//! preference, and the routing choices game gateways use.
//!
//! ## Design
//!
//! gRPC's balancer/picker split. On every membership change a [`LoadBalance`]
//! precomputes a [`Picker`] (alias table, smooth round-robin cycle, hash ring, lookup
//! table); the [`Balancer`] swaps it in atomically (`ArcSwap`). Per request, the
//! picker only reads what it precomputed and a few atomic counters: **no lock, no
//! allocation** (checked by `tests/no_alloc.rs` with a counting allocator).
//!
//! Per-endpoint load lives in [`EndpointStats`] (in-flight count, peak-EWMA latency,
//! failures, reported load), kept in a [`StatsRegistry`] keyed by endpoint identity, so
//! counters survive picker rebuilds. [`Balancer::pick`] returns a [`Picked`] holding an
//! [`InFlightGuard`]: the in-flight count drops when the guard drops, whatever happened
//! (success, error, timeout, or a future dropped mid-call). State that must survive a
//! rebuild, such as the round-robin sequence, lives in the [`LoadBalance`], not the
//! picker.
//!
//! ## One membership path
//!
//! A [`Balancer<T>`] is also the caller's table of what to send through: each
//! endpoint carries a payload `T` (a connection handle) given when it joins
//! ([`Edit::Insert`]), and a pick hands it back ([`Picked::payload`]) from the endpoint
//! the in-flight guard already holds: no second lookup by key after the pick, no
//! second index of the same endpoints, no retry because "the picker was a moment
//! behind" a separate set. A caller that already knows what changed (an endpoint
//! connected, another dropped) applies [`Edit`]s ([`Balancer::apply`]) instead of
//! handing over the whole list to be diffed again; a caller with whole lists (a
//! registry `Watch`'s snapshots, from meshline-registry-core) uses
//! [`Balancer::update`], which merges each against the previous one.
//!
//! ## Usage
//!
//! ```
//! use std::time::Duration;
//! use meshline_loadbalance::{by_name, Balancer, PickRequest};
//! use meshline_instance::Instance;
//!
//! // `client.loadBalance.type`: any Seata name, case-insensitive, or an alias.
//! let balancer = Balancer::new(by_name("XID").unwrap());
//!
//! // On every membership change (e.g. each snapshot of a registry Watch):
//! let tcs = [
//!     Instance::parse("127.0.0.1:8091").unwrap(),
//!     Instance::parse("127.0.0.1:8092").unwrap(),
//! ];
//! balancer.update(&tcs);
//!
//! // Per request: route a branch registration to the TC that began the transaction.
//! let picked = balancer.pick(&PickRequest::xid("127.0.0.1:8092:2612341069705662465")).unwrap();
//! assert_eq!(picked.endpoint().instance().port(), 8092);
//! // XID reads no load, so its balancer counts nothing in flight (an algorithm that
//! // reads load, least-active or P2C, counts each request until its guard drops).
//! assert_eq!(picked.endpoint().stats().in_flight(), 0);
//!
//! // A retry avoids the endpoint that just failed.
//! let failed = [picked.endpoint().key().clone()];
//! picked.failure();
//! let retry = balancer.pick(&PickRequest::default().excluding(&failed)).unwrap();
//! assert_eq!(retry.endpoint().instance().port(), 8091);
//!
//! // Record the outcome (or just drop the guard: the count still goes back down).
//! retry.success(Duration::from_millis(3));
//! ```
//!
//! Other request keys: [`PickRequest::with_key`] (bytes, e.g. an account id),
//! [`PickRequest::with_hash`] (a numeric id), [`PickRequest::with_source`] (client IP),
//! [`PickRequest::with_zone`] (the caller's zone).
//!
//! ## Algorithms
//!
//! | Name (`by_name`)            | Type                              | Pick cost           |
//! |-----------------------------|-----------------------------------|---------------------|
//! | `XID`                       | [`XidLoadBalance`]                | parse + O(log n)    |
//! | `RandomLoadBalance`         | [`RandomLoadBalance`]             | O(1) (alias table)  |
//! | `RoundRobinLoadBalance`     | [`RoundRobinLoadBalance`]         | O(1)                |
//! | `ConsistentHashLoadBalance` | [`ConsistentHashLoadBalance`]     | O(1) fast / SHA-256 + O(log n) Java (O(log n) with [`PickRequest::with_java_hash`]) |
//! | `LeastActiveLoadBalance`    | [`LeastActiveLoadBalance`]        | O(n) exact scan, 8-16 counters per vector load |
//! | `P2C`                       | [`P2cLoadBalance`]                | O(1)                |
//! | `BoundedLoad`               | [`BoundedLoadLoadBalance`]        | O(1) expected       |
//! | `JumpHash`                  | [`JumpHashLoadBalance`]           | O(log n) arithmetic |
//! | `zone:<name>`               | [`ZoneAwareLoadBalance`]          | inner + O(zones)    |
//! | `xid:<name>`                | [`XidFirstLoadBalance`]           | XID, else inner     |
//! | game types                  | [`game`] module                   | see there           |

#![warn(missing_docs)]

mod algorithms;
mod balancer;
mod board;
mod change;
mod current;
mod edit;
mod endpoint;
mod error;
mod factory;
pub mod hash;
mod index;
mod parallel;
mod picked;
mod picker;
mod request;
mod snapshot;
pub mod stats;

pub use algorithms::bounded::{BoundedLoadLoadBalance, DEFAULT_BALANCE_FACTOR, bounded_cap};
pub use algorithms::consistent_hash::{ConsistentHashLoadBalance, HashMode};
pub use algorithms::game;
pub use algorithms::game::{
    AffinityHashLoadBalance, FillLoadBalance, LoadWeightedLoadBalance, fewest_requests,
};
pub use algorithms::java_ring::SEATA_DEFAULT_VIRTUAL_NODES;
pub use algorithms::jump::{JumpHashLoadBalance, jump_consistent_hash};
pub use algorithms::least_active::LeastActiveLoadBalance;
pub use algorithms::p2c::P2cLoadBalance;
pub use algorithms::random::RandomLoadBalance;
pub use algorithms::ring::DEFAULT_POINTS_PER_WEIGHT;
pub use algorithms::round_robin::RoundRobinLoadBalance;
pub use algorithms::xid::{XidLoadBalance, parse_xid_address};
pub use algorithms::xid_first::XidFirstLoadBalance;
pub use algorithms::zone::ZoneAwareLoadBalance;
pub use balancer::Balancer;
pub use change::MembershipChange;
pub use edit::Edit;
pub use endpoint::Endpoint;
pub use error::LoadBalanceError;
pub use factory::{LoadBalanceOptions, by_name, by_name_with, from_seata_keys};
pub use picked::{InFlightGuard, Picked};
pub use picker::{LoadBalance, Picker};
pub use request::{Exclusions, PickRequest};
pub use snapshot::Snapshot;
pub use stats::{EndpointStats, StatsRegistry};
