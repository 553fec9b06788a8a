//! Loading a configuration the way a Seata client does: files, then Seata's
//! configuration centre (`config.type`), then the environment; one table of centre
//! types.
//!
//! [`live_config`] reads the files and environment a [`ConfigLoader`] names, looks at
//! `config.type`, and:
//! - `file` (the default): also reads `config.file.name` (default `file.conf`, next to
//!   the file that named it) when it exists; a name that was set but cannot be read is
//!   an error. The result never changes.
//! - `nacos`, `etcd3`, `zk`, `consul`: connects to the centre that `config.<type>.*`
//!   names, reads Seata's keys from it the way Seata does, and follows them
//!   ([`meshline_registry_core::centre`] has the rules).
//! - `apollo`, `springCloudConfig`, `custom`: refused, naming what is supported.
//!
//! [`discovery_from_live`] then builds the registry and a [`Discovery`] that follows
//! `service.vgroupMapping.*` changes made in the centre.
//!
//! Every centre type is one [`CentreType`] entry in [`CENTRE_TYPES`]; a type whose
//! backend is not compiled in is an error naming the cargo feature.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use meshline_registry_core::centre::{
    CentreSpec, ConfigCentre, LiveConfig, canonical_kind, with_file_centre,
};

use crate::{Config, ConfigLoader, Discovery, RegistryError};

/// What a centre constructor returns.
pub type CentreFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Arc<dyn ConfigCentre>, RegistryError>> + Send + 'a>>;

/// A centre constructor: connects to the centre `config.<type>.*` names.
pub type ConnectCentre = for<'a> fn(&'a Config) -> CentreFuture<'a>;

/// A configuration centre type meshline knows.
#[derive(Debug, Clone, Copy)]
pub struct CentreType {
    /// Seata's `config.type` name (canonical, see
    /// [`canonical_kind`]).
    pub seata_name: &'static str,
    /// The `meshline` cargo feature that compiles its client in.
    pub feature: &'static str,
    /// The constructor; `None` when the feature is not compiled in.
    pub connect: Option<ConnectCentre>,
}

macro_rules! centre {
    ($feature:literal, $build:expr) => {{
        #[cfg(feature = $feature)]
        let c: Option<ConnectCentre> = Some(|config| {
            Box::pin(async move {
                let centre = $build(config).await?;
                Ok(Arc::new(centre) as Arc<dyn ConfigCentre>)
            })
        });
        #[cfg(not(feature = $feature))]
        let c: Option<ConnectCentre> = None;
        c
    }};
}

/// Every configuration centre type with a server (`file` needs none).
pub static CENTRE_TYPES: &[CentreType] = &[
    CentreType {
        seata_name: "nacos",
        feature: "nacos",
        connect: centre!("nacos", meshline_registry_nacos::NacosCentre::connect),
    },
    CentreType {
        seata_name: "etcd3",
        feature: "etcd",
        connect: centre!("etcd", meshline_registry_etcd::EtcdCentre::connect),
    },
    CentreType {
        seata_name: "zk",
        feature: "zookeeper",
        connect: centre!(
            "zookeeper",
            meshline_registry_others::zookeeper::ZkCentre::connect
        ),
    },
    CentreType {
        seata_name: "consul",
        feature: "consul",
        connect: centre!(
            "consul",
            meshline_registry_others::consul::ConsulCentre::connect
        ),
    },
];

/// The configuration `loader` describes, completed by the configuration centre its
/// `config.type` names, and followed when that centre is a server. See the
/// [module docs](self).
pub async fn live_config(loader: ConfigLoader) -> Result<LiveConfig, RegistryError> {
    // Files read once; this pass is quiet: the configuration is built again below (and
    // on every centre change) from what was read here, and warns then.
    let loader = loader.read_now()?;
    let base = loader.clone().load_quietly()?;
    let kind = canonical_kind(&base.centre.kind)?;
    if kind == "file" {
        let loader = with_file_centre(loader, &base)?;
        return Ok(LiveConfig::fixed(loader.load()?));
    }
    let ty = CENTRE_TYPES
        .iter()
        .find(|t| t.seata_name == kind)
        .ok_or_else(|| RegistryError::Config(format!("config.type `{kind}` has no client")))?;
    let Some(connect) = ty.connect else {
        return Err(RegistryError::Config(format!(
            "config.type=`{}` needs the `{}` centre client, which this build leaves out: \
             enable the cargo feature `{}` of meshline",
            base.centre.kind.trim(),
            kind,
            ty.feature
        )));
    };
    let spec = CentreSpec::from_config(&base, kind)?
        .ok_or_else(|| RegistryError::Config(format!("config.type `{kind}` has no blob layout")))?;
    let centre = connect(&base).await?;
    LiveConfig::start(loader, centre, spec).await
}

