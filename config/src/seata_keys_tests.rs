//! Seata's key meanings: dotted group and cluster names, Seata keys meshline does not
//! use, and the units of bare numbers. (The balancer's keys, seata-go's among them, are
//! tested in the loadbalance crate; the transport and TM keys in the rpc-client.)

use super::*;
use std::time::Duration;

#[test]
fn dotted_group_and_cluster_names_in_every_shape() {
    let props = "service.vgroupMapping.order.tx.group=eu.west\n\
                 service.eu.west.grouplist=10.0.0.1:8091\n\
                 service.grouplist.us.east=10.0.0.2:8091\n";
    let yaml = "seata:\n  service:\n    vgroup-mapping:\n      order.tx.group: eu.west\n    \
                grouplist:\n      eu.west: 10.0.0.1:8091\n      us.east: 10.0.0.2:8091\n";
    let hocon = "service {\n  vgroupMapping.order.tx.group = \"eu.west\"\n  \
                 \"vgroupMapping\" { \"order.tx.group\" = \"eu.west\" }\n  \
                 eu.west.grouplist = \"10.0.0.1:8091\"\n  grouplist.us.east = \"10.0.0.2:8091\"\n}\n";
    let env = ConfigLoader::new()
        .env_vars([
            (
                "MESHLINE_SERVICE__VGROUP_MAPPING__order.tx.group",
                "eu.west",
            ),
            ("MESHLINE_SERVICE__GROUPLIST__eu__west", "10.0.0.1:8091"),
            ("MESHLINE_SERVICE__GROUPLIST__us.east", "10.0.0.2:8091"),
        ])
        .load()
        .unwrap();
    for (what, c) in [
        (
            "properties",
            Config::from_text(props, Format::Properties).unwrap(),
        ),
        ("yaml", Config::from_text(yaml, Format::Yaml).unwrap()),
        ("hocon", Config::from_text(hocon, Format::Hocon).unwrap()),
        ("env", env),
    ] {
        assert!(c.warnings.is_empty(), "{what}: {:?}", c.warnings);
        assert_eq!(
            c.service
                .vgroup_mapping
                .get("order.tx.group")
                .map(String::as_str),
            Some("eu.west"),
            "{what}: {:?}",
            c.service.vgroup_mapping
        );
        assert_eq!(
            c.grouplist("eu.west"),
            Some(vec!["10.0.0.1:8091"]),
            "{what}"
        );
        assert_eq!(
            c.grouplist("us.east"),
            Some(vec!["10.0.0.2:8091"]),
            "{what}"
        );
    }
}

#[test]
fn seata_keys_meshline_does_not_use_are_accepted_silently() {
    let p = "registry.loadBalance=RandomLoadBalance\n\
             registry.loadBalanceVirtualNodes=5\n\
             registry.sofa.addressWaitTime=3000\n\
             registry.zk.heartbeat-period=6000\n\
             client.metadataMaxAgeMs=30000\n\
             transport.minServerPoolSize=10\n\
             transport.keepAliveTime=500\n\
             transport.enableTmClientChannelCheckFailFast=true\n\
             service.disableGlobalTransaction=false\n\
             seata.expose-proxy=false\n\
             seata.excludes-for-scanning=a\n\
             config.type=file\n";
    let c = Config::from_text(p, Format::Properties).unwrap();
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    // Seata 1.4+ ignores the 1.0-1.3 names; so does meshline: nothing reaches the
    // balancer's part.
    assert!(c.part("client.loadBalance").is_empty());
    // A genuinely unknown key still warns, by name only.
    let c = Config::from_text(
        "registry.loadBalancer=s3cret-value\nclient.loadBalancr.type=x\n",
        Format::Properties,
    )
    .unwrap();
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
    assert!(
        c.warnings.iter().all(|w| !w.contains("s3cret")),
        "{:?}",
        c.warnings
    );
}

#[test]
fn seata_keys_keep_seata_units_and_meshline_keys_need_one() {
    let c = Config::from_text(
        "registry.etcd3.ttl=10\nregistry.etcd3.refresh=3s\nregistry.zk.sessionTimeout=6000\n\
         registry.zk.connectTimeout=2s\n",
        Format::Properties,
    )
    .unwrap();
    // A Seata key counts Seata's unit (milliseconds) and accepts text with a unit.
    let zk = c.registry.section(&["zk"]);
    let r = zk.reader();
    let ms = Duration::from_millis(1);
    assert_eq!(
        r.seata_duration("sessionTimeout", ms, Duration::ZERO)
            .unwrap(),
        Duration::from_millis(6000)
    );
    assert_eq!(
        r.seata_duration("connectTimeout", ms, Duration::ZERO)
            .unwrap(),
        Duration::from_secs(2)
    );
    assert_eq!(
        r.seata_duration("absent", ms, Duration::from_secs(4))
            .unwrap(),
        Duration::from_secs(4)
    );
    // A key only meshline has refuses a bare number, asking for a unit.
    let etcd = c.registry.section(&["etcd3"]);
    let r = etcd.reader();
    let e = r.duration("ttl", Duration::ZERO).unwrap_err().to_string();
    assert!(
        e.contains("registry.etcd3.ttl") && e.contains("no unit") && e.contains("10s"),
        "{e}"
    );
    assert_eq!(
        r.duration("refresh", Duration::ZERO).unwrap(),
        Duration::from_secs(3)
    );
    // Seata's unit can be other than milliseconds, and the 365-day cap holds.
    let big = Config::from_text(
        "registry.x.a=2\nregistry.x.b=40000000000\nregistry.x.c=31536000\n",
        Format::Properties,
    )
    .unwrap();
    let x = big.registry.section(&["x"]);
    let r = x.reader();
    let s = Duration::from_secs(1);
    assert_eq!(
        r.seata_duration("a", s, Duration::ZERO).unwrap(),
        Duration::from_secs(2)
    );
    assert!(r.seata_duration("b", ms, Duration::ZERO).is_err());
    assert_eq!(
        r.seata_duration("c", s, Duration::ZERO).unwrap(),
        MAX_DURATION
    );
}
