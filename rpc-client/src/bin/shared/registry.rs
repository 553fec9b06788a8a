//! Opening the registry a `Config` names, for the `tc-server` and `tm-client` programs.
//!
//! These programs live in `meshline-rpc-client`, which cannot depend on the `meshline`
//! facade (the facade depends on it). They know the `file` registry always and `etcd3`
//! when built with `--features etcd`; other types are refused with a message saying so.

use std::sync::Arc;

use meshline_registry_core::{Config, RegistryService};
use meshline_registry_file::FileRegistry;

/// The registry `config.registry.type` names.
pub async fn open(config: &Config) -> Result<Arc<dyn RegistryService>, String> {
    match config.registry.kind.to_ascii_lowercase().as_str() {
        "file" => Ok(Arc::new(FileRegistry::from_config(config))),
        #[cfg(feature = "etcd")]
        "etcd3" | "etcd" => meshline_registry_etcd::EtcdRegistry::connect(config)
            .await
            .map(|r| Arc::new(r) as Arc<dyn RegistryService>)
            .map_err(|e| e.to_string()),
        other => Err(format!(
            "registry.type `{other}` is not compiled into this program: it knows `file`{}; \
             build meshline-rpc-client with `--features etcd` for etcd3, or use the meshline \
             facade's registries",
            if cfg!(feature = "etcd") {
                " and `etcd3`"
            } else {
                ""
            }
        )),
    }
}

/// The cluster a server registers under: Seata's per-registry cluster key
/// (`registry.etcd3.cluster`, `registry.nacos.cluster`, ...), or for the file registry
/// the cluster the tx-service-group maps to.
#[allow(dead_code)] // used by tc-server only
pub fn server_cluster(config: &Config) -> String {
    let r = &config.registry;
    match r.kind.to_ascii_lowercase().as_str() {
        "etcd3" | "etcd" => r.etcd3.cluster.clone(),
        "nacos" => r.nacos.cluster.clone(),
        "zk" | "zookeeper" => r.zk.cluster.clone(),
        "redis" => r.redis.cluster.clone(),
        "consul" => r.consul.cluster.clone(),
        "eureka" => r.eureka.application.clone(),
        _ => config
            .service
            .vgroup_mapping
            .get(&config.tx_service_group)
            .cloned()
            .unwrap_or_else(|| "default".into()),
    }
}