/// The registry the live configuration names, in a [`Discovery`] whose group ->
/// cluster table follows the centre (fixed when there is no centre).
pub async fn discovery_from_live(live: &LiveConfig) -> Result<Discovery, RegistryError> {
    let config = live.current();
    let registry = crate::registry::from_config(&config).await?;
    Ok(if live.centre().is_some() {
        Discovery::with_live_config(registry, live)
    } else {
        Discovery::from_config(registry, &config)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_type_not_compiled_in_names_its_feature() {
        for ty in CENTRE_TYPES.iter().filter(|t| t.connect.is_none()) {
            let loader = ConfigLoader::new().set("config.type", ty.seata_name);
            let err = live_config(loader).await.unwrap_err().to_string();
            assert!(
                err.contains(&format!("cargo feature `{}`", ty.feature)),
                "{err}"
            );
        }
    }

    #[tokio::test]
    async fn unsupported_types_are_named() {
        let loader = ConfigLoader::new().set("config.type", "apollo");
        let err = live_config(loader).await.unwrap_err().to_string();
        assert!(err.contains("not supported"), "{err}");
    }

    #[tokio::test]
    async fn file_type_reads_config_file_name_next_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("registry.properties");
        std::fs::write(
            &main,
            "config.type=file\nconfig.file.name=client.properties\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("client.properties"),
            "service.vgroupMapping.default_tx_group=prod\nservice.prod.grouplist=10.0.0.1:8091\n",
        )
        .unwrap();
        let live = live_config(ConfigLoader::new().file(&main)).await.unwrap();
        let cfg = live.current();
        assert_eq!(cfg.service.vgroup_mapping["default_tx_group"], "prod");
        assert_eq!(cfg.grouplist("prod").unwrap(), vec!["10.0.0.1:8091"]);
        // The environment still wins over the file it named.
        let live = live_config(
            ConfigLoader::new()
                .file(&main)
                .env_vars([("MESHLINE_SERVICE__VGROUP_MAPPING__default_tx_group", "env")]),
        )
        .await
        .unwrap();
        assert_eq!(
            live.current().service.vgroup_mapping["default_tx_group"],
            "env"
        );
        // A name that was set but cannot be read is an error naming it.
        std::fs::write(&main, "config.type=file\nconfig.file.name=missing.conf\n").unwrap();
        let err = live_config(ConfigLoader::new().file(&main))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("config.file.name=`missing.conf`"), "{err}");
        // The default name is only read when it exists.
        std::fs::write(&main, "config.type=file\n").unwrap();
        live_config(ConfigLoader::new().file(&main)).await.unwrap();
    }

    /// Seata 1.x's shipped pair, verbatim: `registry.conf` names `file.conf` through
    /// `config.type = "file"` and `config.file.name`, and only the first is given.
    #[tokio::test]
    async fn seatas_shipped_registry_conf_reads_its_file_conf() {
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("registry-core/tests/fixtures/seata");
        let dir = tempfile::tempdir().unwrap();
        for f in ["registry.conf", "file.conf"] {
            std::fs::copy(fixtures.join(f), dir.path().join(f)).unwrap();
        }
        let live = live_config(ConfigLoader::new().file(dir.path().join("registry.conf")))
            .await
            .unwrap();
        let cfg = live.current();
        assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
        assert_eq!(cfg.registry.kind, "file");
        assert_eq!(cfg.service.vgroup_mapping["default_tx_group"], "default");
        assert_eq!(cfg.grouplist("default").unwrap(), vec!["127.0.0.1:8091"]);
        // file.conf was read: its transport values differ from the defaults.
        assert_eq!(
            cfg.path.as_deref(),
            Some(dir.path().join("file.conf").as_path())
        );
        // registry.conf names file.conf explicitly: without it, an error naming it (not
        // Seata's silent fall-back to built-in defaults).
        std::fs::remove_file(dir.path().join("file.conf")).unwrap();
        let err = live_config(ConfigLoader::new().file(dir.path().join("registry.conf")))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("config.file.name=`file.conf`"), "{err}");
    }
}
