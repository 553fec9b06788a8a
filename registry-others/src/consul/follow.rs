//! Reading and following one cluster: the health query (plain or blocking), Consul's
//! index rules, and the blocking-query loop of each watched cluster. Separate because
//! it is the read side of the backend and runs as one task per watched cluster.

use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use meshline_registry_core::{Backoff, Instance, WatchScope};
use reqwest::Method;

use super::agent::REQUEST_TIMEOUT;
use super::{Inner, KIND, parse};
use crate::common::Call;

/// How long one blocking query waits on the agent before it returns unchanged.
pub(super) const BLOCKING_WAIT: Duration = Duration::from_secs(30);

/// Extra time on top of `wait` (Consul adds up to wait/16 of jitter) before our HTTP
/// client gives up on a blocking query.
pub(super) const BLOCKING_MARGIN: Duration = Duration::from_secs(5);
impl Inner {
    /// `GET /v1/health/service/<cluster>?passing=true&tag=services[&index&wait]`.
    pub(super) async fn query(
        &self,
        cluster: &str,
        block: Option<u64>,
    ) -> Result<(Vec<Instance>, u64), String> {
        let mut q = vec![
            ("passing", "true".to_string()),
            ("tag", parse::SEATA_TAG.to_string()),
        ];
        let mut timeout = REQUEST_TIMEOUT;
        if let Some(index) = block {
            q.push(("index", index.to_string()));
            q.push(("wait", format!("{}s", self.wait.as_secs().max(1))));
            timeout = self.wait + self.wait / 16 + BLOCKING_MARGIN;
        }
        let (body, index) = self
            .agent
            .call(
                Call::new(Method::GET, &["v1", "health", "service", cluster]).query(&q),
                timeout,
            )
            .await
            .map_err(|e| e.describe())?;
        let list = parse::parse_health(cluster, &body)?;
        Ok((list, index))
    }
}
/// The index of the next query, after one made with `prev` (0: a plain read) answered
/// `new` (Consul's rules, docs/registry-wire.md §2.5): reset to 0 (a plain read) when the index went
/// backwards, otherwise follow it, but never block with index 0.
pub(super) fn next_index(prev: u64, new: u64) -> u64 {
    if new < prev { 0 } else { new.max(1) }
}

/// The blocking-query loop of one cluster, until `scope` stops (the client closed or
/// the last watch on the cluster was dropped: the query in flight is abandoned). `index`
/// 0 means "read without blocking".
pub(super) async fn watch_loop(inner: Arc<Inner>, scope: WatchScope, mut index: u64) {
    let cluster = scope.cluster();
    let mut backoff = Backoff::default();
    loop {
        let started = StdInstant::now();
        let block = (index > 0).then_some(index);
        let res = tokio::select! {
            _ = scope.stopped() => return,
            r = inner.query(cluster, block) => r,
        };
        match res {
            Ok((list, new_index)) => {
                backoff.reset();
                scope.publish_read(list);
                let prev = index;
                index = next_index(prev, new_index);
                if index == 0 {
                    tracing::info!(
                        registry = KIND,
                        cluster,
                        prev,
                        new_index,
                        "Consul index went backwards (agent restarted?); reading afresh"
                    );
                }
                // Rate-limit a query that came back at once without a newer index.
                if new_index <= prev
                    && started.elapsed() < Duration::from_millis(50)
                    && !scope.sleep(Duration::from_millis(50)).await
                {
                    return;
                }
            }
            Err(reason) => {
                scope.mark_stale(&reason);
                // After a failure we know nothing of the agent's state (it may have
                // restarted empty, with a lower index that a blocking query would sit
                // on until `wait` ran out): the next query is a plain read.
                index = 0;
                if !scope.sleep(backoff.next_delay()).await {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consul::ConsulRegistry;
    use meshline_registry_core::{Config, RegistryService};

    #[test]
    fn index_rules() {
        assert_eq!(next_index(10, 12), 12);
        assert_eq!(next_index(10, 10), 10, "a wait timeout keeps the index");
        assert_eq!(next_index(10, 3), 0, "backwards: read afresh");
        assert_eq!(next_index(0, 3), 3);
        assert_eq!(next_index(0, 0), 1, "never block with index 0");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_blocking_query_loop_ends_with_the_last_watch() {
        let agent = meshline_testkit::ConsulDouble::start(Default::default()).unwrap();
        let mut config = Config::default();
        config
            .registry
            .section_mut("consul")
            .set("serverAddr", agent.server_addr());
        let reg = ConsulRegistry::connect(&config).await.unwrap();
        let refs = || Arc::strong_count(&reg.inner);
        crate::common::assert_follow_ends_with_last_watch(&reg, &reg.inner.life, "c", 1, refs)
            .await;
        reg.close().await.unwrap();
    }
}
