//! Seata's configuration centre (`config.type`): `service.vgroupMapping.*`, grouplists
//! and `client.*` keys read from Nacos, etcd, ZooKeeper or Consul, and followed live.
//!
//! # How Seata reads a centre, and so how meshline does
//!
//! Seata's Java client (`NacosConfiguration`, `EtcdConfiguration`,
//! `ZookeeperConfiguration`, `ConsulConfiguration` in `config/seata-config-*`) looks a
//! key up in two places, in this order:
//!
//! 1. **One blob** holding many keys: Nacos data id `config.nacos.dataId` (group
//!    `config.nacos.group`, default `SEATA_GROUP`), etcd key `config.etcd3.key`, ZooKeeper
//!    node `config.zk.nodePath` (default `/seata/seata.properties`), Consul KV key
//!    `config.consul.key`; all default to `seata.properties`. Its format is
//!    `config.dataType`, else the blob name's suffix, else `properties`.
//! 2. **The key itself** when the blob lacks it: Nacos data id = the key, etcd key = the
//!    key, ZooKeeper node `/seata/<key>`, Consul KV key = the key (the layout Seata's
//!    `nacos-config.sh` and friends push, one entry per key).
//!
//! Seata reads `registry.*` and `config.*` from its file only (`registry.conf` or
//! Spring's properties), never from the centre; so does meshline: such keys found in
//! the centre are skipped, with a debug log.
//!
//! [`CentreSpec`] is that recipe; [`LiveConfig`] applies it. The centre's entries sit
//! between the files and the environment ([`crate::ConfigLoader`]): a centre
//! key wins over the same key in a file; `MESHLINE_*` variables and explicit overrides
//! win over both.
//!
//! # Live updates
//!
//! [`LiveConfig`] follows the blob and every single key it looked up (each centre's
//! own push: etcd watches, ZooKeeper watchers, Consul blocking queries, Nacos
//! listeners) and the configuration's files, re-reads on a change, rebuilds the whole
//! [`Config`] from every source and publishes it when it differs. A group or a cluster
//! the configuration's own `txServiceGroup` does not lead to is read when asked
//! ([`LiveConfig::ask_group`], [`LiveConfig::ask_cluster`]: the CLI's group argument, a
//! second group in code, a cluster the file registry is asked for) and followed from
//! then on. A `meshline_registry_core::Discovery` built on it
//! (`Discovery::with_live_config`) asks for the
//! groups it is given and moves its watches to the new cluster when
//! `service.vgroupMapping.<group>` changes. A centre that cannot be read after start
//! keeps the last good configuration (with a warning) and is retried with backoff; a
//! failed first read is an error, because a client started without its mapping would
//! route nowhere.

use std::collections::BTreeSet;

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::{Config, ConfigError};
use crate::{ConfigLoader, Entry, Format, parse_text};

mod live;
mod memory;
pub(crate) use live::LiveShared;
pub use live::{FILE_POLL, LiveConfig, REFRESH_EVERY};
pub use memory::MemoryCentre;

/// A configuration centre client: reads one entry by its name, and reports changes.
///
/// Implemented by the backend crates (Nacos, etcd, ZooKeeper, Consul); `config.type=file`
/// needs no client ([`with_file_centre`]). Names are what Seata uses: a blob's data id / key / node path, or a
/// single Seata key (`service.vgroupMapping.my_group`); each backend maps a name to its
/// own place (ZooKeeper: `/seata/<name>` unless the name is already a path).
#[async_trait]
pub trait ConfigCentre: Send + Sync + 'static {
    /// The centre type, as Seata spells it (`nacos`, `etcd3`, `zk`, `consul`, `file`).
    fn kind(&self) -> &'static str;

    /// Where the centre is, for messages (addresses, namespace; never a secret).
    fn location(&self) -> String;

    /// The text stored under `name`; `None` when there is no such entry.
    async fn get(&self, name: &str) -> Result<Option<String>, ConfigError>;

    /// Follows `names`: a message on the returned channel every time one of them may
    /// have changed (spurious messages are harmless: the caller re-reads and compares).
    /// Returns once the watches are in place, so every change after the return is
    /// notified ([`LiveConfig`] reads once more right after, for changes made between
    /// its read and the follow). Following stops when the receiver is dropped; a broken
    /// watch closes the channel, and the caller reads and follows again. A centre that cannot push changes
    /// returns a channel that never fires; [`LiveConfig`] also re-reads periodically.
    async fn follow(&self, names: Vec<String>) -> Result<mpsc::Receiver<()>, ConfigError>;
}

