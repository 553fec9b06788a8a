//! Reading and following one cluster: the `SCAN` (with the remaining TTLs of the
//! members' keys) and the watch loop that subscribes to the cluster's channel and
//! rescans on messages, periodically and at key expiry. Separate because it is the read
//! side of the backend and runs as one task per watched cluster.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use meshline_registry_core::{Backoff, Instance, RegistryError, WatchScope};

use super::layout::{Entry, channel, classify, glob_escape, key_prefix, parse_message};
use super::{Inner, KIND};

/// What one scan found: the members, and the shortest remaining key TTL.
pub(super) struct ScanResult {
    pub(super) members: Vec<Instance>,
    earliest_expiry: Option<Duration>,
}

impl Inner {
    pub(super) async fn scan(&self, cluster: &str) -> Result<ScanResult, RegistryError> {
        let prefix = key_prefix(cluster);
        let pattern = format!("{}*", glob_escape(&prefix));
        let (keys, _) = self.scan_keys(&pattern, None).await?;
        let mut members = Vec::new();
        let mut member_keys = Vec::new();
        for k in &keys {
            match classify(&prefix, k) {
                Entry::Member(i) => {
                    members.push(i);
                    member_keys.push(k.clone());
                }
                Entry::OtherCluster => {}
                // Truncated and rate-limited per cluster: a hostile server can hold
                // any number of long garbage keys, seen again on every scan.
                Entry::Bad(reason) => {
                    meshline_registry_core::redact::malformed_entry(KIND, cluster, k, b"", &reason)
                }
            }
        }
        let mut earliest_expiry = None;
        if !member_keys.is_empty() {
            let ttls: Vec<i64> = self
                .servers
                .run("pttl", |mut c| {
                    let mut pipe = redis::pipe();
                    for k in &member_keys {
                        pipe.cmd("PTTL").arg(k);
                    }
                    async move { pipe.query_async(&mut c).await }
                })
                .await?;
            earliest_expiry = ttls
                .into_iter()
                .filter(|t| *t > 0)
                .min()
                .map(|ms| Duration::from_millis(ms as u64));
        }
        Ok(ScanResult {
            members,
            earliest_expiry,
        })
    }
}

/// The shortest time between two scans a burst of pub/sub messages can trigger (a
/// hostile or busy publisher made one full SCAN per message).
const MIN_SCAN_GAP: Duration = Duration::from_millis(200);

/// Follows one cluster: SUBSCRIBE + rescan on messages, periodically and at key expiry,
/// until `scope` stops (the client closed or the last watch on the cluster was dropped);
/// the subscription ends with it.
pub(super) async fn watch_loop(inner: Arc<Inner>, scope: WatchScope) {
    let cluster = scope.cluster();
    let chan = channel(cluster);
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    // When the last scan started (none yet: the first may run at once).
    let mut last_scan = tokio::time::Instant::now()
        .checked_sub(MIN_SCAN_GAP)
        .unwrap_or_else(tokio::time::Instant::now);
    'connect: loop {
        let mut pubsub = match inner.servers.pubsub().await {
            Ok(p) => p,
            Err(e) => {
                scope.mark_stale(&e.to_string());
                let d = backoff.next_delay();
                if !scope.sleep(d).await {
                    return;
                }
                continue;
            }
        };
        if let Err(e) = pubsub.subscribe(&chan).await {
            scope.mark_stale(&format!("cannot subscribe to {chan}: {e}"));
            let d = backoff.next_delay();
            if !scope.sleep(d).await {
                return;
            }
            continue;
        }
        let mut stream = pubsub.into_on_message();
        // Anything published while we were away is lost: rescan now.
        let mut next_scan = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = scope.stopped() => return,
                msg = stream.next() => match msg {
                    Some(m) => {
                        let payload = m.get_payload_bytes();
                        if parse_message(payload).is_none() {
                            meshline_registry_core::redact::malformed_entry(
                                KIND,
                                cluster,
                                chan.as_bytes(),
                                payload,
                                "unexpected message on the registry channel; rescanning anyway",
                            );
                        }
                        // Coalesced: at most one scan per MIN_SCAN_GAP. A burst's
                        // messages all land before the next scan, which reads the state
                        // after them, so the last change is never lost.
                        let earliest = last_scan + MIN_SCAN_GAP;
                        next_scan = next_scan.min(earliest.max(tokio::time::Instant::now()));
                    }
                    None => {
                        scope.mark_stale("redis pub/sub connection lost");
                        let d = backoff.next_delay();
                        if !scope.sleep(d).await {
                            return;
                        }
                        continue 'connect;
                    }
                },
                _ = tokio::time::sleep_until(next_scan) => {
                    last_scan = tokio::time::Instant::now();
                    match inner.scan(cluster).await {
                        Ok(found) => {
                            scope.publish_read(found.members);
                            backoff.reset();
                            let mut wait = inner.rescan;
                            if let Some(e) = found.earliest_expiry {
                                wait = wait.min(e + Duration::from_millis(20));
                            }
                            next_scan = tokio::time::Instant::now() + wait;
                        }
                        Err(e) => {
                            scope.mark_stale(&format!("rescan failed: {e}"));
                            next_scan = tokio::time::Instant::now() + backoff.next_delay();
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::RedisRegistry;
    use meshline_registry_core::{Config, RegistryService};

    /// Subscribers of `chan`, as the server counts them.
    async fn subscribers(inner: &Inner, chan: &str) -> i64 {
        let (_, n): (String, i64) = inner
            .servers
            .run("pubsub numsub", |mut c| async move {
                redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(chan)
                    .query_async(&mut c)
                    .await
            })
            .await
            .unwrap();
        n
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_subscription_ends_with_the_last_watch() {
        let server = meshline_testkit::Redis::start().expect("redis");
        let mut config = Config::default();
        config
            .registry
            .section_mut("redis")
            .set("serverAddr", server.addr());
        let reg = RedisRegistry::connect(&config).await.unwrap();
        let chan = channel("c");
        let w = reg.watch("c").await.unwrap();
        meshline_testkit::watch::eventually(Duration::from_secs(10), "SUBSCRIBE", || async {
            subscribers(&reg.inner, &chan).await == 1
        })
        .await;
        drop(w);
        let refs = || Arc::strong_count(&reg.inner);
        crate::common::assert_follow_ends_with_last_watch(&reg, &reg.inner.life, "c", 1, refs)
            .await;
        meshline_testkit::watch::eventually(Duration::from_secs(10), "UNSUBSCRIBE", || async {
            subscribers(&reg.inner, &chan).await == 0
        })
        .await;
        reg.close().await.unwrap();
    }
}
