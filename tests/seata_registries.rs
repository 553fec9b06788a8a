//! `registry.type=seata` (namingserver) and `registry.type=raft` through the facade:
//! a Seata user's configuration, `discovery_from_config`, and a lookup by
//! transaction service group, against the testkit doubles.

use std::time::Duration;

use meshline::core::config::ConfigLoader;
use meshline::registry::discovery_from_config;
use meshline_testkit::{NamingserverDouble, RaftDouble, RaftDoubleOptions};
use serde_json::json;

/// A TC registered in cluster `tc-cluster` announcing vGroup `my_tx_group` (as Seata's
/// server does through `metadata.vGroup`) is found by that tx group, with no
/// `service.vgroupMapping` in the client's configuration: the namingserver maps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namingserver_lookup_by_tx_group() {
    let ns = NamingserverDouble::start(Default::default()).unwrap();
    let tc = json!({
        "control": {"host": "10.9.0.1", "port": 7091},
        "transaction": {"host": "10.9.0.1", "port": 8091},
        "weight": 1.0, "healthy": true, "term": 1, "timestamp": 1, "role": "MEMBER",
        "metadata": {"cluster-type": "default", "vGroup": {"my_tx_group": "unit-1"}},
    });
    assert!(ns.register_raw("public", "tc-cluster", "unit-1", tc));
    // Seata's Spring keys, verbatim.
    let text = format!(
        "seata:\n  tx-service-group: my_tx_group\n  registry:\n    type: seata\n    seata:\n      server-addr: {}\n      namespace: public\n      heartbeat-period: 5000\n      cluster: default\n",
        ns.server_addr()
    );
    let cfg = ConfigLoader::new()
        .text(text, meshline::core::config::Format::Yaml)
        .load()
        .unwrap();
    assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
    let d = discovery_from_config(&cfg).await.unwrap();
    assert_eq!(d.registry().kind(), "seata");
    let l = d.lookup("my_tx_group").await.unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].to_string(), "10.9.0.1:8091");
    let mut w = d.watch("my_tx_group").await.unwrap();
    assert_eq!(w.next().await.unwrap().len(), 1);
    d.registry().close().await.unwrap();
}

/// `registry.type=raft`: the tx group's mapping names the raft group; the leader is
/// listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_lookup_by_tx_group() {
    let raft = RaftDouble::start(RaftDoubleOptions::default()).unwrap();
    raft.set_members("default", &["10.9.1.1:8091", "10.9.1.2:8091"], Some(1));
    let cfg = ConfigLoader::new()
        .set("registry.type", "raft")
        .set("registry.raft.serverAddr", raft.server_addr())
        .set("service.vgroupMapping.my_tx_group", "default")
        .load()
        .unwrap();
    assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
    let d = discovery_from_config(&cfg).await.unwrap();
    let l = tokio::time::timeout(Duration::from_secs(10), d.lookup("my_tx_group"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].to_string(), "10.9.1.2:8091");
    d.registry().close().await.unwrap();
}
