//! Building the registry a [`Config`] names: one table of registry types.
//!
//! Every registry type is one [`RegistryType`] entry in [`REGISTRY_TYPES`]: Seata's
//! name and the aliases, the cargo feature that compiles it in, the keys the CLI's
//! `--server` and `--ttl` set, and the constructor (absent when the feature is off).
//! [`resolve_type`], [`is_compiled_in`], [`from_config`] and the "not compiled in"
//! message all read that table; adding a backend adds one entry.
//!
//! `registry.type` is matched case-insensitively against Seata's names (`file`,
//! `nacos`, `etcd3`, `zk`, `redis`, `consul`, `eureka`) and the aliases `etcd` and
//! `zookeeper`. A known type whose backend is not compiled into this build is an error
//! naming the cargo feature to enable; an unknown type lists the known ones.
//!
//! # Your own registry: `registry.type=custom`
//!
//! Seata loads a `custom` registry through its SPI, by `registry.custom.name`. Here a
//! program adds a constructor under a name at run time with [`register_custom`]; then
//! `registry.type=custom` with `registry.custom.name=<name>` (or `registry.type=<name>`)
//! builds it. The constructor gets the whole [`Config`] and reads its own section with
//! `config.registry.section(&["<name>"])`.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use meshline_registry_core::centre::ConfigCentre;

use crate::{Config, Discovery, RegistryError, RegistryService};

/// What a constructor returns: the registry, built and (for most types) connected.
pub type RegistryFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Arc<dyn RegistryService>, RegistryError>> + Send + 'a>>;

/// A constructor in the table: builds a registry from the whole configuration.
pub type Connect = for<'a> fn(&'a Config) -> RegistryFuture<'a>;

/// A registry type meshline knows, whether or not it is compiled in.
#[derive(Debug, Clone, Copy)]
pub struct RegistryType {
    /// Seata's name for it (`etcd3`, `zk`, ...), also its config section's name.
    pub seata_name: &'static str,
    /// Other accepted spellings (also accepted as section names).
    pub aliases: &'static [&'static str],
    /// The `meshline` cargo feature that compiles it in.
    pub feature: &'static str,
    /// The key of its section that names the server(s): what `--server` sets.
    pub address_key: &'static str,
    /// The key of its section for the registration TTL, if it has one: what `--ttl`
    /// sets.
    pub ttl_key: Option<&'static str>,
    /// The key of its section naming the cluster a server registers in (Seata's TC
    /// reads `registry.<type>.cluster`; Eureka's `application`); default `default`.
    pub cluster_key: Option<&'static str>,
    /// The `meshline` cargo feature giving it TLS (`registry.<type>.tls.*`, what the
    /// CLI's `--tls-ca`, `--tls-cert` and `--tls-key` set); `None`: no server to
    /// secure (`file`).
    pub tls_feature: Option<&'static str>,
    /// Whether a registration can carry a weight (etcd3, zk and redis keep `ip:port`
    /// only, in Seata's layouts).
    pub stores_weight: bool,
    /// Whether the registry maps a tx group to its cluster itself (Seata's namingserver:
    /// lookups by vGroup), so no `service.vgroupMapping` is needed; the same answer as
    /// its [`RegistryService::resolves_groups`], known without connecting.
    pub resolves_groups: bool,
    /// True when it cannot take registrations (a raft cluster's members register
    /// themselves through the TCs' own raft; Seata's file registry registers nothing).
    pub read_only: bool,
    /// The crate that implements it (`meshline-registry-others`...).
    pub crate_name: &'static str,
    /// Its configuration centre, when Seata's `config.type` can name this type too.
    pub centre: Option<CentreType>,
    /// The constructor; `None` when the feature is not compiled in.
    pub connect: Option<Connect>,
}

/// The configuration centre of a [`RegistryType`]: where Seata keeps its one blob of
/// keys (see [`meshline_registry_core::centre`]), and the centre's constructor.
#[derive(Debug, Clone, Copy)]
pub struct CentreType {
    /// The key of `config.<type>.*` naming the blob (`dataId`, `key`, `nodePath`).
    pub blob_key: &'static str,
    /// The blob's name when that key is unset (Seata's default).
    pub default_blob: &'static str,
    /// The constructor; `None` when the feature is not compiled in.
    pub connect: Option<ConnectCentre>,
}

/// What a centre constructor returns.
pub type CentreFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Arc<dyn ConfigCentre>, RegistryError>> + Send + 'a>>;

/// A centre constructor: connects to the centre `config.<type>.*` names.
pub type ConnectCentre = for<'a> fn(&'a Config) -> CentreFuture<'a>;

