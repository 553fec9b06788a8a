//! Building the registry a [`Config`] names.
//!
//! `registry.type` is matched case-insensitively against Seata's names (`file`,
//! `nacos`, `etcd3`, `zk`, `redis`, `consul`, `eureka`) and the aliases `etcd` and
//! `zookeeper`. A known type whose backend is not compiled into this build is an error
//! naming the cargo feature to enable; an unknown type lists the known ones.

use std::sync::Arc;

use crate::{Config, Discovery, RegistryError, RegistryService};

/// A registry type meshline knows, whether or not it is compiled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistryType {
    /// Seata's name for it (`etcd3`, `zk`, ...).
    pub seata_name: &'static str,
    /// Other accepted spellings.
    pub aliases: &'static [&'static str],
    /// The `meshline` cargo feature that compiles it in.
    pub feature: &'static str,
}

/// Every registry type, in Seata's order.
pub const REGISTRY_TYPES: &[RegistryType] = &[
    RegistryType {
        seata_name: "file",
        aliases: &[],
        feature: "file",
    },
    RegistryType {
        seata_name: "nacos",
        aliases: &[],
        feature: "nacos",
    },
    RegistryType {
        seata_name: "etcd3",
        aliases: &["etcd"],
        feature: "etcd",
    },
    RegistryType {
        seata_name: "zk",
        aliases: &["zookeeper"],
        feature: "zookeeper",
    },
    RegistryType {
        seata_name: "redis",
        aliases: &[],
        feature: "redis",
    },
    RegistryType {
        seata_name: "consul",
        aliases: &[],
        feature: "consul",
    },
    RegistryType {
        seata_name: "eureka",
        aliases: &[],
        feature: "eureka",
    },
];

/// Resolves a `registry.type` value (any case, aliases allowed) to its [`RegistryType`].
pub fn resolve_type(name: &str) -> Result<&'static RegistryType, RegistryError> {
    let n = name.trim().to_ascii_lowercase();
    REGISTRY_TYPES
        .iter()
        .find(|t| t.seata_name == n || t.aliases.contains(&n.as_str()))
        .ok_or_else(|| RegistryError::UnknownType {
            given: name.to_string(),
            known: REGISTRY_TYPES
                .iter()
                .flat_map(|t| std::iter::once(t.seata_name).chain(t.aliases.iter().copied()))
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// True when the backend for `ty` is compiled into this build.
pub fn is_compiled_in(ty: &RegistryType) -> bool {
    match ty.feature {
        // One arm per backend feature; each backend issue adds its own.
        "file" => cfg!(feature = "file"),
        "nacos" => cfg!(feature = "nacos"),
        "etcd" => cfg!(feature = "etcd"),
        "zookeeper" => cfg!(feature = "zookeeper"),
        "redis" => cfg!(feature = "redis"),
        "consul" => cfg!(feature = "consul"),
        "eureka" => cfg!(feature = "eureka"),
        _ => false,
    }
}

/// Builds the registry `config` names and, for most network registries, checks that
/// its server answers.
///
/// What each backend checks here, and so where an unreachable server is reported:
///
/// | `registry.type` | checked by `from_config` | an unreachable server fails |
/// |---|---|---|
/// | `file` | nothing to connect to | (never) |
/// | `nacos` | nacos-sdk connects | `from_config`, within 10 s |
/// | `etcd3` | nothing: connecting is lazy (with credentials, it authenticates) | the first operation (`lookup`, `watch`, `register`), within its operation timeout (TTL / 2, 1 to 5 s) |
/// | `zk` | a session is established | `from_config`, within session + connect timeout |
/// | `redis` | `PING` | `from_config`, within `registry.redis.timeout` per server |
/// | `consul` | `GET /v1/status/leader` | `from_config`, within 5 s |
/// | `eureka` | `GET {serviceUrl}/apps` | `from_config`, within 5 s per URL |
///
/// Either way the error names the server address and the cause (`... at
/// 127.0.0.1:2181: connect: ... Connection refused`). A registry built while its server
/// was reachable reconnects on its own afterwards.
pub async fn from_config(config: &Config) -> Result<Arc<dyn RegistryService>, RegistryError> {
    let ty = resolve_type(&config.registry.kind)?;
    if !is_compiled_in(ty) {
        return Err(RegistryError::FeatureNotEnabled {
            kind: config.registry.kind.clone(),
            feature: ty.feature,
        });
    }
    // One arm per backend, behind its feature (see `is_compiled_in`).
    match ty.seata_name {
        #[cfg(feature = "file")]
        "file" => Ok(Arc::new(meshline_registry_file::FileRegistry::from_config(
            config,
        ))),
        #[cfg(feature = "nacos")]
        "nacos" => Ok(Arc::new(
            meshline_registry_nacos::NacosRegistry::connect(config).await?,
        )),
        #[cfg(feature = "etcd")]
        "etcd3" => Ok(Arc::new(
            meshline_registry_etcd::EtcdRegistry::connect(config).await?,
        )),
        #[cfg(feature = "zookeeper")]
        "zk" => Ok(Arc::new(
            meshline_registry_others::ZookeeperRegistry::connect(config).await?,
        )),
        #[cfg(feature = "redis")]
        "redis" => Ok(Arc::new(
            meshline_registry_others::RedisRegistry::connect(config).await?,
        )),
        #[cfg(feature = "consul")]
        "consul" => Ok(Arc::new(
            meshline_registry_others::ConsulRegistry::connect(config).await?,
        )),
        #[cfg(feature = "eureka")]
        "eureka" => Ok(Arc::new(
            meshline_registry_others::EurekaRegistry::connect(config).await?,
        )),
        other => Err(RegistryError::FeatureNotEnabled {
            kind: other.to_string(),
            feature: ty.feature,
        }),
    }
}

/// [`from_config`] wrapped in a [`Discovery`] with the config's `vgroupMapping`.
pub async fn discovery_from_config(config: &Config) -> Result<Discovery, RegistryError> {
    Ok(Discovery::from_config(from_config(config).await?, config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_case_insensitively_with_aliases() {
        assert_eq!(resolve_type("ETCD3").unwrap().seata_name, "etcd3");
        assert_eq!(resolve_type("etcd").unwrap().seata_name, "etcd3");
        assert_eq!(resolve_type("ZooKeeper").unwrap().seata_name, "zk");
        assert_eq!(resolve_type("Zk").unwrap().seata_name, "zk");
        assert_eq!(resolve_type(" Nacos ").unwrap().seata_name, "nacos");
        let err = resolve_type("raft").unwrap_err().to_string();
        assert!(err.contains("unknown registry type `raft`"), "{err}");
        assert!(
            err.contains("file, nacos, etcd3, etcd, zk, zookeeper, redis, consul, eureka"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_type_not_compiled_in_names_its_feature() {
        for ty in REGISTRY_TYPES.iter().filter(|t| !is_compiled_in(t)) {
            let mut c = Config::default();
            c.registry.kind = ty.seata_name.to_uppercase();
            let err = from_config(&c).await.err().expect("must fail").to_string();
            assert!(
                err.contains(&format!("cargo feature `{}`", ty.feature)),
                "{err}"
            );
        }
    }

    #[cfg(feature = "file")]
    #[tokio::test]
    async fn default_config_gives_the_file_registry() {
        let c = Config::default();
        let d = discovery_from_config(&c).await.unwrap();
        assert_eq!(d.registry().kind(), "file");
        let list = d.lookup("default_tx_group").await.unwrap();
        assert_eq!(list[0].to_string(), "127.0.0.1:8091");
    }
}
