#![allow(clippy::field_reassign_with_default)] // the tests state each override explicitly

use super::*;
use std::time::Duration;

/// The same settings in each shape must give the same `Config`.
fn expected() -> Config {
    let mut c = Config::default();
    c.tx_service_group = "My_Tx_Group".into();
    c.registry.kind = "etcd3".into();
    c.service
        .vgroup_mapping
        .insert("My_Tx_Group".into(), "prod".into());
    c.service
        .grouplist
        .insert("prod".into(), "10.0.0.1:8091;10.0.0.2:8091".into());
    c
}

/// The balancer and transport keys every shape sets, as the parts keep them raw for
/// their owners (the balancer's `client.loadBalance.type`, or seata-go's
/// `getty.load-balance-type`, which the balancer reads when Seata's key is absent).
fn same_parts(parts: &Section) {
    let kind = parts
        .sub("client.loadBalance")
        .get("type")
        .or(parts.sub("getty").get("loadBalanceType"))
        .map(str::to_string);
    assert_eq!(
        kind.as_deref(),
        Some("ConsistentHashLoadBalance"),
        "{parts:?}"
    );
    assert_eq!(
        parts.sub("client.loadBalance").get("virtualNodes"),
        Some("20")
    );
    assert_eq!(parts.sub("transport").get("heartbeat"), Some("false"));
}

fn same(mut got: Config) {
    assert!(
        got.warnings.is_empty(),
        "unexpected warnings: {:?}",
        got.warnings
    );
    got.path = None;
    // The backends' sections are raw text (`9s` in one shape, `9000` in another): read
    // them as the backends do (zk's `sessionTimeout` is Seata's, in milliseconds; the
    // etcd3 `ttl` is meshline's own and carries its unit).
    let sections = std::mem::take(&mut got.registry.sections);
    same_parts(&std::mem::take(&mut got.parts));
    assert_eq!(got, expected());
    let read = |name: &str| {
        sections
            .get(name)
            .unwrap_or_else(|| panic!("no {name} section"))
            .clone()
    };
    let etcd = read("etcd3");
    let r = etcd.reader();
    assert_eq!(
        r.text("serverAddr", "").unwrap(),
        "http://127.0.0.1:2379,http://127.0.0.1:2380"
    );
    assert_eq!(r.text("cluster", "").unwrap(), "prod");
    assert_eq!(
        r.duration("ttl", Duration::ZERO).unwrap(),
        Duration::from_secs(7)
    );
    assert!(r.finish().is_empty());
    let zk = read("zk");
    let r = zk.reader();
    assert_eq!(
        r.seata_duration("sessionTimeout", Duration::from_millis(1), Duration::ZERO)
            .unwrap(),
        Duration::from_millis(9000)
    );
    assert!(r.finish().is_empty());
    assert_eq!(read("nacos").get("group"), Some("SEATA_GROUP"));
    assert_eq!(read("redis").reader().number::<i64>("db", 0).unwrap(), 3);
    assert_eq!(sections.len(), 4, "{sections:?}");
}

#[test]
fn defaults_work_without_a_file() {
    let c = ConfigLoader::new().load().unwrap();
    assert_eq!(c.registry.kind, "file");
    assert_eq!(c.tx_service_group, "default_tx_group");
    assert_eq!(c.service.vgroup_mapping["default_tx_group"], "default");
    assert_eq!(c.grouplist("default").unwrap(), vec!["127.0.0.1:8091"]);
    // Each backend and each part's owner has its defaults (see its settings type);
    // none is set here.
    assert!(c.registry.sections.is_empty());
    assert!(c.parts.is_empty());
}

#[test]
fn yaml_spring_shape() {
    let y = r#"
seata:
  tx-service-group: My_Tx_Group
  registry:
    type: etcd3
    etcd3:
      server-addr: [ "http://127.0.0.1:2379", "http://127.0.0.1:2380" ]
      cluster: prod
      ttl: 7s
    zk:
      session-timeout: 9000
    nacos:
      group: SEATA_GROUP
    redis:
      db: 3
  service:
    vgroup-mapping:
      My_Tx_Group: prod
    grouplist:
      prod: "10.0.0.1:8091;10.0.0.2:8091"
  client:
    load-balance:
      type: ConsistentHashLoadBalance
      virtual-nodes: 20
  transport:
    heartbeat: false
"#;
    same(Config::from_text(y, Format::Yaml).unwrap());
}

