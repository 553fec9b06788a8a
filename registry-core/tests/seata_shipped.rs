//! Seata's shipped client configuration files (fixtures/seata, verbatim from Seata at
//! commit 0b9d7c9a) load with no unknown-key warning and give what Seata reads from
//! them: registry type, addresses, tx group, mappings (the balancer's and transport's
//! keys, which other crates own, in the facade's tests/seata_shipped_parts.rs).
//!
//! "What Seata reads" comes from the Java: `RegistryFactory` (`registry.type`, default
//! `file`), `FileRegistryServiceImpl` (`service.vgroupMapping.<group>`,
//! `service.<cluster>.grouplist`), `LoadBalanceFactory` / `ConsistentHashLoadBalance`
//! (`client.loadBalance.type` default `XID`, `virtualNodes` default 10), Typesafe
//! Config for HOCON (a key set twice: the later value wins, so file.conf's
//! `rpcRmRequestTimeout` is 15000 ms), and `SpringBootConfigurationProvider` for the
//! Spring files (`seata.` prefix, kebab-case).

use std::path::PathBuf;

use meshline_registry_core::config::{Config, ConfigLoader, Format};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/seata")
        .join(name)
}

/// The shipped file `name` loaded alone.
fn load(name: &str) -> Config {
    ConfigLoader::new().file(fixture(name)).load().unwrap()
}

/// The shipped Spring file `name` loaded alone: Seata's client defaults, and the
/// application id Spring names (`spring.application.name` of the samples).
fn load_spring(name: &str) -> Config {
    let c = load(name);
    assert_seata_client_defaults(&c, name);
    assert_eq!(c.application_id, "applicationName");
    c
}

fn text(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap()
}

/// What every one of the shipped files configures for the client, as Seata reads it.
fn assert_seata_client_defaults(c: &Config, what: &str) {
    assert!(c.warnings.is_empty(), "{what}: {:?}", c.warnings);
    assert_eq!(c.registry.kind, "file", "{what}");
    assert_eq!(c.tx_service_group, "default_tx_group", "{what}");
    assert_eq!(c.service.vgroup_mapping.len(), 1, "{what}");
    assert_eq!(
        c.service.vgroup_mapping["default_tx_group"], "default",
        "{what}"
    );
    assert_eq!(
        c.grouplist("default").unwrap(),
        vec!["127.0.0.1:8091"],
        "{what}"
    );
    // The balancer's and the transport's keys are kept for their owners: the facade's
    // tests/seata_shipped_parts.rs reads them as the balancer and the rpc-client do.
}

#[test]
fn registry_conf_and_file_conf() {
    let c = ConfigLoader::new()
        .file(fixture("registry.conf"))
        .file(fixture("file.conf"))
        .load()
        .unwrap();
    assert_seata_client_defaults(&c, "registry.conf + file.conf");
    // registry.conf's sections reach the backends as written.
    let nacos = c.registry.section(&["nacos"]);
    assert_eq!(nacos.get("serverAddr"), Some("127.0.0.1:8848"));
    assert_eq!(nacos.get("group"), Some("SEATA_GROUP"));
    assert_eq!(nacos.get("namespace"), Some(""));
    assert_eq!(
        c.registry
            .section(&["zookeeper", "zk"])
            .get("sessionTimeout"),
        Some("6000")
    );
    assert_eq!(c.registry.section(&["redis"]).get("timeout"), Some("0"));
    assert_eq!(
        c.registry.section(&["eureka"]).get("serviceUrl"),
        Some("http://localhost:8761/eureka")
    );
    assert_eq!(
        c.registry.section(&["etcd", "etcd3"]).get("serverAddr"),
        Some("http://localhost:2379")
    );
    assert_eq!(c.registry.section(&["file"]).get("name"), Some("file.conf"));
    assert_eq!(c.path.as_deref(), Some(fixture("file.conf").as_path()));
}

#[test]
fn each_hocon_file_alone() {
    let r = load("registry.conf");
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert_eq!(r.registry.kind, "file");
    let f = Config::from_text(&text("file.conf"), Format::Hocon).unwrap();
    assert_seata_client_defaults(&f, "file.conf");
}

#[test]
fn spring_application_yml() {
    let c = load_spring("application.yml");
    assert_eq!(
        c.registry.section(&["nacos"]).get("clientApplication"),
        Some("${spring.application.name}")
    );
    assert_eq!(
        c.registry
            .section(&["zookeeper", "zk"])
            .get("sessionTimeout"),
        Some("6000")
    );
}

#[test]
fn spring_application_properties() {
    let c = load_spring("application.properties");
    assert_eq!(
        c.registry.section(&["nacos"]).get("group"),
        Some("SEATA_GROUP")
    );
}

/// The files are read, not just defaulted: the shipped file.conf with the values
/// Seata users change gives those values.
#[test]
fn edited_file_conf_values_are_read() {
    let edited = text("file.conf")
        .replace(
            "vgroupMapping.default_tx_group = \"default\"",
            "vgroupMapping.default_tx_group = \"prod\"\n  vgroupMapping.order.service = \"prod\"",
        )
        .replace(
            "default.grouplist = \"127.0.0.1:8091\"",
            "prod.grouplist = \"10.0.0.1:8091;10.0.0.2:8091\"",
        )
        .replace("type = \"XID\"", "type = \"ConsistentHashLoadBalance\"")
        .replace("virtualNodes = 10", "virtualNodes = 20")
        .replace("rpcTmRequestTimeout = 30000", "rpcTmRequestTimeout = 5000");
    let c = Config::from_text(&edited, Format::Hocon).unwrap();
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert_eq!(c.service.vgroup_mapping["default_tx_group"], "prod");
    assert_eq!(c.service.vgroup_mapping["order.service"], "prod");
    assert_eq!(
        c.grouplist("prod").unwrap(),
        vec!["10.0.0.1:8091", "10.0.0.2:8091"]
    );
    assert_eq!(
        c.part("client.loadBalance").get("type"),
        Some("ConsistentHashLoadBalance")
    );
    assert_eq!(c.part("client.loadBalance").get("virtualNodes"), Some("20"));
    assert_eq!(c.part("transport").get("rpcTmRequestTimeout"), Some("5000"));
}
