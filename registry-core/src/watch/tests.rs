//! The hub's and the watch's behaviour: publishing, empty protection, health, and
//! forwarding another watch's snapshots.

use super::*;
use std::time::Duration;

fn inst(s: &str) -> Instance {
    Instance::parse(s).unwrap()
}

#[tokio::test]
async fn first_value_is_current_then_only_changes() {
    let hub = WatchHub::new("test", EmptyProtection::Protect);
    assert_eq!(
        hub.publish("c", vec![inst("10.0.0.2:1"), inst("10.0.0.1:1")]),
        PublishOutcome::Changed(1)
    );
    let mut w = hub.subscribe("c");
    let s = w.next().await.unwrap();
    assert_eq!(s.revision(), 1);
    // Sorted by identity.
    assert_eq!(s.instances()[0].to_string(), "10.0.0.1:1");
    // Same set in another order: no new snapshot.
    assert_eq!(
        hub.publish("c", vec![inst("10.0.0.1:1"), inst("10.0.0.2:1")]),
        PublishOutcome::Unchanged
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(50), w.next())
            .await
            .is_err()
    );
    // A real change arrives.
    assert_eq!(
        hub.publish("c", vec![inst("10.0.0.1:1")]),
        PublishOutcome::Changed(2)
    );
    let s = tokio::time::timeout(Duration::from_secs(1), w.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.revision(), 2);
    assert_eq!(s.len(), 1);
}

#[tokio::test]
async fn duplicates_are_collapsed() {
    let hub = WatchHub::new("test", EmptyProtection::Protect);
    hub.publish(
        "c",
        vec![
            inst("10.0.0.1:1"),
            inst("[::ffff:10.0.0.1]:1"),
            inst("10.0.0.1:1"),
        ],
    );
    assert_eq!(hub.current("c").unwrap().len(), 1);
}

#[tokio::test]
async fn weight_change_is_a_change() {
    let hub = WatchHub::new("test", EmptyProtection::Protect);
    hub.publish("c", vec![inst("10.0.0.1:1")]);
    assert_eq!(
        hub.publish("c", vec![inst("10.0.0.1:1").with_weight(5)]),
        PublishOutcome::Changed(2)
    );
}

#[tokio::test]
async fn empty_protection_keeps_last_list() {
    let hub = WatchHub::new("test", EmptyProtection::Protect);
    hub.publish("c", vec![inst("10.0.0.1:1")]);
    let mut w = hub.subscribe("c");
    w.next().await.unwrap();
    assert_eq!(hub.publish("c", vec![]), PublishOutcome::ProtectedEmpty);
    assert_eq!(w.current().len(), 1);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), w.next())
            .await
            .is_err()
    );
    // A non-empty shrink is applied.
    hub.publish("c", vec![inst("10.0.0.1:1"), inst("10.0.0.2:1")]);
    assert_eq!(
        hub.publish("c", vec![inst("10.0.0.2:1")]),
        PublishOutcome::Changed(3)
    );
}

#[tokio::test]
async fn empty_apply_policy_applies() {
    let hub = WatchHub::new("test", EmptyProtection::Apply);
    hub.publish("c", vec![inst("10.0.0.1:1")]);
    assert_eq!(hub.publish("c", vec![]), PublishOutcome::Changed(2));
    assert!(hub.current("c").unwrap().is_empty());
}

#[tokio::test]
async fn health_stale_keeps_since_and_recovers() {
    let hub = WatchHub::new("test", EmptyProtection::Protect);
    let mut w = hub.subscribe("c");
    assert!(w.health().is_connected());
    hub.mark_all_stale("connection refused");
    let h = w.health_changed().await.unwrap();
    let Health::Stale { since, .. } = h else {
        panic!("expected stale")
    };
    std::thread::sleep(Duration::from_millis(5));
    hub.mark_stale("c", "timeout");
    match w.health_changed().await.unwrap() {
        Health::Stale { since: s2, reason } => {
            assert_eq!(s2, since);
            assert_eq!(reason, "timeout");
        }
        Health::Connected => panic!("expected stale"),
    }
    hub.mark_all_connected();
    assert_eq!(w.health_changed().await.unwrap(), Health::Connected);
}

#[tokio::test]
async fn a_cluster_without_watches_is_forgotten() {
    let hub = WatchHub::new("test", EmptyProtection::Protect);
    let w = hub.subscribe("c");
    let w2 = w.clone();
    hub.publish("c", vec![inst("10.0.0.1:1")]);
    assert!(!hub.forget_if_unwatched("c"), "two watches are left");
    drop(w);
    assert!(!hub.forget_if_unwatched("c"), "a clone is left");
    let gone = tokio::spawn({
        let hub = Arc::new(hub);
        async move {
            hub.watchers_gone("c").await;
            hub
        }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!gone.is_finished(), "a watch is still held");
    drop(w2);
    let hub = tokio::time::timeout(Duration::from_secs(5), gone)
        .await
        .expect("watchers_gone resolves when the last watch is dropped")
        .unwrap();
    assert!(hub.forget_if_unwatched("c"));
    assert!(hub.current("c").is_none());
    assert!(hub.clusters().is_empty());
}

#[tokio::test]
async fn close_ends_watches() {
    let hub = WatchHub::new("test", EmptyProtection::Protect);
    let mut w = hub.subscribe("c");
    w.next().await.unwrap();
    hub.close();
    assert!(matches!(w.next().await, Err(RegistryError::Closed { .. })));
}

/// A forwarded snapshot that is sorted and unique is shared as it is (no copy, no sort);
/// one that is not (a `Snapshot::new` of a list as it came) is sorted and de-duplicated
/// as any publish.
#[test]
fn forwarding_shares_a_sorted_snapshot_and_sorts_any_other() {
    let hub = WatchHub::new("t", EmptyProtection::Apply);
    let w = hub.subscribe("c");
    let a = Instance::new("10.0.0.1", 1).unwrap();
    let b = Instance::new("10.0.0.2", 1).unwrap();
    let sorted: Arc<[Instance]> = vec![a.clone(), b.clone()].into();
    assert_eq!(hub.forward("c", &sorted), PublishOutcome::Changed(1));
    assert!(Arc::ptr_eq(w.current().instances(), &sorted));
    assert_eq!(hub.forward("c", &sorted), PublishOutcome::Unchanged);
    let unsorted: Arc<[Instance]> = vec![b.clone(), a.clone(), b.clone()].into();
    assert_eq!(hub.forward("c", &unsorted), PublishOutcome::Unchanged);
    let c = Instance::new("10.0.0.0", 1).unwrap();
    let unsorted: Arc<[Instance]> = vec![b.clone(), c.clone(), a.clone()].into();
    assert_eq!(hub.forward("c", &unsorted), PublishOutcome::Changed(2));
    assert_eq!(&w.current().instances()[..], &[c, a, b][..]);
}
