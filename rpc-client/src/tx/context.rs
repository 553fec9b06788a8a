//! The transaction current in a task: Seata's `RootContext` (XID and branch type), held
//! in a tokio task-local instead of a thread-local, so it follows the task across the
//! runtime's threads and ends with the scope that set it.

use std::future::Future;
use std::sync::{Arc, Mutex};

use super::hooks::TransactionHook;
use crate::message::BranchType;

tokio::task_local! {
    static CURRENT: Option<Arc<Frame>>;
}

/// What this task's part in the current transaction is (Seata's
/// `GlobalTransactionRole`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// This process began it (a [`Transactional`](super::Transactional) block did):
    /// the block that began it commits or rolls it back.
    Launcher,
    /// It was begun elsewhere (an XID bound from a request, or by hand): work here
    /// joins it, and whoever began it ends it.
    Participant,
}

/// One transaction as a scope sees it.
pub(crate) struct Frame {
    pub xid: String,
    pub branch_type: Option<BranchType>,
    pub role: Role,
    /// Hooks registered inside the block that began it (see `register_hook`), shared
    /// by every frame of the transaction (a TCC try binds its branch type in a frame
    /// of its own).
    pub hooks: Arc<Mutex<Vec<Arc<dyn TransactionHook>>>>,
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frame")
            .field("xid", &self.xid)
            .field("branch_type", &self.branch_type)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

impl Frame {
    pub fn new(
        xid: String,
        branch_type: Option<BranchType>,
        role: Role,
        hooks: Vec<Arc<dyn TransactionHook>>,
    ) -> Arc<Frame> {
        Arc::new(Frame {
            xid,
            branch_type,
            role,
            hooks: Arc::new(Mutex::new(hooks)),
        })
    }

    pub fn hooks(&self) -> Vec<Arc<dyn TransactionHook>> {
        self.hooks.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The transaction current in this task: its XID, the branch type bound with it, and
/// this task's role. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Current {
    pub(crate) frame: Arc<Frame>,
}

impl Current {
    /// The XID.
    pub fn xid(&self) -> &str {
        &self.frame.xid
    }

    /// The branch type bound with it (Seata's `RootContext.getBranchType()`: set while
    /// a TCC action or an AT statement runs, and carried to other services as
    /// `TX_BRANCH_TYPE`), if any.
    pub fn branch_type(&self) -> Option<BranchType> {
        self.frame.branch_type
    }

    /// Whether this process began it.
    pub fn role(&self) -> Role {
        self.frame.role
    }

