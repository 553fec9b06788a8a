//! Seata's shipped client configuration files (registry-core/tests/fixtures/seata,
//! verbatim from Seata) read by the crates that own the balancer's and the transport's
//! keys: what Seata's `LoadBalanceFactory` and its Netty client read from them
//! (`client.loadBalance.type` default `XID`, `virtualNodes` 10, the transport's
//! defaults; in HOCON a key set twice keeps the later value, so file.conf's
//! `rpcRmRequestTimeout` is 15000 ms), with no unknown key in any of them.

use std::path::PathBuf;
use std::time::Duration;

use meshline::loadbalance::LoadBalanceConfig;
use meshline::rpc::{TmConfig, TransportConfig};
use meshline::{Config, ConfigLoader};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("registry-core/tests/fixtures/seata")
        .join(name)
}

fn load(files: &[&str]) -> Config {
    let mut l = ConfigLoader::new();
    for f in files {
        l = l.file(fixture(f));
    }
    l.load().unwrap()
}

#[test]
fn every_shipped_file_gives_seatas_client_defaults() {
    for files in [
        &["registry.conf", "file.conf"][..],
        &["file.conf"],
        &["application.yml"],
        &["application.properties"],
    ] {
        let c = load(files);
        let what = files.join(" + ");
        assert!(c.warnings.is_empty(), "{what}: {:?}", c.warnings);
        let lb = LoadBalanceConfig::from_config(&c).unwrap();
        assert_eq!((lb.kind.as_str(), lb.virtual_nodes), ("XID", 10), "{what}");
        assert!(lb.warnings.is_empty(), "{what}: {:?}", lb.warnings);
        let t = TransportConfig::from_config(&c).unwrap();
        assert!(t.warnings.is_empty(), "{what}: {:?}", t.warnings);
        assert!(t.heartbeat, "{what}");
        assert_eq!(t.serialization, "seata", "{what}");
        assert_eq!(t.compressor, "none", "{what}");
        assert_eq!(
            t.rpc_tm_request_timeout,
            Duration::from_millis(30000),
            "{what}"
        );
        assert_eq!(
            t.rpc_rm_request_timeout,
            Duration::from_millis(15000),
            "{what}"
        );
        assert!(!t.enable_tm_client_batch_send_request, "{what}");
        assert!(t.rm_batch(), "{what}");
        let tm = TmConfig::from_config(&c).unwrap();
        assert!(tm.warnings.is_empty(), "{what}: {:?}", tm.warnings);
        assert_eq!(
            meshline::parts::read_all(&c).unwrap(),
            Vec::<String>::new(),
            "{what}"
        );
    }
}

#[test]
fn edited_values_are_read_by_their_owners() {
    let edited = std::fs::read_to_string(fixture("file.conf"))
        .unwrap()
        .replace("type = \"XID\"", "type = \"ConsistentHashLoadBalance\"")
        .replace("virtualNodes = 10", "virtualNodes = 20")
        .replace("rpcTmRequestTimeout = 30000", "rpcTmRequestTimeout = 5000");
    let c = Config::from_text(&edited, meshline::Format::Hocon).unwrap();
    let lb = LoadBalanceConfig::from_config(&c).unwrap();
    assert_eq!(
        (lb.kind.as_str(), lb.virtual_nodes),
        ("ConsistentHashLoadBalance", 20)
    );
    let t = TransportConfig::from_config(&c).unwrap();
    assert_eq!(t.rpc_tm_request_timeout, Duration::from_millis(5000));
}
