//! `ZookeeperRegistry::nearby` against a real ZooKeeper (meshline-testkit): the other
//! clusters under `/registry/zk` with members, as `meshline doctor` shows them when the
//! asked cluster is empty.

mod common;

use std::time::Duration;

use common::*;
use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Config, Nearby, RegistryService};
use meshline_registry_others::ZookeeperRegistry;
use meshline_testkit::ZooKeeper;
use zookeeper_client as zk;

fn config(connect: &str) -> Config {
    ConfigLoader::new()
        .set("registry.type", "zk")
        .set("registry.zk.serverAddr", connect)
        .set("registry.zk.sessionTimeout", "30s")
        .set("registry.zk.connectTimeout", "1s")
        .load()
        .unwrap()
}

/// (cluster, sorted members) of each place, in order; each place is the cluster's
/// node under Seata's `/registry/zk`.
fn summary(places: &[Nearby]) -> Vec<(String, Vec<String>)> {
    let found = meshline_testkit::watch::cluster_places(places, "zk");
    for (p, (cluster, _)) in places.iter().zip(&found) {
        assert!(
            p.place.contains(&format!("/registry/zk/{cluster}")),
            "{p:?}"
        );
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_cluster_lists_the_other_clusters_with_members() {
    init_logs();
    let zk = ZooKeeper::start().expect("zookeeper");
    let reg = ZookeeperRegistry::connect(&config(&zk.connect_string()))
        .await
        .unwrap();
    // Nothing at all (not even /registry/zk): nothing nearby.
    assert!(reg.nearby("default").await.unwrap().is_empty());

    // What a Seata TC writes (reference/seata-compat.md §1.4), through a raw client,
    // plus an empty cluster path and one holding only garbage.
    let raw = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(&zk.connect_string())
        .await
        .unwrap();
    let dir = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    for path in [
        "/registry/zk/default2/10.0.0.1:8091",
        "/registry/zk/default2/10.0.0.2:8091",
        "/registry/zk/junk/not-an-address",
        "/registry/zk/default/",
    ] {
        raw.mkdir(path.trim_end_matches('/'), &dir).await.unwrap();
    }
    // And one we register ourselves.
    reg.register("prod", &inst("10.0.0.5:8091")).await.unwrap();

    assert!(reg.lookup("default").await.unwrap().is_empty());
    assert_eq!(
        summary(&reg.nearby("default").await.unwrap()),
        vec![
            (
                "default2".to_string(),
                vec!["10.0.0.1:8091".to_string(), "10.0.0.2:8091".to_string()]
            ),
            ("prod".to_string(), vec!["10.0.0.5:8091".to_string()]),
        ]
    );
    // The asked cluster itself is never listed, even with members.
    let clusters: Vec<String> = summary(&reg.nearby("default2").await.unwrap())
        .into_iter()
        .map(|(c, _)| c)
        .collect();
    assert_eq!(clusters, vec!["prod"]);

    // Many members: a sample.
    for i in 1..=30 {
        raw.mkdir(&format!("/registry/zk/big/10.1.0.{i}:8091"), &dir)
            .await
            .unwrap();
    }
    let places = reg.nearby("default").await.unwrap();
    let big = places
        .iter()
        .find(|p| p.cluster.as_deref() == Some("big"))
        .expect("big listed");
    assert_eq!(big.members.len(), 10);
    reg.close().await.unwrap();
}

/// ZooKeeper gone after connecting: an error naming the connect string, within the
/// operation timeout (the connect timeout, 1 s here) rather than the 30 s session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_is_an_error_naming_the_address() {
    init_logs();
    let mut zk = ZooKeeper::start().expect("zookeeper");
    let reg = ZookeeperRegistry::connect(&config(&zk.connect_string()))
        .await
        .unwrap();
    zk.kill();
    let t = std::time::Instant::now();
    let text = reg.nearby("default").await.unwrap_err().to_string();
    assert!(text.contains(&zk.connect_string()), "no address in: {text}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}