#[test]
fn yaml_seata_go_shape() {
    // seata-go spells the balancer `getty.load-balance-type` and has sections we ignore.
    let y = r#"
seata:
  enabled: true
  application-id: meshline
  tx-service-group: My_Tx_Group
  access-key: aliyunAccessKey
  getty:
    reconnect-interval: 0
    load-balance-type: ConsistentHashLoadBalance
    session:
      compress-encoding: false
  tm:
    commit-retry-count: 5
  client:
    load-balance:
      virtual-nodes: 20
  registry:
    type: etcd3
    etcd3:
      server-addr: "http://127.0.0.1:2379,http://127.0.0.1:2380"
      cluster: prod
      ttl: 7 s
    zk:
      session-timeout: 9s
    nacos:
      group: SEATA_GROUP
    redis:
      db: 3
  service:
    vgroup-mapping:
      My_Tx_Group: prod
    grouplist:
      prod: "10.0.0.1:8091;10.0.0.2:8091"
  transport:
    heartbeat: false
    shutdown:
      wait: 3s
"#;
    same(Config::from_text(y, Format::Yaml).unwrap());
}

#[test]
fn toml_shape() {
    let t = r#"
tx-service-group = "My_Tx_Group"
[registry]
type = "etcd3"
[registry.etcd3]
server-addr = "http://127.0.0.1:2379,http://127.0.0.1:2380"
cluster = "prod"
ttl = "7s"
[registry.zk]
session-timeout = 9000
[registry.nacos]
group = "SEATA_GROUP"
[registry.redis]
db = 3
[service.vgroup-mapping]
My_Tx_Group = "prod"
[service.grouplist]
prod = "10.0.0.1:8091;10.0.0.2:8091"
[client.load-balance]
type = "ConsistentHashLoadBalance"
virtual-nodes = 20
[transport]
heartbeat = false
"#;
    same(Config::from_text(t, Format::Toml).unwrap());
}

#[test]
fn json_shape() {
    let j = r#"{
  "seata": {
    "txServiceGroup": "My_Tx_Group",
    "registry": {
      "type": "etcd3",
      "etcd3": { "serverAddr": "http://127.0.0.1:2379,http://127.0.0.1:2380", "cluster": "prod", "ttl": "7000ms" },
      "zk": { "sessionTimeout": 9000 },
      "nacos": { "group": "SEATA_GROUP" },
      "redis": { "db": 3 }
    },
    "service": {
      "vgroupMapping": { "My_Tx_Group": "prod" },
      "grouplist": { "prod": "10.0.0.1:8091;10.0.0.2:8091" }
    },
    "client": { "loadBalance": { "type": "ConsistentHashLoadBalance", "virtualNodes": 20 } },
    "transport": { "heartbeat": false }
  }
}"#;
    same(Config::from_text(j, Format::Json).unwrap());
}

#[test]
fn properties_flat_seata_keys() {
    let p = r#"
# Seata client properties
txServiceGroup=My_Tx_Group
registry.type=etcd3
registry.etcd3.serverAddr=http://127.0.0.1:2379,http://127.0.0.1:2380
registry.etcd3.cluster=prod
registry.etcd3.ttl=7000ms
registry.zk.sessionTimeout=9000
registry.nacos.group=SEATA_GROUP
registry.redis.db=3
service.vgroupMapping.My_Tx_Group=prod
service.prod.grouplist=10.0.0.1:8091;10.0.0.2:8091
service.disableGlobalTransaction=false
client.loadBalance.type=ConsistentHashLoadBalance
client.loadBalance.virtualNodes=20
client.rm.asyncCommitBufferLimit=10000
transport.heartbeat=false
transport.threadFactory.bossThreadPrefix=NettyBoss
store.mode=file
"#;
    same(Config::from_text(p, Format::Properties).unwrap());
}