impl RegistryType {
    /// Its section's names, aliases first and Seata's name last (so Seata's spelling
    /// wins when both are given): the argument to
    /// [`RegistryConfig::section`](crate::core::config::RegistryConfig::section).
    pub fn section_names(&self) -> Vec<&'static str> {
        self.aliases
            .iter()
            .copied()
            .chain(std::iter::once(self.seata_name))
            .collect()
    }
}

/// Wraps a backend's `async fn connect(&Config) -> Result<B, RegistryError>` as a
/// table constructor, or `None` when its feature is off.
macro_rules! connect {
    ($feature:literal, $build:expr) => {{
        #[cfg(feature = $feature)]
        let c: Option<Connect> = Some(|config| {
            Box::pin(async move {
                let registry = $build(config).await?;
                Ok(Arc::new(registry) as Arc<dyn RegistryService>)
            })
        });
        #[cfg(not(feature = $feature))]
        let c: Option<Connect> = None;
        c
    }};
}

/// A [`CentreType`] whose constructor is `$build` when `$feature` is on.
macro_rules! centre {
    ($feature:literal, $blob_key:literal, $default_blob:literal, $build:expr) => {{
        #[cfg(feature = $feature)]
        let c: Option<ConnectCentre> = Some(|config| {
            Box::pin(async move {
                let centre = $build(config).await?;
                Ok(Arc::new(centre) as Arc<dyn ConfigCentre>)
            })
        });
        #[cfg(not(feature = $feature))]
        let c: Option<ConnectCentre> = None;
        Some(CentreType {
            blob_key: $blob_key,
            default_blob: $default_blob,
            connect: c,
        })
    }};
}

/// Every built-in registry type, in Seata's order: the one description of each
/// backend. Everything that lists backends is derived from it: [`resolve_type`] and
/// the "not compiled in" errors, the configuration centres
/// ([`crate::centre::resolve_centre`]), the CLI's help and `meshline types`, the
/// doctor's centres, the test script's refusal checks, and the tests that hold the
/// README's table and the cargo features to it.
pub static REGISTRY_TYPES: &[RegistryType] = &[
    RegistryType {
        seata_name: "file",
        aliases: &[],
        feature: "file",
        address_key: "",
        ttl_key: None,
        cluster_key: None,
        tls_feature: None,
        stores_weight: false,
        resolves_groups: false,
        read_only: true,
        crate_name: "meshline-registry-file",
        centre: None,
        connect: connect!("file", |c| async move {
            meshline_registry_file::FileRegistry::from_config(c)
        }),
    },
    RegistryType {
        seata_name: "nacos",
        aliases: &[],
        feature: "nacos",
        address_key: "serverAddr",
        ttl_key: None,
        cluster_key: Some("cluster"),
        tls_feature: Some("nacos-tls"),
        stores_weight: true,
        resolves_groups: false,
        read_only: false,
        crate_name: "meshline-registry-nacos",
        centre: centre!(
            "nacos",
            "dataId",
            "seata.properties",
            meshline_registry_nacos::NacosCentre::connect
        ),
        connect: connect!("nacos", meshline_registry_nacos::NacosRegistry::connect),
    },
    RegistryType {
        seata_name: "etcd3",
        aliases: &["etcd"],
        feature: "etcd",
        address_key: "serverAddr",
        ttl_key: Some("ttl"),
        cluster_key: Some("cluster"),
        tls_feature: Some("etcd-tls"),
        stores_weight: false,
        resolves_groups: false,
        read_only: false,
        crate_name: "meshline-registry-etcd",
        centre: centre!(
            "etcd",
            "key",
            "seata.properties",
            meshline_registry_etcd::EtcdCentre::connect
        ),
        connect: connect!("etcd", meshline_registry_etcd::EtcdRegistry::connect),
    },
    RegistryType {
        seata_name: "zk",
        aliases: &["zookeeper"],
        feature: "zookeeper",
        address_key: "serverAddr",
        // Ephemeral nodes live as long as the session: its timeout is their TTL.
        ttl_key: Some("sessionTimeout"),
        cluster_key: Some("cluster"),
        tls_feature: Some("zookeeper-tls"),
        stores_weight: false,
        resolves_groups: false,
        read_only: false,
        crate_name: "meshline-registry-others",
        centre: centre!(
            "zookeeper",
            "nodePath",
            "/seata/seata.properties",
            meshline_registry_others::zookeeper::ZkCentre::connect
        ),
        connect: connect!(
            "zookeeper",
            meshline_registry_others::ZookeeperRegistry::connect
        ),
    },
    RegistryType {
        seata_name: "redis",
        aliases: &[],
        feature: "redis",
        address_key: "serverAddr",
        ttl_key: Some("ttl"),
        cluster_key: Some("cluster"),
        tls_feature: Some("redis-tls"),
        stores_weight: false,
        resolves_groups: false,
        read_only: false,
        crate_name: "meshline-registry-others",
        centre: None,
        connect: connect!("redis", meshline_registry_others::RedisRegistry::connect),
    },
    RegistryType {
        seata_name: "consul",
        aliases: &[],
        feature: "consul",
        address_key: "serverAddr",
        ttl_key: Some("ttl"),
        cluster_key: Some("cluster"),
        tls_feature: Some("consul-tls"),
        stores_weight: true,
        resolves_groups: false,
        read_only: false,
        crate_name: "meshline-registry-others",
        centre: centre!(
            "consul",
            "key",
            "seata.properties",
            meshline_registry_others::consul::ConsulCentre::connect
        ),
        connect: connect!("consul", meshline_registry_others::ConsulRegistry::connect),
    },
    RegistryType {
        seata_name: "eureka",
        aliases: &[],
        feature: "eureka",
        address_key: "serviceUrl",
        ttl_key: Some("leaseDuration"),
        cluster_key: Some("application"),
        tls_feature: Some("eureka-tls"),
        stores_weight: true,
        resolves_groups: false,
        read_only: false,
        crate_name: "meshline-registry-others",
        centre: None,
        connect: connect!("eureka", meshline_registry_others::EurekaRegistry::connect),
    },
    RegistryType {
        seata_name: "raft",
        aliases: &[],
        feature: "raft",
        // The TCs' HTTP (control) addresses; read-only: no TTL, no cluster to join.
        address_key: "serverAddr",
        ttl_key: None,
        cluster_key: None,
        tls_feature: Some("raft-tls"),
        stores_weight: false,
        resolves_groups: false,
        read_only: true,
        crate_name: "meshline-registry-others",
        centre: None,
        connect: connect!("raft", meshline_registry_others::RaftRegistry::connect),
    },
    RegistryType {
        // Seata's namingserver: `registry.type=seata`, keys under `registry.seata.*`.
        seata_name: "seata",
        aliases: &["namingserver"],
        feature: "namingserver",
        address_key: "server-addr",
        // Eviction is the namingserver's (90 s); registrations are heart-beaten.
        ttl_key: None,
        cluster_key: Some("cluster"),
        tls_feature: Some("namingserver-tls"),
        stores_weight: true,
        resolves_groups: true,
        read_only: false,
        crate_name: "meshline-registry-others",
        centre: None,
        connect: connect!(
            "namingserver",
            meshline_registry_others::NamingserverRegistry::connect
        ),
    },
];

