//! [`TccAction`]: a TCC action's confirm and cancel, and [`TccActions`], the RM's
//! phase-two handler that dispatches the TC's BranchCommit / BranchRollback to them
//! (Seata's `TCCResourceManager`).

use std::collections::HashMap;
use std::sync::Arc;

use super::application_data;
use super::context::BusinessActionContext;
use crate::message::{
    BranchCommitRequest, BranchEndRequest, BranchRollbackRequest, BranchStatus, BranchType,
    UndoLogDeleteRequest,
};
use crate::rm::BranchHandler;

/// The method names a TCC action records in its branch's context (`sys::prepare`,
/// `sys::commit`, `sys::rollback`). Seata Java's annotation defaults: `commit` and
/// `rollback`; the try's is its method's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodNames {
    /// The try.
    pub prepare: String,
    /// The confirm.
    pub commit: String,
    /// The cancel.
    pub rollback: String,
}

impl Default for MethodNames {
    fn default() -> Self {
        MethodNames {
            prepare: "prepare".into(),
            commit: "commit".into(),
            rollback: "rollback".into(),
        }
    }
}

/// A TCC action's second phase (Seata's `@TwoPhaseBusinessAction` bean). Its try is
/// run by [`ResourceManager::tcc_prepare`](crate::rm::ResourceManager::tcc_prepare),
/// which registers the branch; the TC then calls `commit` (confirm) or `rollback`
/// (cancel) through [`TccActions`], possibly more than once and possibly without a
/// try having run (a rollback that overtook it): each must be idempotent, which the
/// fence gives for free.
///
/// `Ok(())` is answered `PhaseTwo_Committed` / `PhaseTwo_Rollbacked`; `Err` is answered
/// retryable (Seata's `false` or exception), and the TC asks again later.
#[async_trait::async_trait]
pub trait TccAction: Send + Sync + 'static {
    /// The action's name: the TCC resource id the RM registers and the branch names
    /// (Java's `@TwoPhaseBusinessAction(name = ...)`). A Java RM of the same name can
    /// end the branches this one registers, and the other way round.
    fn name(&self) -> &str;

    /// The method names recorded in the context.
    fn method_names(&self) -> MethodNames {
        MethodNames::default()
    }

    /// Whether the action runs under the fence (`useTCCFence`), recorded in the
    /// context so phase two knows, wherever it runs.
    fn use_fence(&self) -> bool {
        false
    }

    /// Confirm.
    async fn commit(&self, ctx: &BusinessActionContext) -> Result<(), String>;

    /// Cancel.
    async fn rollback(&self, ctx: &BusinessActionContext) -> Result<(), String>;
}

/// A shared action (`Arc<MyAction>`) acts as the action does, so the service that runs
/// its tries can keep a reference to the one the RM dispatches to.
#[async_trait::async_trait]
impl<T: TccAction + ?Sized> TccAction for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn method_names(&self) -> MethodNames {
        (**self).method_names()
    }

    fn use_fence(&self) -> bool {
        (**self).use_fence()
    }

    async fn commit(&self, ctx: &BusinessActionContext) -> Result<(), String> {
        (**self).commit(ctx).await
    }

    async fn rollback(&self, ctx: &BusinessActionContext) -> Result<(), String> {
        (**self).rollback(ctx).await
    }
}

/// The RM's phase-two handler for TCC actions: give it to the RM builder
/// (`.handler(actions.clone())`, with `.resource(name)` for each of
/// [`names`](Self::names)). A branch of an action this RM does not have is answered
/// retryable (another RM of the same resource may take it), as Seata's does.
#[derive(Clone, Default)]
pub struct TccActions {
    actions: Arc<HashMap<String, Arc<dyn TccAction>>>,
}

impl std::fmt::Debug for TccActions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TccActions")
            .field("names", &self.names())
            .finish()
    }
}

impl TccActions {
    /// No actions.
    pub fn new() -> Self {
        TccActions::default()
    }

    /// Adds `action` (one of a name: the last wins).
    pub fn with(mut self, action: impl TccAction) -> Self {
        Arc::make_mut(&mut self.actions).insert(action.name().to_string(), Arc::new(action));
        self
    }

    /// The actions' names: the resources the RM registers.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.actions.keys().cloned().collect();
        names.sort();
        names
    }

    /// The phase-two context of a branch: its action and what the try recorded.
    fn context(
        &self,
        r: &BranchEndRequest,
    ) -> Result<(Arc<dyn TccAction>, BusinessActionContext), String> {
        if r.branch_type != BranchType::TCC {
            return Err(format!(
                "branch {} of {} is {}, not TCC",
                r.branch_id, r.xid, r.branch_type
            ));
        }
        let action =
            self.actions.get(&r.resource_id).cloned().ok_or_else(|| {
                format!("TCC resource is not exist, resourceId: {}", r.resource_id)
            })?;
        let map = application_data::read(r.application_data.as_deref())?;
        Ok((
            action,
            BusinessActionContext::new(&r.xid, r.branch_id, &r.resource_id, map),
        ))
    }
}

#[async_trait::async_trait]
impl BranchHandler for TccActions {
    async fn branch_commit(&self, r: BranchCommitRequest) -> Result<BranchStatus, String> {
        let (action, ctx) = self.context(&r)?;
        action.commit(&ctx).await?;
        Ok(BranchStatus::PhaseTwoCommitted)
    }

    async fn branch_rollback(&self, r: BranchRollbackRequest) -> Result<BranchStatus, String> {
        let (action, ctx) = self.context(&r)?;
        action.rollback(&ctx).await?;
        Ok(BranchStatus::PhaseTwoRollbacked)
    }

    async fn undo_log_delete(&self, _: UndoLogDeleteRequest) {}
}
