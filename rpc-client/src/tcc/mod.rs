//! TCC the way Seata's Java RMs do it: an action's try registers its branch with a
//! [`BusinessActionContext`] whose `applicationData` is byte for byte the JSON Seata
//! Java writes (so a branch registered here can be confirmed by a Java RM of the same
//! action, and the other way round), and phase two dispatches to the action's confirm
//! or cancel with that context back.
//!
//! ```no_run
//! # async fn f(rm: meshline_rpc_client::rm::ResourceManager, tm: meshline_rpc_client::tm::TransactionManager) {
//! use meshline_rpc_client::tcc::{ActionParams, BusinessActionContext, TccAction, TccActions};
//!
//! struct Debit;
//!
//! #[meshline_rpc_client::rm::async_trait]
//! impl TccAction for Debit {
//!     fn name(&self) -> &str { "debit" }
//!     async fn commit(&self, ctx: &BusinessActionContext) -> Result<(), String> {
//!         let _amount = ctx.get_i64("amount"); // release the frozen amount...
//!         Ok(())
//!     }
//!     async fn rollback(&self, ctx: &BusinessActionContext) -> Result<(), String> {
//!         Ok(()) // unfreeze it...
//!     }
//! }
//!
//! // The RM serves the action: `.resource("debit").handler(TccActions::new().with(Debit))`.
//! let r = tm.transactional("transfer").run(|_| async {
//!     rm.tcc_prepare(&Debit, ActionParams::new().param("amount", 5), |ctx| async move {
//!         // freeze the amount, under ctx.xid() / ctx.branch_id() ...
//!         Ok::<_, String>(())
//!     })
//!     .await
//!     .map_err(|e| e.to_string())
//! })
//! .await;
//! # }
//! ```

mod action;
mod application_data;
mod context;
mod java_map;
mod prepare;

pub use action::{MethodNames, TccAction, TccActions};
pub use context::{ActionParams, ActionValue, BusinessActionContext};
pub use prepare::TccError;
