//! Seata's key meanings: dotted group and cluster names, Seata keys meshline does not
//! use, seata-go's balancer key, and the units of bare numbers.

use super::*;

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
    // Seata 1.4+ ignores the 1.0-1.3 names; so does meshline.
    assert_eq!(c.client.load_balance.kind, "XID");
    assert_eq!(c.client.load_balance.virtual_nodes, 10);
    // A genuinely unknown key still warns, by name only.
    let c = Config::from_text(
        "registry.loadBalancer=s3cret-value\nclient.loadBalance.typo=x\n",
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
fn client_load_balance_type_wins_over_seata_go_getty_key() {
    // seata-go alone: its key is honoured.
    let go = "seata:\n  getty:\n    load-balance-type: RoundRobinLoadBalance\n";
    let c = Config::from_text(go, Format::Yaml).unwrap();
    assert_eq!(c.client.load_balance.kind, "RoundRobinLoadBalance");
    // Both in one file: Seata's key wins.
    let both = "seata:\n  getty:\n    load-balance-type: RoundRobinLoadBalance\n  \
                client:\n    load-balance:\n      type: ConsistentHashLoadBalance\n";
    let c = Config::from_text(both, Format::Yaml).unwrap();
    assert_eq!(c.client.load_balance.kind, "ConsistentHashLoadBalance");
    // In separate sources, in either order: Seata's key wins.
    for (first, second) in [
        ("client.loadBalance.type", "getty.load-balance-type"),
        ("getty.load-balance-type", "client.loadBalance.type"),
    ] {
        let value = |k: &str| {
            if k.starts_with("client") {
                "LeastActiveLoadBalance"
            } else {
                "RandomLoadBalance"
            }
        };
        let c = ConfigLoader::new()
            .set(first, value(first))
            .set(second, value(second))
            .load()
            .unwrap();
        assert_eq!(
            c.client.load_balance.kind, "LeastActiveLoadBalance",
            "{first} then {second}"
        );
    }
}

#[test]
fn seata_keys_keep_seata_units_and_meshline_keys_need_one() {
    let c = Config::from_text(
        "registry.etcd3.ttl=10\nregistry.etcd3.refresh=3s\nregistry.zk.sessionTimeout=6000\n\
         registry.zk.connectTimeout=2s\ntransport.rpcTmRequestTimeout=5000\n",
        Format::Properties,
    )
    .unwrap();
    // A Seata key counts Seata's unit (milliseconds) and accepts text with a unit.
    assert_eq!(
        c.transport.rpc_tm_request_timeout,
        Duration::from_millis(5000)
    );
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

/// `transport.compressor` and `transport.serialization` take Seata's values; anything
/// meshline cannot speak fails the load naming the key, instead of a TC refusing
/// frames later.
#[test]
fn codec_and_compressor_values_are_checked_at_load() {
    let c = Config::from_text(
        "transport.compressor=ZSTD\ntransport.serialization=seata,protobuf\n",
        Format::Properties,
    )
    .unwrap();
    assert_eq!(c.transport.compressor, "ZSTD");
    assert_eq!(c.transport.serialization, "seata,protobuf");
    for (text, want) in [
        (
            "transport.compressor=7z",
            "key `transport.compressor` has invalid value `7z`: 7z is not supported: Seata removed it in 1.8.0",
        ),
        (
            "transport.compressor=snappy",
            "key `transport.compressor` has invalid value `snappy`: expected none, gzip, zip, bzip2, lz4, deflater or zstd",
        ),
        (
            "transport.serialization=kryo",
            "key `transport.serialization` has invalid value `kryo`: meshline speaks only the seata codec, not `kryo`",
        ),
        (
            "transport.serialization=protobuf,seata",
            "meshline speaks only the seata codec, not `protobuf`",
        ),
    ] {
        let err = Config::from_text(text, Format::Properties)
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{text}: {err}");
    }
}

/// The TM's retry keys and the batching keys, with Seata's defaults and fallbacks.
#[test]
fn tm_retry_and_batching_keys() {
    let d = Config::default();
    assert_eq!(d.client.tm.commit_retry_count, 5);
    assert_eq!(d.client.tm.rollback_retry_count, 5);
    assert_eq!(
        d.client.tm.default_global_transaction_timeout,
        std::time::Duration::from_secs(60)
    );
    assert!(d.transport.rm_batch());
    assert!(!d.transport.enable_tm_client_batch_send_request);
    assert!(d.transport.max_merge_send_mills.is_zero());
    let c = Config::from_text(
        "client.tm.commitRetryCount=2\nclient.tm.rollbackRetryCount=0\n\
         client.tm.defaultGlobalTransactionTimeout=3000\nclient.tm.degradeCheck=true\n\
         transport.enableClientBatchSendRequest=false\ntransport.maxMergeSendMills=2\n",
        Format::Properties,
    )
    .unwrap();
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert_eq!(c.client.tm.commit_retry_count, 2);
    assert_eq!(
        c.client.tm.rollback_retry_count, 5,
        "0 or less means 5, as in Java"
    );
    assert_eq!(
        c.client.tm.default_global_transaction_timeout,
        std::time::Duration::from_secs(3)
    );
    assert!(
        !c.transport.rm_batch(),
        "the RM falls back to the older key"
    );
    assert_eq!(
        c.transport.max_merge_send_mills,
        std::time::Duration::from_millis(2),
        "a bare number is milliseconds"
    );
    let c = Config::from_text(
        "transport.enableClientBatchSendRequest=false\ntransport.enableRmClientBatchSendRequest=true\n",
        Format::Properties,
    )
    .unwrap();
    assert!(c.transport.rm_batch(), "the RM's own key wins");
}
