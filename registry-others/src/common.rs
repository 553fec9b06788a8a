//! Small helpers shared by the backends of this crate.

use meshline_registry_core::{Config, EmptyProtection};

/// The empty-list policy configured by `registry.empty-protection`.
pub(crate) fn empty_policy(config: &Config) -> EmptyProtection {
    config.registry.empty_policy()
}

/// Splits a `host:port[,host:port...]` list (`;` accepted too), trimming blanks.
pub(crate) fn split_addrs(text: &str) -> Vec<String> {
    text.split([',', ';'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// `e` and its sources, `: `-separated (reqwest hides the cause, e.g. "Connection
/// refused", in its sources).
#[cfg(any(feature = "consul", feature = "eureka"))]
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Proves that a backend's follow task for `cluster` ends with the last [`Watch`] on
/// it: opens two watches, drops them one by one, and checks that the name stays
/// followed while one is left, then leaves both the lifecycle and the hub. `refs`
/// counts the references to the backend's shared state; the follow task holds
/// `follow_refs` of them (its `Arc<Inner>`), which must be released when it ends.
///
/// [`Watch`]: meshline_registry_core::Watch
#[cfg(test)]
pub(crate) async fn assert_follow_ends_with_last_watch<R>(
    registry: &R,
    life: &meshline_registry_core::Lifecycle,
    cluster: &str,
    follow_refs: usize,
    refs: impl Fn() -> usize,
) where
    R: meshline_registry_core::RegistryService,
{
    use std::time::Duration;
    const WITHIN: Duration = Duration::from_secs(10);
    let mut a = registry.watch(cluster).await.expect("first watch");
    let b = registry.watch(cluster).await.expect("second watch");
    a.next().await.expect("first snapshot");
    assert_eq!(life.watched().await, vec![cluster.to_string()]);
    let during = refs();
    drop(a);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(life.watched().await.len(), 1, "one watch is left");
    assert_eq!(refs(), during, "the follow task runs while a watch is left");
    drop(b);
    meshline_testkit::watch::eventually(WITHIN, "the follow task to end", || async {
        life.watched().await.is_empty() && refs() + follow_refs == during
    })
    .await;
    assert!(life.hub().clusters().is_empty(), "the hub forgot {cluster}");
}
