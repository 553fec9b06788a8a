//! A Discovery on a live configuration: a watch by group follows the group's mapping
//! as the centre changes it, and a group not in the configuration is asked of the
//! centre.

use std::sync::Arc;
use std::time::Duration;

use crate::centre::{CentreSpec, LiveConfig, MemoryCentre};
use crate::config::{ConfigLoader, Format};
use crate::test_support::HubRegistry;
use crate::{Config, Discovery, Instance, WatchHub};

/// Nacos's blob and the balancer's single keys, as the facade asks for them.
fn nacos_spec() -> CentreSpec {
    let cfg = Config::from_text("config.type=nacos", Format::Properties).unwrap();
    let mut spec = CentreSpec::from_config(&cfg, &["nacos"], "dataId", "seata.properties").unwrap();
    spec.keys = vec![
        "client.loadBalance.type".into(),
        "client.loadBalance.virtualNodes".into(),
    ];
    spec
}

fn inst(s: &str) -> Instance {
    Instance::parse(s).unwrap()
}

#[tokio::test]
async fn a_watch_by_group_moves_with_the_mapping() {
    let hub = Arc::new(WatchHub::new("hub", crate::EmptyProtection::Protect));
    hub.publish("a", vec![inst("10.0.0.1:8091")]);
    hub.publish("b", vec![inst("10.0.0.2:8091"), inst("10.0.0.3:8091")]);
    let registry = Arc::new(HubRegistry(hub.clone()));
    let centre = Arc::new(MemoryCentre::new("nacos"));
    centre.put("service.vgroupMapping.default_tx_group", "a");
    let live = LiveConfig::start(ConfigLoader::new(), centre.clone(), nacos_spec())
        .await
        .unwrap();
    let d = Discovery::with_live_config(registry, &live);
    let mut w = d.watch("default_tx_group").await.unwrap();
    assert_eq!(w.next().await.unwrap().len(), 1);
    // A member change in the current cluster is forwarded.
    hub.publish("a", vec![inst("10.0.0.1:8091"), inst("10.0.0.9:8091")]);
    let s = tokio::time::timeout(Duration::from_secs(2), w.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.len(), 2);
    // The mapping moves: the watch now lists cluster b.
    centre.put("service.vgroupMapping.default_tx_group", "b");
    let s = tokio::time::timeout(Duration::from_secs(2), w.next())
        .await
        .expect("moved within 2 s")
        .unwrap();
    let got: Vec<String> = s.instances().iter().map(|i| i.to_string()).collect();
    assert_eq!(got, vec!["10.0.0.2:8091", "10.0.0.3:8091"]);
    assert_eq!(d.cluster_for("default_tx_group").unwrap(), "b");
    // And follows b's changes, not a's.
    hub.publish("a", vec![inst("10.0.0.7:8091")]);
    hub.publish("b", vec![inst("10.0.0.3:8091")]);
    let s = tokio::time::timeout(Duration::from_secs(2), w.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.instances()[0].to_string(), "10.0.0.3:8091");
    // A read asked for on the watch is asked of the cluster followed now.
    w.refresher().request();
    tokio::time::timeout(Duration::from_secs(2), hub.refresher("b").requested())
        .await
        .expect("the ask reached the registry's watch of b");
    // Health is mirrored.
    hub.mark_stale("b", "lost it");
    let h = tokio::time::timeout(Duration::from_secs(2), w.health_changed())
        .await
        .unwrap()
        .unwrap();
    assert!(!h.is_connected());
    // Dropping the watch ends the forwarding task: the registry's watch on b goes.
    drop(w);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while hub.watcher_count("b") > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "forwarder did not end"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A group other than `txServiceGroup` is read from the centre when
/// asked (its mapping single key, then the mapped cluster's grouplist), followed from
/// then on, and a Discovery asks for it by itself.
#[tokio::test]
async fn an_asked_group_is_read_from_the_centre_and_followed() {
    let centre = Arc::new(MemoryCentre::new("nacos"));
    centre.put("service.vgroupMapping.g1", "c1");
    centre.put("service.c1.grouplist", "10.0.0.1:8091");
    centre.put("service.c2.grouplist", "10.0.0.2:8091");
    let live = LiveConfig::start(ConfigLoader::new(), centre.clone(), nacos_spec())
        .await
        .unwrap();
    // Not read before it is asked: only the configuration's own group is.
    assert!(!live.current().service.vgroup_mapping.contains_key("g1"));
    live.ask_group("g1").await;
    let cfg = live.current();
    assert_eq!(cfg.service.vgroup_mapping["g1"], "c1");
    assert_eq!(cfg.grouplist("c1").unwrap(), vec!["10.0.0.1:8091"]);
    // Followed: a change of the mapping reaches the live configuration.
    let mut rx = live.subscribe();
    centre.put("service.vgroupMapping.g1", "c2");
    let cfg = tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            rx.changed().await.unwrap();
            let cfg = rx.borrow_and_update().clone();
            if cfg.service.vgroup_mapping["g1"] == "c2" {
                return cfg;
            }
        }
    })
    .await
    .expect("the asked group's new mapping within 2 s");
    assert_eq!(cfg.grouplist("c2").unwrap(), vec!["10.0.0.2:8091"]);
    // A cluster asked by name.
    centre.put("service.c3.grouplist", "10.0.0.3:8091");
    live.ask_cluster("c3").await;
    assert_eq!(
        live.current().grouplist("c3").unwrap(),
        vec!["10.0.0.3:8091"]
    );
    // A Discovery asks for the group it is given.
    centre.put("service.vgroupMapping.g2", "b");
    let hub = Arc::new(WatchHub::new("hub", crate::EmptyProtection::Protect));
    hub.publish("b", vec![inst("10.0.0.5:8091")]);
    let d = Discovery::with_live_config(Arc::new(HubRegistry(hub)), &live);
    assert_eq!(d.lookup("g2").await.unwrap(), vec![inst("10.0.0.5:8091")]);
    assert_eq!(d.cluster_for("g2").unwrap(), "b");
}
