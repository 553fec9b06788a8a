//! The raft double's state: raft groups (nodes, roles, term), the console users'
//! tokens, and the change signal the watches wait on. Shared by every node's HTTP
//! server and kept across their restarts (a TC keeps its raft log).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::watch;

use super::RaftDoubleOptions;
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
    /// Token -> when it expires.
    pub tokens: Mutex<HashMap<String, Instant>>,
    pub logins: Mutex<usize>,
    /// Calls refused with HTTP 401 (no, expired or unknown token).
    pub refused: Mutex<usize>,
    /// Bumped on every group change; watches wait on it.
    pub changes: watch::Sender<u64>,
}

impl State {
    pub(crate) fn new(opts: RaftDoubleOptions) -> Self {
        State {
            opts,
            groups: Mutex::new(BTreeMap::new()),
            tokens: Mutex::new(HashMap::new()),
            logins: Mutex::new(0),
            refused: Mutex::new(0),
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

    /// Issues a token valid for `token_validity`.
    pub(crate) fn issue_token(&self) -> String {
        let token = format!(
            "eyJhbGciOiJIUzI1NiJ9.{:016x}.{:016x}",
            fastrand::u64(..),
            fastrand::u64(..)
        );
        let until = Instant::now() + self.opts.token_validity;
        lock(&self.tokens).insert(token.clone(), until);
        *lock(&self.logins) += 1;
        token
    }

    /// True when `header` is `Bearer <a token we issued that has not expired>`.
    pub(crate) fn token_ok(&self, header: Option<&str>) -> bool {
        let Some(t) = header.and_then(|h| h.strip_prefix("Bearer ")) else {
            return false;
        };
        lock(&self.tokens)
            .get(t)
            .is_some_and(|until| Instant::now() < *until)
    }

    /// Makes every issued token invalid (as a server restarted with a new secret).
    pub(crate) fn expire_tokens(&self) {
        lock(&self.tokens).clear();
    }

    /// How long a watch is held when the request names no `timeout`.
    pub(crate) fn hold(&self) -> Duration {
        self.opts.watch_hold
    }
}
