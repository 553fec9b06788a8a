use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::Format;

/// Nacos's blob, and the single keys another crate asks for (the facade passes the
/// balancer's: `crate::balancer::CENTRE_KEYS`).
fn nacos_spec() -> CentreSpec {
    let cfg = Config::from_text("config.type=nacos", Format::Properties).unwrap();
    let mut spec = CentreSpec::from_config(&cfg, &["nacos"], "dataId", "seata.properties").unwrap();
    spec.keys = vec![
        "client.loadBalance.type".into(),
        "client.loadBalance.virtualNodes".into(),
    ];
    spec
}

#[test]
fn spec_follows_seata_defaults_and_keys() {
    let spec = nacos_spec();
    assert_eq!(spec.blob, "seata.properties");
    assert_eq!(spec.format, Format::Properties);
    let cfg = Config::from_text(
        "config.zk.nodePath=/seata/client.yaml\nconfig.type=zk",
        Format::Properties,
    )
    .unwrap();
    let spec = CentreSpec::from_config(
        &cfg,
        &["zookeeper", "zk"],
        "nodePath",
        "/seata/seata.properties",
    )
    .unwrap();
    assert_eq!(spec.blob, "/seata/client.yaml");
    assert_eq!(spec.format, Format::Yaml);
    let cfg = Config::from_text(
        "config.etcd3.key=seata.txt\nconfig.dataType=yaml",
        Format::Properties,
    )
    .unwrap();
    let spec =
        CentreSpec::from_config(&cfg, &["etcd", "etcd3"], "key", "seata.properties").unwrap();
    assert_eq!(
        (spec.blob.as_str(), spec.format),
        ("seata.txt", Format::Yaml)
    );
    let cfg = Config::from_text("config.dataType=xml", Format::Properties).unwrap();
    let err = CentreSpec::from_config(&cfg, &["consul"], "key", "seata.properties")
        .unwrap_err()
        .to_string();
    assert!(err.contains("config.dataType=`xml`"), "{err}");
}

#[test]
fn seatas_unsupported_kinds_are_named() {
    for k in [
        "apollo",
        "springCloudConfig",
        "spring-cloud-config",
        "Custom",
    ] {
        let err = unsupported_kind(k).expect(k).to_string();
        assert!(
            err.contains(&format!("config.type=`{k}` is not supported")),
            "{err}"
        );
    }
    assert!(unsupported_kind("nacos").is_none());
    assert!(is_file_kind(" File "));
}

#[tokio::test]
async fn blob_then_single_keys_then_precedence() {
    let centre = Arc::new(MemoryCentre::new("nacos"));
    // The blob has the balancer and a registry key (ignored: Seata reads registry.*
    // from its file only); the mapping is a single key, and so is the grouplist of
    // the cluster that mapping names.
    centre.put(
        "seata.properties",
        "client.loadBalance.type=RoundRobinLoadBalance\nregistry.type=zk\n",
    );
    centre.put("service.vgroupMapping.my_group", "prod");
    centre.put("service.prod.grouplist", "10.0.0.1:8091");
    centre.put("client.loadBalance.type", "RandomLoadBalance");
    let loader = ConfigLoader::new()
        .text(
            "txServiceGroup=my_group\nclient.loadBalance.virtualNodes=20\n\
             client.loadBalance.type=XID\n",
            Format::Properties,
        )
        .env_vars([("MESHLINE_CLIENT__LOAD_BALANCE__VIRTUAL_NODES", "30")]);
    let live = LiveConfig::start(loader, centre.clone(), nacos_spec())
        .await
        .unwrap();
    let cfg = live.current();
    assert_eq!(cfg.service.vgroup_mapping.get("my_group").unwrap(), "prod");
    assert_eq!(cfg.grouplist("prod").unwrap(), vec!["10.0.0.1:8091"]);
    // The blob wins over the single key and over the file; the environment over all.
    let lb = cfg.part("client.loadBalance");
    assert_eq!(lb.get("type"), Some("RoundRobinLoadBalance"));
    assert_eq!(lb.get("virtualNodes"), Some("30"));
    assert_eq!(
        cfg.registry.kind, "file",
        "registry.* is read from the file only"
    );
}