/// A constructor added at run time (see [`register_custom`]).
pub type CustomConnect =
    Arc<dyn for<'a> Fn(&'a Config) -> RegistryFuture<'a> + Send + Sync + 'static>;

fn custom_table() -> &'static RwLock<BTreeMap<String, CustomConnect>> {
    static TABLE: std::sync::OnceLock<RwLock<BTreeMap<String, CustomConnect>>> =
        std::sync::OnceLock::new();
    TABLE.get_or_init(|| RwLock::new(BTreeMap::new()))
}

/// Adds a registry type under `name` (matched case-insensitively), for
/// `registry.type=custom` + `registry.custom.name=<name>` (Seata's SPI) or
/// `registry.type=<name>`. A built-in name cannot be replaced; registering a name
/// again replaces the earlier constructor.
pub fn register_custom<F>(name: &str, connect: F) -> Result<(), RegistryError>
where
    F: for<'a> Fn(&'a Config) -> RegistryFuture<'a> + Send + Sync + 'static,
{
    let n = name.trim().to_ascii_lowercase();
    if n.is_empty() || n == "custom" || resolve_type(&n).is_ok() {
        return Err(RegistryError::Config(format!(
            "cannot register a custom registry named `{name}`: the name is empty or built in"
        )));
    }
    custom_table()
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(n, Arc::new(connect));
    Ok(())
}

/// The names added with [`register_custom`], sorted.
pub fn custom_names() -> Vec<String> {
    custom_table()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .keys()
        .cloned()
        .collect()
}

fn custom(name: &str) -> Option<CustomConnect> {
    custom_table()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&name.trim().to_ascii_lowercase())
        .cloned()
}

/// Resolves a `registry.type` value (any case, aliases allowed) to its built-in
/// [`RegistryType`].
pub fn resolve_type(name: &str) -> Result<&'static RegistryType, RegistryError> {
    let n = name.trim().to_ascii_lowercase();
    REGISTRY_TYPES
        .iter()
        .find(|t| t.seata_name == n || t.aliases.contains(&n.as_str()))
        .ok_or_else(|| RegistryError::UnknownType {
            given: name.to_string(),
            known: known_names(),
        })
}

