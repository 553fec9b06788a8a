//! Loading a configuration the way a Seata client does: files, then Seata's
//! configuration centre (`config.type`), then the environment.
//!
//! [`live_config`] reads the files and environment a [`ConfigLoader`] names, looks at
//! `config.type`, and:
//! - `file` (the default): also reads `config.file.name` (default `file.conf`, next to
//!   the file that named it) when it exists; a name that was set but cannot be read is
//!   an error. The files are followed: an edit rebuilds the configuration from every
//!   source (the environment as read at start, the overrides).
//! - `nacos`, `etcd3`, `zk`, `consul`: connects to the centre that `config.<type>.*`
//!   names, reads Seata's keys from it the way Seata does, and follows them
//!   ([`meshline_registry_core::centre`] has the rules).
//! - `apollo`, `springCloudConfig`, `custom`: refused, naming what is supported.
//!
//! [`discovery_from_live`] then builds the registry and a [`Discovery`] that follows
//! `service.vgroupMapping.*` changes made in the files or the centre, and reads any
//! other group it is asked for from the centre. The file registry built from the live
//! configuration follows it too: a grouplist kept in the centre is read from there.
//!
//! A centre type is the [`CentreType`] of an entry of the table of registry types
//! ([`crate::registry::REGISTRY_TYPES`]), resolved by [`resolve_centre`]; a type whose
//! backend is not compiled in is an error naming the cargo feature.

use meshline_registry_core::centre::{
    CentreSpec, LiveConfig, is_file_kind, unsupported_kind, with_file_centre,
};

use crate::registry::{CentreType, REGISTRY_TYPES, RegistryType};
use crate::{ConfigLoader, Discovery, RegistryError};

/// What a `config.type` value names.
#[derive(Debug, Clone, Copy)]
pub enum CentreKind {
    /// `file`: the configuration is the files (and `config.file.name`).
    File,
    /// A centre on a server: the registry type whose [`CentreType`] it is.
    Server(&'static RegistryType, CentreType),
}

/// Resolves a `config.type` value (any case, the registry types' aliases allowed) from
/// the table of registry types: `file`, a type with a centre, or an error naming
/// Seata's unsupported types or listing the known ones.
pub fn resolve_centre(kind: &str) -> Result<CentreKind, RegistryError> {
    if is_file_kind(kind) {
        return Ok(CentreKind::File);
    }
    if let Some(refused) = unsupported_kind(kind) {
        return Err(refused.into());
    }
    let n = kind.trim().to_ascii_lowercase();
    REGISTRY_TYPES
        .iter()
        .find(|t| t.seata_name == n || t.aliases.contains(&n.as_str()))
        .and_then(|t| t.centre.map(|c| CentreKind::Server(t, c)))
        .ok_or_else(|| {
            RegistryError::Config(format!(
                "unknown config.type `{}`: expected {}",
                kind.trim(),
                centre_names().join(", ")
            ))
        })
}

/// Every `config.type` name: `file`, then each registry type with a centre.
pub fn centre_names() -> Vec<&'static str> {
    std::iter::once("file")
        .chain(
            REGISTRY_TYPES
                .iter()
                .filter(|t| t.centre.is_some())
                .map(|t| t.seata_name),
        )
        .collect()
}

/// The configuration `loader` describes, completed by the configuration centre its
/// `config.type` names, and followed when that centre is a server. See the
/// [module docs](self).
pub async fn live_config(loader: ConfigLoader) -> Result<LiveConfig, RegistryError> {
    // Files read once; this pass is quiet: the configuration is built again below (and
    // on every centre change) from what was read here, and warns then.
    let loader = loader.read_now()?;
    let base = loader.clone().load_quietly()?;
    let (ty, centre) = match resolve_centre(&base.centre.kind)? {
        CentreKind::File => {
            let loader = with_file_centre(loader, &base)?;
            return Ok(LiveConfig::files(loader)?);
        }
        CentreKind::Server(ty, centre) => (ty, centre),
    };
    let Some(connect) = centre.connect else {
        return Err(RegistryError::Config(format!(
            "config.type=`{}` needs the `{}` centre client, which this build leaves out: \
             enable the cargo feature `{}` of meshline",
            base.centre.kind.trim(),
            ty.seata_name,
            ty.feature
        )));
    };
    let mut spec = CentreSpec::from_config(
        &base,
        &ty.section_names(),
        centre.blob_key,
        centre.default_blob,
    )?;
    spec.keys = crate::parts::centre_keys();
    let centre = connect(&base).await?;
    Ok(LiveConfig::start(loader, centre, spec).await?)
}

/// The registry the live configuration names, in a [`Discovery`] whose group ->
/// cluster table follows the live configuration (its files, its centre).
pub async fn discovery_from_live(live: &LiveConfig) -> Result<Discovery, RegistryError> {
    let registry = crate::registry::from_config(&live.current()).await?;
    Ok(Discovery::with_live_config(registry, live))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn centre_kinds_resolve_from_the_table() {
        let name = |k: &str| match resolve_centre(k).unwrap() {
            CentreKind::File => "file",
            CentreKind::Server(t, _) => t.seata_name,
        };
        assert_eq!(name("File"), "file");
        assert_eq!(name("Nacos"), "nacos");
        assert_eq!(name("etcd"), "etcd3");
        assert_eq!(name("zookeeper"), "zk");
        assert_eq!(name("consul"), "consul");
        for k in ["apollo", "springCloudConfig"] {
            let err = resolve_centre(k).unwrap_err().to_string();
            assert!(err.contains("not supported"), "{err}");
        }
        // A registry type without a centre is not a centre type.
        let err = resolve_centre("redis").unwrap_err().to_string();
        assert!(
            err.contains("unknown config.type `redis`: expected file, nacos, etcd3, zk, consul"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_type_not_compiled_in_names_its_feature() {
        for ty in REGISTRY_TYPES
            .iter()
            .filter(|t| t.centre.is_some_and(|c| c.connect.is_none()))
        {
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
