//! The cluster a TC registers under, as Seata's TC reads it per registry type.

use meshline::Config;

/// The cluster a server registers under: Seata's per-registry cluster key
/// (`registry.etcd3.cluster`, `registry.nacos.cluster`, ..., Eureka's
/// `registry.eureka.application`), or, for the file registry and unknown types, the
/// cluster the tx-service-group maps to (`default` when it is not mapped).
///
/// Clients find servers through `vgroupMapping` -> cluster, so a server must register
/// under the cluster its clients' group maps to; each registry type keeps that name
/// under its own key, as Seata's TC reads it.
pub fn server_cluster(config: &Config) -> String {
    let r = &config.registry;
    let ty = meshline::registry::resolve_type(&r.kind).ok();
    match ty.and_then(|t| Some((t, t.cluster_key?))) {
        Some((t, key)) => r
            .section(&t.section_names())
            .get(key)
            .filter(|c| !c.is_empty())
            .unwrap_or("default")
            .to_string(),
        None => config
            .service
            .vgroup_mapping
            .get(&config.tx_service_group)
            .cloned()
            .unwrap_or_else(|| "default".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        meshline::ConfigLoader::new()
            .text(text, meshline::Format::Properties)
            .load()
            .unwrap()
    }

    #[test]
    fn file_registry_servers_register_under_the_mapped_cluster() {
        let c = config("service.vgroupMapping.default_tx_group=tc_cluster\n");
        assert_eq!(server_cluster(&c), "tc_cluster");
        assert_eq!(server_cluster(&config("")), "default");
    }

    #[test]
    fn network_registries_use_their_own_cluster_key_aliases_included() {
        let c = config(
            "registry.type=ETCD\nregistry.etcd3.cluster=from_etcd\n\
             service.vgroupMapping.default_tx_group=mapped\n",
        );
        assert_eq!(server_cluster(&c), "from_etcd");
        let c = config("registry.type=zookeeper\nregistry.zk.cluster=from_zk\n");
        assert_eq!(server_cluster(&c), "from_zk");
    }
}
