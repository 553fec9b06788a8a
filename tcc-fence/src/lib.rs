//! # meshline-tcc-fence
//!
//! Seata's TCC fence for Rust services: the `tcc_fence_log` table and Seata's
//! `TCCFenceHandler` rules, on the sqlx pool the service already uses. It answers the
//! three faults every TCC action meets under retries and network delay:
//!
//! - **idempotent confirm and cancel**: the TC sends phase two again until it gets an
//!   answer; the work runs once;
//! - **empty rollback**: a cancel for a try that never ran (the try was lost, or is
//!   still on its way): nothing is undone, and it is recorded;
//! - **anti-suspension**: a try arriving after its cancel is refused, so nothing is
//!   reserved that no one will ever release.
//!
//! Each phase's fence row and the business work are one local transaction: the work
//! is a closure over the `sqlx::Transaction` returning a boxed future (sqlx's own
//! `Connection::transaction` shape), and a failed work takes the row
//! change back with it. Seata Java's services with the same table and the same
//! branches see the same rows.
//!
//! ```no_run
//! # async fn f(pool: sqlx::SqlitePool, ctx: meshline_rpc_client::tcc::BusinessActionContext) -> Result<(), Box<dyn std::error::Error>> {
//! use meshline_tcc_fence::{Fenced, TccFence};
//!
//! let fence = TccFence::new(pool);
//! fence.create_table().await?;
//! // In the try (ctx from `ResourceManager::tcc_prepare`):
//! fence
//!     .prepare(&ctx, |tx| {
//!         Box::pin(async move {
//!             sqlx::query("UPDATE account SET frozen = frozen + 5 WHERE id = 'alice'")
//!                 .execute(&mut **tx)
//!                 .await
//!         })
//!     })
//!     .await?;
//! // In the action's cancel:
//! let done = fence
//!     .rollback(&ctx, |tx| {
//!         Box::pin(async move {
//!             sqlx::query("UPDATE account SET frozen = frozen - 5 WHERE id = 'alice'")
//!                 .execute(&mut **tx)
//!                 .await
//!         })
//!     })
//!     .await?;
//! assert!(matches!(done, Fenced::Ran(_) | Fenced::AlreadyDone | Fenced::EmptyRollback));
//! # Ok(()) }
//! ```
//!
//! A crate of its own, beside the rpc-client's `tcc` module: sqlx and a database driver
//! are heavy, and only a service that runs TCC actions on a database needs them.
//!
//! Databases, each a feature: `sqlite` (the default, bundled: nothing to install),
//! `postgres` and `mysql` (MySQL and MariaDB), with Seata's DDL
//! (`script/client/tcc/db/*.sql`; SQLite has none in Seata, the same columns here).
//! Times are the database's own clock (`NOW(3)`, `LOCALTIMESTAMP(3)`), where Seata's
//! Java client binds its own.
#![warn(missing_docs)]

mod error;
mod fence;
mod status;
mod store;

pub use error::FenceError;
pub use fence::{DEFAULT_CLEAN_PERIOD, DEFAULT_TABLE, Fenced, InvalidTable, TccFence, Work};
pub use status::FenceStatus;
pub use store::FenceDb;
