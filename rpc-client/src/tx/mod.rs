//! Transactions the way a Rust service writes them: the current transaction in the
//! task's context, Seata's propagation modes, commit and rollback by the block's
//! result, hooks.
//!
//! Seata's Java and Go clients keep the XID in a thread-local (`RootContext`) and wrap
//! business methods in `@GlobalTransactional` (`TransactionalTemplate`). Here:
//!
//! - [`current()`] / [`current_xid()`]: the transaction current in this **task** (a
//!   tokio task-local: it follows the task across threads, and ends with its scope).
//! - [`Transactional::run`] (from [`TransactionManager::transactional`](crate::tm::TransactionManager::transactional)):
//!   runs an async block under one of Seata's six [`Propagation`] modes, begins,
//!   commits and rolls back as Seata's template does, calls [`TransactionHook`]s.
//! - [`with_xid`]: runs a future inside a transaction begun elsewhere (what a server
//!   does with a request carrying `TX_XID`); [`without`]: suspends the current one.
//!
//! | propagation | a transaction is current | none is |
//! |---|---|---|
//! | `Required` | joins it | begins one |
//! | `RequiresNew` | suspends it, begins one, resumes it after | begins one |
//! | `NotSupported` | suspends it, runs with none, resumes it after | runs with none |
//! | `Supports` | joins it | runs with none |
//! | `Never` | [`TxError::Existing`], the block does not run | runs with none |
//! | `Mandatory` | joins it | [`TxError::NoTransaction`], the block does not run |
//!
//! The block that began a transaction ends it: `Ok` commits, `Err` rolls back (or
//! commits, by the rule given to [`run_with`](Transactional::run_with)), a panic rolls
//! back and goes on unwinding, and a block dropped before its end (a timeout around
//! it, a cancelled request) is rolled back from a task of its own. A block that joined
//! ends nothing: its error goes up to the one that began the transaction.
//!
//! Across services (feature `http`, `meshline`'s `tx-http`): `http` has the tower
//! layers that put the current XID on outgoing HTTP and gRPC requests and run incoming
//! ones inside the transaction they carry, with Seata's header names.
//!
//! Task-locals are not inherited: a task spawned inside a transaction is outside it
//! unless it runs in [`Current::scope`].

pub(crate) mod context;
mod error;
mod hooks;
#[cfg(feature = "http")]
pub mod http;
mod propagation;
mod run;

pub use context::{
    Current, Role, current, current_xid, register_hook, valid_xid, with_xid, without,
};
pub use error::{Ended, TxError};
pub use hooks::TransactionHook;
pub use propagation::Propagation;
pub use run::Transactional;