    /// Runs `fut` with this transaction current: how a task spawned inside a
    /// transaction joins it (task-locals are not inherited by `tokio::spawn`).
    ///
    /// ```no_run
    /// # async fn f() {
    /// use meshline_rpc_client::tx;
    /// if let Some(tx) = tx::current() {
    ///     tokio::spawn(tx.scope(async { /* tx::current() is the same transaction */ }));
    /// }
    /// # }
    /// ```
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> + use<F> {
        CURRENT.scope(Some(self.frame.clone()), fut)
    }
}

/// The transaction current in this task, if any (Seata's `RootContext.getXID()` and
/// `GlobalTransactionContext.getCurrent()`). `None` outside every transactional scope,
/// inside [`without`] and inside a block run with `NotSupported`.
pub fn current() -> Option<Current> {
    CURRENT
        .try_with(|c| c.clone())
        .ok()
        .flatten()
        .map(|frame| Current { frame })
}

/// The current XID, if any: what a call to another service carries.
pub fn current_xid() -> Option<String> {
    current().map(|c| c.xid().to_string())
}

/// Runs `fut` inside the transaction `xid`, begun elsewhere (this task a
/// [`Role::Participant`]): what the server layers do with a request that carries an
/// XID, Seata's `RootContext.bind(xid)` around the handler. Blocks inside join it
/// (`Required`, `Supports`, `Mandatory`); none of them commits or rolls it back.
///
/// An XID that is not one (see [`valid_xid`]) is not bound: `fut` runs with no
/// transaction, and the refusal is logged.
pub async fn with_xid<F: Future>(xid: &str, branch_type: Option<BranchType>, fut: F) -> F::Output {
    if !valid_xid(xid) {
        tracing::warn!(
            xid = %xid.escape_debug(),
            "not an XID (1-128 printable ASCII characters); the request runs outside any transaction"
        );
        return CURRENT.scope(None, fut).await;
    }
    let frame = Frame::new(xid.to_string(), branch_type, Role::Participant, Vec::new());
    CURRENT.scope(Some(frame), fut).await
}

/// Runs `fut` with no transaction current, the current one (if any) suspended for its
/// duration and current again after (Seata's `suspend` / `resume`).
pub async fn without<F: Future>(fut: F) -> F::Output {
    CURRENT.scope(None, fut).await
}

/// Runs `fut` with the current transaction's branch type set to `branch_type`
/// (Seata's `RootContext.bindBranchType` around a TCC try); with no transaction
/// current, as is.
pub(crate) async fn with_branch_type<F: Future>(branch_type: BranchType, fut: F) -> F::Output {
    let Some(c) = current() else {
        return fut.await;
    };
    let frame = Arc::new(Frame {
        xid: c.frame.xid.clone(),
        branch_type: Some(branch_type),
        role: c.frame.role,
        hooks: c.frame.hooks.clone(),
    });
    CURRENT.scope(Some(frame), fut).await
}

/// Runs `fut` with `frame` current (a new transaction, or none).
pub(crate) async fn scoped<F: Future>(frame: Option<Arc<Frame>>, fut: F) -> F::Output {
    CURRENT.scope(frame, fut).await
}

/// Registers `hook` on the transaction this task began (Seata's
/// `TransactionHookManager.registerHook`), so it runs at that transaction's commit,
/// rollback and completion. Returns `false`, and registers nothing, when there is no
/// transaction or it was begun elsewhere (its hooks run where it was begun).
pub fn register_hook(hook: impl TransactionHook) -> bool {
    match current() {
        Some(c) if c.role() == Role::Launcher => {
            c.frame
                .hooks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Arc::new(hook));
            true
        }
        _ => false,
    }
}

/// Whether `xid` can be an XID: 1 to 128 bytes (Seata's `xid` columns are
/// `VARCHAR(128)`) of printable ASCII without spaces. A request header is where an XID
/// comes from: anything else is refused rather than bound and sent on.
pub fn valid_xid(xid: &str) -> bool {
    (1..=128).contains(&xid.len()) && xid.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_bound_xid_is_current_inside_its_scope_only() {
        assert!(current().is_none());
        let inner = with_xid("10.0.0.7:8091:42", Some(BranchType::TCC), async {
            let c = current().expect("bound");
            assert_eq!(c.role(), Role::Participant);
            assert_eq!(c.branch_type(), Some(BranchType::TCC));
            let suspended = without(async { current_xid() }).await;
            (current_xid(), suspended)
        })
        .await;
        assert_eq!(inner, (Some("10.0.0.7:8091:42".into()), None));
        assert!(current().is_none());
    }

    #[tokio::test]
    async fn a_spawned_task_joins_only_when_given_the_scope() {
        let (plain, carried) = with_xid("x:1:2", None, async {
            let plain = tokio::spawn(async { current_xid() });
            let c = current().unwrap();
            let carried = tokio::spawn(c.scope(async { current_xid() }));
            (plain.await.unwrap(), carried.await.unwrap())
        })
        .await;
        assert_eq!(plain, None);
        assert_eq!(carried.as_deref(), Some("x:1:2"));
    }

    #[tokio::test]
    async fn what_is_not_an_xid_is_not_bound() {
        for bad in ["", "a b", "x\n1", &"9".repeat(129)] {
            assert!(!valid_xid(bad), "{bad:?}");
            assert_eq!(with_xid(bad, None, async { current_xid() }).await, None);
        }
        assert!(valid_xid("192.168.1.5:8091:2612341069705662465"));
        assert!(!register_hook(NoHook), "no transaction: nothing to hook");
        assert!(!with_xid("x:1:2", None, async { register_hook(NoHook) }).await);
    }

    struct NoHook;
    impl TransactionHook for NoHook {}
}