/// What to read from a centre: the blob's name and format, and which single keys to
/// look up when the blob lacks them. Built from a [`Config`] by [`CentreSpec::from_config`].
#[derive(Debug, Clone, PartialEq)]
pub struct CentreSpec {
    /// The blob's name (`seata.properties`, `/seata/seata.properties`).
    pub blob: String,
    /// The blob's format.
    pub format: Format,
    /// Keys other parts of the client read (the balancer's `client.loadBalance.type`),
    /// looked up one by one when the blob lacks them, as Seata's `getConfig` does, and
    /// followed; the group mapping and the mapped cluster's grouplist always are.
    pub keys: Vec<String>,
}

/// `config.type` values Seata has that meshline does not read, refused by name
/// wherever a centre type is resolved.
pub const UNSUPPORTED_KINDS: &[&str] = &["apollo", "springCloudConfig", "custom"];

/// The refusal of one of [`UNSUPPORTED_KINDS`], or `None` for any other value.
pub fn unsupported_kind(kind: &str) -> Option<ConfigError> {
    let k = kind.trim().to_ascii_lowercase().replace(['-', '_'], "");
    UNSUPPORTED_KINDS
        .iter()
        .any(|u| u.to_ascii_lowercase() == k)
        .then(|| {
            ConfigError::Invalid(format!(
                "config.type=`{}` is not supported by meshline: use file or a centre this \
                 build knows (`meshline types` lists them), or keep the keys in the file",
                kind.trim()
            ))
        })
}

/// True when `kind` (any case) is `file`: the configuration is the files themselves.
pub fn is_file_kind(kind: &str) -> bool {
    kind.trim().eq_ignore_ascii_case("file")
}

/// The format a data type name or a blob name's suffix means: `properties`, `yaml`
/// (`yml`), `json`, `toml`, and whatever else [`Format::from_path`] knows.
fn format_named(name: &str) -> Option<Format> {
    let probe = format!("blob.{}", name.trim().to_ascii_lowercase());
    Format::from_path(std::path::Path::new(&probe)).ok()
}

impl CentreSpec {
    /// The spec `config.*` describes for a centre whose section is `config.<names>`
    /// (aliases first, the canonical name last), whose blob is named by the section's
    /// `blob_key` and defaults to `default_blob`: the backend's own facts, which the
    /// `meshline` facade's table of types holds.
    pub fn from_config(
        config: &Config,
        names: &[&str],
        blob_key: &str,
        default_blob: &str,
    ) -> Result<CentreSpec, ConfigError> {
        let (key, default) = (blob_key, default_blob);
        let section = config.centre.section(names);
        let blob = section
            .get(key)
            .filter(|v| !v.is_empty())
            .unwrap_or(default)
            .to_string();
        let format = match &config.centre.data_type {
            Some(t) => format_named(t).ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "config.dataType=`{t}`: expected properties, yaml, json or toml"
                ))
            })?,
            None => blob
                .rsplit_once('.')
                .and_then(|(_, ext)| format_named(ext))
                .unwrap_or(Format::Properties),
        };
        Ok(CentreSpec {
            blob,
            format,
            keys: Vec::new(),
        })
    }
}

/// Groups and clusters asked for beyond the configuration's own `txServiceGroup` (a
/// CLI argument, a second group in code, a cluster looked up by name): their keys are
/// read from the centre as Seata's `getConfig` would read them, and followed.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Wanted {
    pub(crate) groups: BTreeSet<String>,
    pub(crate) clusters: BTreeSet<String>,
}

/// The single Seata keys looked up one by one when the blob lacks them, for a
/// configuration `cfg`: each group's mapping (the tx group's and the asked ones), each
/// mapped or asked cluster's grouplist, and the keys the spec names for other parts of
/// the client.
fn single_keys(cfg: &Config, spec: &CentreSpec, wanted: &Wanted) -> Vec<String> {
    let groups: BTreeSet<&String> = std::iter::once(&cfg.tx_service_group)
        .chain(&wanted.groups)
        .collect();
    let mut keys: Vec<String> = groups
        .iter()
        .map(|g| format!("service.vgroupMapping.{g}"))
        .collect();
    keys.extend(spec.keys.iter().cloned());
    let clusters: BTreeSet<&String> = groups
        .iter()
        .filter_map(|g| cfg.service.vgroup_mapping.get(*g))
        .filter(|c| !c.trim().is_empty())
        .chain(&wanted.clusters)
        .collect();
    keys.extend(clusters.iter().map(|c| format!("service.{c}.grouplist")));
    keys
}