#[test]
fn env_vars() {
    let vars = [
        ("MESHLINE_TX_SERVICE_GROUP", "My_Tx_Group"),
        ("MESHLINE_REGISTRY__TYPE", "etcd3"),
        (
            "MESHLINE_REGISTRY__ETCD3__SERVER_ADDR",
            "http://127.0.0.1:2379,http://127.0.0.1:2380",
        ),
        ("MESHLINE_REGISTRY__ETCD3__CLUSTER", "prod"),
        ("MESHLINE_REGISTRY__ETCD3__TTL", "7s"),
        ("MESHLINE_REGISTRY__ZK__SESSION_TIMEOUT", "9000"),
        ("MESHLINE_REGISTRY__NACOS__GROUP", "SEATA_GROUP"),
        ("MESHLINE_REGISTRY__REDIS__DB", "3"),
        ("MESHLINE_SERVICE__VGROUP_MAPPING__My_Tx_Group", "prod"),
        (
            "MESHLINE_SERVICE__GROUPLIST__prod",
            "10.0.0.1:8091;10.0.0.2:8091",
        ),
        (
            "MESHLINE_CLIENT__LOAD_BALANCE__TYPE",
            "ConsistentHashLoadBalance",
        ),
        ("MESHLINE_CLIENT__LOAD_BALANCE__VIRTUAL_NODES", "20"),
        ("MESHLINE_TRANSPORT__HEARTBEAT", "false"),
        ("MESHLINE_CONFIG", "/not/a/key.yaml"),
        ("PATH", "/usr/bin"),
    ];
    same(ConfigLoader::new().env_vars(vars).load().unwrap());
}

#[test]
fn env_overrides_file_and_set_overrides_env() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("m.yaml");
    std::fs::write(
        &f,
        "registry:\n  type: zk\n  zk:\n    server-addr: 1.1.1.1:2181\n",
    )
    .unwrap();
    let c = ConfigLoader::new()
        .file(&f)
        .env_vars([("MESHLINE_REGISTRY__TYPE", "redis")])
        .load()
        .unwrap();
    assert_eq!(c.registry.kind, "redis");
    assert_eq!(
        c.registry.section(&["zookeeper", "zk"]).get("serverAddr"),
        Some("1.1.1.1:2181")
    );
    assert_eq!(c.path.as_deref(), Some(f.as_path()));
    let c = ConfigLoader::new()
        .file(&f)
        .env_vars([("MESHLINE_REGISTRY__TYPE", "redis")])
        .set("registry.type", "nacos")
        .load()
        .unwrap();
    assert_eq!(c.registry.kind, "nacos");
}

/// Asserts that one of `warnings` names `key` and asks "did you mean `suggestion`".
fn assert_suggests(warnings: &[String], key: &str, suggestion: &str) {
    let asks = format!("did you mean `{suggestion}`");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(key) && w.contains(&asks)),
        "{warnings:?}"
    );
}

#[test]
fn unknown_keys_warn() {
    let c = Config::from_text(
        "registry.tpye=zk\nregistry.etcd3.serverAdr=x\nfoo=bar\nregistry.type=zk\n\
         trasnport.heartbeat=false\nclient.loadBalanse.type=x\ntransport.heartbeet=x\n",
        Format::Properties,
    )
    .unwrap();
    assert_eq!(c.registry.kind, "zk");
    // `registry.etcd3.serverAdr` is the etcd3 backend's to report (its settings
    // test), since only it knows its keys; `transport.heartbeet` is the rpc-client's.
    assert_eq!(c.warnings.len(), 4, "{:?}", c.warnings);
    assert_suggests(&c.warnings, "registry.tpye", "registry.type");
    // A misspelt root or client namespace is this crate's to report.
    assert_suggests(&c.warnings, "`trasnport.heartbeat`", "transport.heartbeat");
    assert_suggests(
        &c.warnings,
        "`client.loadBalanse.type`",
        "client.loadBalance.type",
    );
    assert_eq!(c.part("transport").get("heartbeet"), Some("x"));
    let etcd = c.registry.section(&["etcd3"]);
    let unknown = etcd.reader().finish();
    assert_eq!(unknown.len(), 1);
    assert!(
        unknown[0].contains("registry.etcd3.serverAdr"),
        "{unknown:?}"
    );
    assert!(
        !unknown[0].contains("`x`"),
        "the value is never shown: {unknown:?}"
    );
}

