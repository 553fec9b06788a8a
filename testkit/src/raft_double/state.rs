//! The raft double's state: raft groups (nodes, roles, term), the console login, and the change signal the watches wait on. Shared by every node's HTTP
//! server and kept across their restarts (a TC keeps its raft log).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

use super::RaftDoubleOptions;
use crate::console_auth::ConsoleAuth;
use crate::http_double::lock;

/// A node of a group, as the test set it.
#[derive(Debug, Clone)]
pub(crate) struct NodeDef {
    pub control: (String, u16),
    pub transaction: (String, u16),
    pub role: &'static str,
}

/// One raft group.
#[derive(Debug, Default)]
pub(crate) struct Group {
    pub term: i64,
    pub nodes: Vec<NodeDef>,
    /// Raw JSON nodes appended to the answer (malformed on purpose).
    pub garbage: Vec<Value>,
}

/// Everything the double knows.
pub(crate) struct State {
    pub opts: RaftDoubleOptions,
    pub groups: Mutex<BTreeMap<String, Group>>,
    /// The console login and its tokens.
    pub auth: Arc<ConsoleAuth>,
    /// Bumped on every group change; watches wait on it.
    pub changes: watch::Sender<u64>,
}

impl State {
    pub(crate) fn new(opts: RaftDoubleOptions) -> Self {
        State {
            auth: Arc::new(ConsoleAuth::new(
                opts.credentials.clone(),
                opts.token_validity,
            )),
            opts,
            groups: Mutex::new(BTreeMap::new()),
            changes: watch::channel(0).0,
        }
    }

    /// Applies `f` to `group` (created when missing), moves its term on and wakes the
    /// watches: what the TC's `ClusterChangeEvent` does after a leader or
    /// configuration change.
    pub(crate) fn change(&self, group: &str, f: impl FnOnce(&mut Group)) -> i64 {
        let term = {
            let mut groups = lock(&self.groups);
            let g = groups.entry(group.to_string()).or_default();
            f(g);
            g.term += 1;
            g.term
        };
        self.changes.send_modify(|n| *n += 1);
        term
    }

    /// The group's term, 0 when unknown.
    pub(crate) fn term(&self, group: &str) -> i64 {
        lock(&self.groups).get(group).map_or(0, |g| g.term)
    }

    /// `ClusterController.cluster`'s answer for `group`: nodes, store mode and term
    /// when the group exists and has a leader; `storeMode` only when it exists without
    /// a leader; everything empty for an unknown group.
    pub(crate) fn metadata(&self, group: &str) -> Value {
        let groups = lock(&self.groups);
        let Some(g) = groups.get(group) else {
            return json!({"nodes": null, "storeMode": null, "term": 0});
        };
        let leader = g.nodes.iter().any(|n| n.role == "LEADER");
        if !leader {
            return json!({"nodes": null, "storeMode": self.opts.store_mode, "term": 0});
        }
        let mut nodes: Vec<Value> = g
            .nodes
            .iter()
            .map(|n| {
                json!({
                    "control": {"host": n.control.0, "port": n.control.1},
                    "transaction": {"host": n.transaction.0, "port": n.transaction.1},
                    "internal": {"host": n.control.0, "port": n.control.1 + 2000},
                    "weight": 1.0,
                    "healthy": true,
                    "timeStamp": 0,
                    "group": group,
                    "role": n.role,
                    "version": "2.3.0-SNAPSHOT",
                    "metadata": {},
                })
            })
            .collect();
        nodes.extend(g.garbage.iter().cloned());
        json!({"nodes": nodes, "storeMode": self.opts.store_mode, "term": g.term})
    }

    /// How long a watch is held when the request names no `timeout`.
    pub(crate) fn hold(&self) -> Duration {
        self.opts.watch_hold
    }
}