/// Keys Seata never reads from a centre (it reads them from its file).
fn file_only(path: &[String]) -> bool {
    let first = path
        .iter()
        .find(|s| !s.eq_ignore_ascii_case("seata"))
        .map(|s| s.to_ascii_lowercase());
    matches!(first.as_deref(), Some("registry") | Some("config"))
}

/// One read of the centre: the entries to apply, and the single keys that were
/// looked up (to follow them).
struct Read {
    entries: Vec<Entry>,
    followed: Vec<String>,
}

async fn read_centre(
    centre: &dyn ConfigCentre,
    spec: &CentreSpec,
    loader: &ConfigLoader,
    wanted: &Wanted,
) -> Result<(Config, Read), ConfigError> {
    let blob = centre.get(&spec.blob).await?;
    let mut entries: Vec<Entry> = match &blob {
        Some(text) => parse_text(text, spec.format).map_err(|e| {
            ConfigError::Invalid(format!(
                "{} config centre at {}: `{}`: {e}",
                centre.kind(),
                centre.location(),
                spec.blob
            ))
        })?,
        None => Vec::new(),
    };
    entries.retain(|(path, _)| {
        let keep = !file_only(path);
        if !keep {
            tracing::debug!(
                key = %path.join("."),
                "config centre: registry.* and config.* keys are read from the file only (as Seata); skipped"
            );
        }
        keep
    });
    let origin = format!("{} config `{}`", centre.kind(), spec.blob);
    // Single keys depend on the mapping, which may itself come from a single key: look
    // up the mapping first, then the keys the result implies, until nothing new (at
    // most three rounds: mapping, then the mapped cluster's grouplist).
    let mut followed: Vec<String> = Vec::new();
    let mut rounds = 0;
    let cfg = loop {
        let cfg = loader.clone().load_with_centre(Some((&entries, &origin)))?;
        let new: Vec<String> = single_keys(&cfg, spec, wanted)
            .into_iter()
            .filter(|k| !followed.contains(k))
            .collect();
        rounds += 1;
        if new.is_empty() || rounds > 3 {
            break cfg;
        }
        for key in new {
            let path: Vec<String> = key.split('.').map(str::to_string).collect();
            let in_blob = entries.iter().any(|(p, _)| same_key(p, &path));
            followed.push(key.clone());
            if in_blob {
                continue;
            }
            if let Some(v) = centre.get(&key).await? {
                entries.push((path, v.trim().to_string()));
            }
        }
    };
    Ok((cfg, Read { entries, followed }))
}

/// Two flat keys are the same Seata key (ignoring case, `-` and `_` in structural
/// segments; the `seata.` root optional).
fn same_key(a: &[String], b: &[String]) -> bool {
    let strip = |p: &[String]| -> Vec<String> {
        let p = if p.len() > 1 && p[0].eq_ignore_ascii_case("seata") {
            &p[1..]
        } else {
            p
        };
        p.iter()
            .map(|s| s.replace(['-', '_'], "").to_ascii_lowercase())
            .collect()
    };
    strip(a) == strip(b)
}

/// `config.type=file`: Seata's `config.file.name` (default `file.conf`), read as a
/// further file next to the one that named it. A name that was set but cannot be read
/// is an error; the default name is used only when such a file exists.
///
/// Returns the loader with that file added (before the environment), or the loader
/// unchanged when there is nothing to add.
pub fn with_file_centre(loader: ConfigLoader, base: &Config) -> Result<ConfigLoader, ConfigError> {
    let section = base.centre.section(&["file"]);
    let explicit = section.get("name").filter(|n| !n.is_empty());
    let name = explicit.unwrap_or("file.conf");
    let mut path = std::path::PathBuf::from(name);
    if path.is_relative()
        && let Some(dir) = base.path.as_ref().and_then(|p| p.parent())
    {
        path = dir.join(path);
    }
    if base.path.as_deref() == Some(path.as_path()) {
        return Ok(loader);
    }
    match std::fs::metadata(&path) {
        Ok(_) => Ok(loader.file_before_env(path)),
        Err(e) if explicit.is_some() => Err(ConfigError::Invalid(format!(
            "config.file.name=`{name}`: cannot read {}: {e}",
            path.display()
        ))),
        Err(_) => Ok(loader),
    }
}

#[cfg(test)]
mod tests;