#[test]
fn bad_values_are_errors_not_panics() {
    for (text, fmt, needle) in [
        ("registry.type=", Format::Properties, "registry.type"),
        (
            "registry.emptyProtection=maybe",
            Format::Properties,
            "registry.emptyProtection",
        ),
        ("registry: [unclosed", Format::Yaml, "Yaml"),
        ("registry = {", Format::Toml, "Toml"),
        ("{\"registry\": ", Format::Json, "Json"),
    ] {
        let err = Config::from_text(text, fmt).expect_err(text).to_string();
        assert!(err.contains(needle), "{text:?}: {err}");
    }
}

#[test]
fn a_section_value_that_is_wrong_names_key_origin_and_value() {
    let c = Config::from_text(
        "registry:\n  etcd3:\n    ttl: abc\n  redis:\n    db: lots\n  nacos:\n    grpcPort: 70000\n",
        Format::Yaml,
    )
    .unwrap();
    let etcd = c.registry.section(&["etcd", "etcd3"]);
    let e = etcd
        .reader()
        .duration("ttl", Duration::ZERO)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("registry.etcd3.ttl") && e.contains("`abc`"),
        "{e}"
    );
    assert!(e.contains("config text"), "{e}");
    let redis = c.registry.section(&["redis"]);
    let e = redis
        .reader()
        .number::<i64>("db", 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("registry.redis.db"), "{e}");
    let nacos = c.registry.section(&["nacos"]);
    let e = nacos
        .reader()
        .optional_number::<u16>("grpcPort")
        .unwrap_err()
        .to_string();
    assert!(e.contains("grpcPort"), "{e}");
}

#[test]
fn aliases_merge_and_the_canonical_name_wins() {
    let c = Config::from_text(
        "registry.etcd.ttl=1s\nregistry.etcd3.ttl=2s\nregistry.etcd.cluster=x\n",
        Format::Properties,
    )
    .unwrap();
    let s = c.registry.section(&["etcd", "etcd3"]);
    assert_eq!(s.get("ttl"), Some("2s"));
    assert_eq!(s.get("CLUSTER"), Some("x"));
    assert!(format!("{s:?}").contains("registry.etcd3.ttl"));
    let mut c = c;
    c.registry
        .section_mut("etcd3")
        .set("server-addr", "http://h:1");
    assert_eq!(
        c.registry.section(&["etcd3"]).get("serverAddr"),
        Some("http://h:1")
    );
}

#[test]
fn bad_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.yaml");
    let e = Config::load(Some(&missing)).unwrap_err().to_string();
    assert!(e.contains("nope.yaml"), "{e}");
    let hocon = dir.path().join("registry.conf");
    std::fs::write(&hocon, "registry { type = \"file\"").unwrap();
    let e = Config::load(Some(&hocon)).unwrap_err().to_string();
    assert!(e.contains("registry.conf") && e.contains("HOCON"), "{e}");
    let weird = dir.path().join("x.ini");
    std::fs::write(&weird, "").unwrap();
    assert!(Config::load(Some(&weird)).is_err());
}

#[test]
fn grouplist_splitting() {
    assert_eq!(
        split_grouplist(" a:1 ; b:2;;c:3 ,d:4"),
        vec!["a:1", "b:2", "c:3", "d:4"]
    );
    assert!(split_grouplist("").is_empty());
}

#[test]
fn empty_text_is_defaults() {
    let c = Config::from_text("", Format::Yaml).unwrap();
    assert_eq!(c, Config::default());
}

proptest::proptest! {
    #[test]
    fn random_properties_never_panic(s in "\\PC{0,200}") {
        let _ = Config::from_text(&s, Format::Properties);
        let _ = Config::from_text(&s, Format::Yaml);
        let _ = Config::from_text(&s, Format::Toml);
        let _ = Config::from_text(&s, Format::Json);
    }
}

