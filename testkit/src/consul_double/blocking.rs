//! Blocking queries: `?index=N&wait=D` holds a read until the index it would answer
//! with (a service's, a KV key's) passes `N` or the wait (default 5 min, at most 10 min, plus up to wait/16 jitter) runs out.

use std::time::Duration;

use super::state::{Db, Shared};
use crate::http_double::{parse_go_duration, query_get};

/// The blocking part of a read's query string.
pub(super) struct BlockingQuery {
    /// `?index=`: answer once the index is past it (0 or absent: at once).
    min_index: Option<u64>,
    /// `?wait=`, capped.
    wait: Duration,
}

impl BlockingQuery {
    /// Reads `index` and `wait` from the query, or the text of Consul's 400 answer.
    pub(super) fn parse(q: &[(String, String)]) -> Result<Self, &'static str> {
        let min_index = match query_get(q, "index") {
            None => None,
            Some(i) => match i.parse::<u64>() {
                Ok(i) => Some(i),
                Err(_) => return Err("Invalid index"),
            },
        };
        let wait = match query_get(q, "wait") {
            None => Duration::from_secs(300),
            Some(w) => match parse_go_duration(w) {
                Some(w) => w.min(Duration::from_secs(600)),
                None => return Err("Invalid wait time"),
            },
        };
        Ok(BlockingQuery { min_index, wait })
    }

    /// Waits until the index of service `name` passes `index`, or the wait ends; returns
    /// at once without an index.
    pub(super) async fn wait(&self, shared: &Shared, name: &str) {
        self.wait_until(shared, |db| db.index_of(name)).await
    }

    /// Waits until `index_of` (the index the read would answer with, computed on the
    /// catalog after each change) passes `?index=`, or the wait ends; returns at once
    /// without an index.
    pub(super) async fn wait_until(&self, shared: &Shared, index_of: impl Fn(&Db) -> u64) {
        let Some(n) = self.min_index.filter(|n| *n > 0) else {
            return;
        };
        let wait = self.wait;
        let jitter = if wait.as_millis() >= 16 {
            Duration::from_millis(fastrand::u64(0..=(wait.as_millis() as u64 / 16)))
        } else {
            Duration::ZERO
        };
        let deadline = tokio::time::Instant::now() + wait + jitter;
        let mut rx = shared.changed.subscribe();
        loop {
            if index_of(&shared.lock()) > n {
                break;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                _ => break,
            }
        }
    }
}