fn known_names() -> String {
    let mut names: Vec<String> = REGISTRY_TYPES
        .iter()
        .flat_map(|t| std::iter::once(t.seata_name).chain(t.aliases.iter().copied()))
        .map(str::to_string)
        .collect();
    names.push("custom (with registry.custom.name)".into());
    names.extend(custom_names());
    names.join(", ")
}

/// True when the backend for `ty` is compiled into this build.
pub fn is_compiled_in(ty: &RegistryType) -> bool {
    ty.connect.is_some()
}

/// The error for a type whose backend is not compiled in.
fn not_compiled_in(given: &str, ty: &RegistryType) -> RegistryError {
    RegistryError::FeatureNotEnabled {
        kind: given.to_string(),
        feature: ty.feature,
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
/// | `nacos` | the client connects to a server | `from_config`, within 10 s |
/// | `etcd3` | nothing: connecting is lazy (with credentials, it authenticates) | the first operation (`lookup`, `watch`, `register`), within its operation timeout (TTL / 2, 1 to 5 s) |
/// | `zk` | a session is established | `from_config`, within session + connect timeout |
/// | `redis` | `PING` | `from_config`, within `registry.redis.commandTimeout` per server |
/// | `consul` | `GET /v1/status/leader` | `from_config`, within 5 s |
/// | `eureka` | `GET {serviceUrl}/apps` | `from_config`, within 5 s per URL |
/// | `custom` | whatever its constructor does | |
///
/// Either way the error names the server address and the cause (`... at
/// 127.0.0.1:2181: connect: ... Connection refused`). A registry built while its server
/// was reachable reconnects on its own afterwards. Each backend reads its own
/// `registry.<type>.*` section here, so an invalid value there is reported by this call.
pub async fn from_config(config: &Config) -> Result<Arc<dyn RegistryService>, RegistryError> {
    let given = config.registry.kind.trim();
    if given.eq_ignore_ascii_case("custom") {
        let section = config.registry.section(&["custom"]);
        let Some(name) = section.get("name").filter(|n| !n.is_empty()) else {
            return Err(RegistryError::Config(
                "registry.type=custom needs registry.custom.name: the name a program gave \
                 meshline::registry::register_custom"
                    .into(),
            ));
        };
        return match custom(name) {
            Some(connect) => connect(config).await,
            None => Err(RegistryError::Config(format!(
                "registry.custom.name=`{name}`: no custom registry of that name was registered \
                 (registered: {})",
                match custom_names() {
                    v if v.is_empty() => "none".to_string(),
                    v => v.join(", "),
                }
            ))),
        };
    }
    if let Some(connect) = custom(given) {
        return connect(config).await;
    }
    let ty = resolve_type(given)?;
    match ty.connect {
        Some(connect) => connect(config).await,
        None => Err(not_compiled_in(given, ty)),
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
        assert_eq!(resolve_type("RAFT").unwrap().seata_name, "raft");
        assert_eq!(resolve_type("Seata").unwrap().seata_name, "seata");
        assert_eq!(resolve_type("namingserver").unwrap().seata_name, "seata");
        let err = resolve_type("sofa").unwrap_err().to_string();
        assert!(err.contains("unknown registry type `sofa`"), "{err}");
        assert!(
            err.contains(
                "file, nacos, etcd3, etcd, zk, zookeeper, redis, consul, eureka, raft, seata, namingserver"
            ),
            "{err}"
        );
    }

    /// Every entry's refusal, whatever this build compiled in: the same entry with its
    /// constructor taken away must name its own feature.
    #[tokio::test]
    async fn a_type_not_compiled_in_names_its_feature() {
        for ty in REGISTRY_TYPES {
            let off = RegistryType {
                connect: None,
                ..*ty
            };
            assert!(!is_compiled_in(&off));
            let err = not_compiled_in(&ty.seata_name.to_uppercase(), &off).to_string();
            assert!(
                err.contains(&format!("cargo feature `{}`", ty.feature)),
                "{err}"
            );
        }
        // And through `from_config`, for the types this build lacks.
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

    /// Each entry has a constructor exactly when this build has its feature (build.rs
    /// records the features), and so has its centre's: the feature named in the entry
    /// is the one its `connect!`/`centre!` test.
    #[test]
    fn each_entry_is_compiled_in_exactly_when_its_feature_is_on() {
        let norm = |f: &str| f.to_ascii_lowercase().replace('-', "_");
        let on: Vec<String> = env!("MESHLINE_BUILD_FEATURES")
            .split(',')
            .map(norm)
            .collect();
        for ty in REGISTRY_TYPES {
            let feature_on = on.contains(&norm(ty.feature));
            assert_eq!(is_compiled_in(ty), feature_on, "{}", ty.seata_name);
            if let Some(c) = ty.centre {
                assert_eq!(
                    c.connect.is_some(),
                    feature_on,
                    "{}'s centre",
                    ty.seata_name
                );
            }
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