/// The keys of the parts other crates own are kept raw, from files and the environment
/// alike, whatever their shape; their owners read and validate them.
#[test]
fn parts_are_kept_raw_for_their_owners() {
    let c = Config::from_text(
        "transport.maxFrameLength=1MiB\ntransport.writeTimeout=3s\n\
         client.tm.commitRetryCount=2\nclient.metadataMaxAgeMs=5000\n\
         getty.load-balance-type=RandomLoadBalance\n",
        Format::Properties,
    )
    .unwrap();
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let t = c.part("transport");
    assert_eq!(t.get("max-frame-length"), Some("1MiB"));
    assert_eq!(t.get("writeTimeout"), Some("3s"));
    assert_eq!(c.part("client.tm").get("commitRetryCount"), Some("2"));
    assert_eq!(c.part("client").get("metadataMaxAgeMs"), Some("5000"));
    assert_eq!(
        c.part("getty").get("loadBalanceType"),
        Some("RandomLoadBalance")
    );
    // A value the owner would refuse is not this crate's to judge.
    let bad = Config::from_text("transport.maxFrameLength=0\n", Format::Properties).unwrap();
    assert_eq!(bad.part("transport").get("maxFrameLength"), Some("0"));
    // The environment wins, and a key set in code lands in the same place.
    let mut e = ConfigLoader::new()
        .text("transport.writeTimeout=3s\n", Format::Properties)
        .env_vars([("MESHLINE_TRANSPORT__WRITE_TIMEOUT", "4s")])
        .load()
        .unwrap();
    assert_eq!(e.part("transport").get("writeTimeout"), Some("4s"));
    e.set("transport.write-timeout", "5s").unwrap();
    assert_eq!(e.part("transport").get("writeTimeout"), Some("5s"));
    // Shown as written, with the origin, in a reader's messages.
    let bare = Config::from_text("transport.writeTimeout=10\n", Format::Properties).unwrap();
    let err = bare
        .part("transport")
        .reader()
        .duration("writeTimeout", Duration::ZERO)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("config text: key `transport.writeTimeout` has invalid value `10`"),
        "{err}"
    );
}

#[test]
fn application_roots_are_kept_raw_and_declared_ones_not_reported() {
    let yaml = "gateway:\n  listen: 0.0.0.0:7000\n  modules:\n    chat:\n      cluster: chat-svc\n      choice: round-robin\n";
    let c = ConfigLoader::new()
        .text(yaml, Format::Yaml)
        .part_root("gateway")
        .load()
        .unwrap();
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let g = c.part("gateway");
    assert_eq!(g.get("listen"), Some("0.0.0.0:7000"));
    assert_eq!(g.get("modules.chat.cluster"), Some("chat-svc"));
    assert_eq!(g.sub("modules.chat").get("choice"), Some("round-robin"));
    let p = ConfigLoader::new()
        .text("gateway.auth-deadline=5s\n", Format::Properties)
        .part_root("Gateway")
        .load()
        .unwrap();
    assert_eq!(p.part("gateway").get("authDeadline"), Some("5s"));
    let e = ConfigLoader::new()
        .text("gateway.listen=a:1\n", Format::Properties)
        .env_vars([("MESHLINE_GATEWAY__LISTEN", "b:2")])
        .part_root("gateway")
        .load()
        .unwrap();
    assert_eq!(
        e.part("gateway").get("listen"),
        Some("b:2"),
        "env overrides the file"
    );
    // Not declared: still kept (a program reading it finds it), and reported by name.
    let u = Config::from_text("gateway.listen=a:1\n", Format::Properties).unwrap();
    assert_eq!(u.part("gateway").get("listen"), Some("a:1"));
    assert_eq!(u.warnings.len(), 1, "{:?}", u.warnings);
    assert!(
        u.warnings[0].contains("unknown config key `gateway.listen`"),
        "{:?}",
        u.warnings
    );
}

/// `read_now` parses each file once: loading the loader again (what a configuration
/// centre does on every change) reads no file, so a file removed since still counts.
#[test]
fn read_now_reads_each_file_once() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("seata.properties");
    std::fs::write(&f, "service.vgroupMapping.g=prod\n").unwrap();
    let loader = ConfigLoader::new().file(&f).read_now().unwrap();
    std::fs::remove_file(&f).unwrap();
    let c = loader.clone().load().unwrap();
    assert_eq!(c.service.vgroup_mapping["g"], "prod");
    assert_eq!(c.path.as_deref(), Some(f.as_path()));
    assert_eq!(loader.load().unwrap(), c);
    // An unreadable file is an error at read_now, naming it.
    let err = ConfigLoader::new()
        .file(&f)
        .read_now()
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("cannot read config file"), "{err}");
}
