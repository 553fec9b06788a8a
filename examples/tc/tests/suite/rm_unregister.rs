//! An RM's orderly end: a one-way UnregisterRM (105) naming its resources to every TC
//! that knows the message (2.7.0 and later), as Seata's RM does on shutdown; a TC of an
//! older version is not sent it (a 2.6 TC cannot decode it).

use crate::tx_world;

use std::sync::atomic::Ordering;
use std::time::Duration;

use meshline::rpc::ServerConfig;
use meshline::{EmptyProtection, WatchHub};
use meshline_example_tc::TcOptions;
use tx_world::{Recorder, Tc, quick_options, rm, start_tc, until};

async fn tc_of_version(version: &str) -> Tc {
    let options = TcOptions {
        version: version.into(),
        ..quick_options()
    };
    start_tc(options, ServerConfig::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rm_unregisters_from_the_tcs_that_know_how() {
    let new = tc_of_version("2.7.0").await;
    let old = tc_of_version("2.6.0").await;
    let hub = WatchHub::new("test", EmptyProtection::Apply);
    hub.publish("c", vec![new.instance(), old.instance()]);
    let rm = rm(&hub, "stock", "jdbc:stock", Recorder::default(), true, 2).await;
    rm.register_resource("jdbc:orders").await;
    assert!(
        until(Duration::from_secs(5), || {
            new.tc.rm_connections("jdbc:orders") == 1
        })
        .await,
        "the 2.7 TC never had both resources"
    );
    let unregistered = |tc: &Tc| tc.tc.stats().unregistered.load(Ordering::Relaxed);

    assert_eq!(rm.unregister().await, 1, "told the 2.7 TC only");
    assert!(
        until(Duration::from_secs(5), || {
            new.tc.rm_connections("jdbc:stock") == 0 && new.tc.rm_connections("jdbc:orders") == 0
        })
        .await,
        "the 2.7 TC never dropped the RM's resources"
    );
    assert_eq!(unregistered(&new), 1);
    // The connection stays open until the RM closes it; the 2.6 TC heard nothing.
    assert_eq!(rm.client().alive().len(), 2);
    assert_eq!(unregistered(&old), 0);
    assert_eq!(old.tc.rm_connections("jdbc:stock"), 1);

    rm.shutdown(Duration::from_secs(1)).await;
    assert!(
        until(Duration::from_secs(5), || unregistered(&new) == 2).await,
        "the shutdown never unregistered again"
    );
    assert_eq!(unregistered(&old), 0);
}

/// Seata's version order (`Version.convertVersion`): four parts, suffixes dropped.
#[test]
fn versions_compare_as_seata_compares_them() {
    use meshline::rpc::TcVersion;
    let v = |s: &str| TcVersion(s.into());
    assert!(v("2.7.0").at_least(2, 7, 0));
    assert!(v("2.7.0-SNAPSHOT").at_least(2, 7, 0));
    assert!(v("2.10.1").at_least(2, 7, 0));
    assert!(v("3.0").at_least(2, 7, 0));
    assert!(!v("2.6.0").at_least(2, 7, 0));
    assert!(!v("1.8.0.1").at_least(2, 7, 0));
    assert!(!v("unknown").at_least(2, 7, 0));
    assert!(!v("").at_least(0, 0, 1));
}
