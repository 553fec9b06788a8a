//! [`TransactionHook`]: code run around a global transaction's begin, commit, rollback
//! and completion, as Seata's `TransactionHook`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// Called around the global transaction a [`Transactional`](super::Transactional) block
/// begins, at the moments Seata's `TransactionalTemplate` calls its hooks:
///
/// | hook | when |
/// |---|---|
/// | `before_begin` / `after_begin` | around GlobalBegin (`after_begin` only when it succeeded) |
/// | `before_commit` / `after_commit` | around the commit (`after_commit` only when it committed) |
/// | `before_rollback` / `after_rollback` | around the rollback (`after_rollback` when the TC answered it) |
/// | `after_completion` | last, whatever happened, even when the begin failed (no XID then) |
///
/// Only the block that **began** the transaction calls them: a block that joined one
/// (nested `Required`, a request that carried an XID) leaves commit and rollback to
/// the one that began it, and so its hooks. A hook that panics is logged at ERROR and
/// the others still run (Seata logs a hook's exception and goes on).
///
/// Hooks come from the block's [`hook`](super::Transactional::hook) list and from
/// [`register_hook`](super::register_hook) inside the block (Seata's
/// `TransactionHookManager.registerHook`): "send this message once the transaction
/// has committed".
pub trait TransactionHook: Send + Sync + 'static {
    /// Before GlobalBegin.
    fn before_begin(&self) {}
    /// After GlobalBegin succeeded.
    fn after_begin(&self, xid: &str) {
        let _ = xid;
    }
    /// Before the commit is sent.
    fn before_commit(&self, xid: &str) {
        let _ = xid;
    }
    /// After the TC committed the transaction.
    fn after_commit(&self, xid: &str) {
        let _ = xid;
    }
    /// Before the rollback is sent.
    fn before_rollback(&self, xid: &str) {
        let _ = xid;
    }
    /// After the TC answered the rollback.
    fn after_rollback(&self, xid: &str) {
        let _ = xid;
    }
    /// Last, whatever the outcome; `None` when the begin failed.
    fn after_completion(&self, xid: Option<&str>) {
        let _ = xid;
    }
}

/// The moments a hook is called at.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Moment {
    BeforeBegin,
    AfterBegin,
    BeforeCommit,
    AfterCommit,
    BeforeRollback,
    AfterRollback,
    AfterCompletion,
}

/// Calls `moment` on every hook in order; a panicking hook is logged and skipped.
pub(crate) fn trigger(hooks: &[Arc<dyn TransactionHook>], moment: Moment, xid: Option<&str>) {
    let x = xid.unwrap_or("");
    for hook in hooks {
        let called = catch_unwind(AssertUnwindSafe(|| match moment {
            Moment::BeforeBegin => hook.before_begin(),
            Moment::AfterBegin => hook.after_begin(x),
            Moment::BeforeCommit => hook.before_commit(x),
            Moment::AfterCommit => hook.after_commit(x),
            Moment::BeforeRollback => hook.before_rollback(x),
            Moment::AfterRollback => hook.after_rollback(x),
            Moment::AfterCompletion => hook.after_completion(xid),
        }));
        if let Err(panic) = called {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(xid = x, ?moment, panic = %what, "a transaction hook panicked; the others still run");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Log(Mutex<Vec<String>>);

    impl TransactionHook for Log {
        fn after_commit(&self, xid: &str) {
            self.0.lock().unwrap().push(format!("commit {xid}"));
        }
        fn after_completion(&self, xid: Option<&str>) {
            self.0.lock().unwrap().push(format!("done {xid:?}"));
        }
    }

    struct Panics;

    impl TransactionHook for Panics {
        fn after_commit(&self, _: &str) {
            panic!("hook failed");
        }
    }

    #[test]
    fn a_panicking_hook_does_not_stop_the_ones_after_it() {
        let log = Arc::new(Log(Mutex::new(Vec::new())));
        let hooks: Vec<Arc<dyn TransactionHook>> = vec![Arc::new(Panics), log.clone()];
        trigger(&hooks, Moment::AfterCommit, Some("x:1"));
        trigger(&hooks, Moment::AfterCompletion, None);
        assert_eq!(
            *log.0.lock().unwrap(),
            vec!["commit x:1".to_string(), "done None".to_string()]
        );
    }
}