#[tokio::test]
async fn first_read_failure_is_an_error_later_ones_keep_the_last() {
    let centre = Arc::new(MemoryCentre::new("nacos"));
    centre.set_failing(true);
    let err = LiveConfig::start(ConfigLoader::new(), centre.clone(), nacos_spec())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("centre down"), "{err}");

    let centre = Arc::new(MemoryCentre::new("nacos"));
    centre.put(
        "seata.properties",
        "service.vgroupMapping.default_tx_group=a",
    );
    let live = LiveConfig::start(ConfigLoader::new(), centre.clone(), nacos_spec())
        .await
        .unwrap();
    let mut rx = live.subscribe();
    centre.set_failing(true);
    centre.put(
        "seata.properties",
        "service.vgroupMapping.default_tx_group=b",
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), rx.changed())
            .await
            .is_err()
    );
    assert_eq!(
        live.current().service.vgroup_mapping["default_tx_group"],
        "a"
    );
    // Back: the retry (backoff from 200 ms) reads the new value.
    centre.set_failing(false);
    tokio::time::timeout(Duration::from_secs(3), rx.changed())
        .await
        .expect("re-read after the centre came back")
        .unwrap();
    assert_eq!(
        live.current().service.vgroup_mapping["default_tx_group"],
        "b"
    );
}

#[tokio::test]
async fn a_bad_blob_is_an_error_naming_the_centre() {
    let centre = Arc::new(MemoryCentre::new("nacos"));
    centre.put("seata.yaml", "service: [unclosed");
    let cfg = Config::from_text("config.nacos.dataId=seata.yaml", Format::Properties).unwrap();
    let spec = CentreSpec::from_config(&cfg, &["nacos"], "dataId", "seata.properties").unwrap();
    let err = LiveConfig::start(ConfigLoader::new(), centre, spec)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("nacos config centre at memory: `seata.yaml`"),
        "{err}"
    );
}

/// With a centre, the files are followed too, and an edit rebuilds
/// from every source: the centre's entries stay on top of the edited file, the
/// environment on top of both; a broken edit keeps the last configuration and says why.
#[tokio::test]
async fn files_are_followed_beside_the_centre() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("client.properties");
    std::fs::write(&path, "service.f.grouplist=10.0.0.1:1\n").unwrap();
    let centre = Arc::new(MemoryCentre::new("nacos"));
    centre.put("service.vgroupMapping.default_tx_group", "c");
    centre.put("service.c.grouplist", "10.0.0.9:1");
    let loader = ConfigLoader::new()
        .file(&path)
        .env_vars([("MESHLINE_SERVICE__e__GROUPLIST", "10.0.0.7:1")]);
    let live = LiveConfig::start(loader, centre.clone(), nacos_spec())
        .await
        .unwrap();
    let mut rx = live.subscribe();
    std::fs::write(
        &path,
        "service.f.grouplist=10.0.0.2:1\nservice.c.grouplist=1.1.1.1:1\nservice.e.grouplist=1.1.1.1:1\n",
    )
    .unwrap();
    tokio::time::timeout(Duration::from_secs(2), rx.changed())
        .await
        .expect("the edit within 2 s")
        .unwrap();
    let cfg = live.current();
    assert_eq!(cfg.grouplist("f").unwrap(), vec!["10.0.0.2:1"]);
    assert_eq!(cfg.grouplist("c").unwrap(), vec!["10.0.0.9:1"]);
    assert_eq!(cfg.grouplist("e").unwrap(), vec!["10.0.0.7:1"]);
    assert_eq!(live.problem(), None);
    let mut problems = live.subscribe_problems();
    std::fs::write(&path, "service.f.grouplist=\\u12\n").unwrap();
    tokio::time::timeout(Duration::from_secs(2), problems.changed())
        .await
        .expect("the broken edit reported within 2 s")
        .unwrap();
    let why = live.problem().unwrap();
    assert!(why.contains("client.properties"), "{why}");
    assert_eq!(live.current().grouplist("f").unwrap(), vec!["10.0.0.2:1"]);
}
