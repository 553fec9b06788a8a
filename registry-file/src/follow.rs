//! The task that keeps a file registry's grouplists equal to its live configuration's.

use std::sync::{Arc, Weak};

use meshline_registry_core::centre::LiveConfig;
use tokio::sync::oneshot;

use crate::Inner;

/// Applies every configuration `live` publishes (with the registry's keys set in code on
/// top) and marks the watches stale while a file cannot be read, until the registry is
/// closed or dropped (`stop`'s sender goes).
pub(crate) async fn follow(weak: Weak<Inner>, live: LiveConfig, mut stop: oneshot::Receiver<()>) {
    let mut configs = live.subscribe();
    let mut problems = live.subscribe_problems();
    // What changed between the registry's first read and now counts too.
    if !apply(&weak, &live) {
        return;
    }
    if let Some(why) = live.problem() {
        mark(&weak, Some(why));
    }
    loop {
        tokio::select! {
            _ = &mut stop => return,
            changed = configs.changed() => {
                if changed.is_err() || !apply(&weak, &live) {
                    return;
                }
            }
            changed = problems.changed() => {
                if changed.is_err() {
                    return;
                }
                let why = problems.borrow_and_update().clone();
                mark(&weak, why);
            }
        }
    }
}

/// Applies the live configuration now; false when the registry is gone.
fn apply(weak: &Weak<Inner>, live: &LiveConfig) -> bool {
    let Some(inner) = weak.upgrade() else {
        return false;
    };
    inner.apply_config(&live.current());
    true
}

fn mark(weak: &Weak<Inner>, why: Option<String>) {
    let Some(inner) = weak.upgrade() else { return };
    let hub = inner.life.hub();
    match why {
        Some(why) => {
            tracing::warn!(error = %why, "file registry keeps the last good list");
            hub.mark_all_stale(&why);
        }
        None => hub.mark_all_connected(),
    }
}

/// Starts following `live` for `inner`; the returned sender stops it when dropped.
pub(crate) fn spawn(inner: &Arc<Inner>, live: LiveConfig) -> oneshot::Sender<()> {
    let (tx, rx) = oneshot::channel();
    tokio::spawn(follow(Arc::downgrade(inner), live, rx));
    tx
}
