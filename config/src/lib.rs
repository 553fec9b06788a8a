//! One configuration type for every part of meshline, loaded from the files Seata
//! users already have, and the config centre that keeps it live.
//!
//! This crate is the configuration only: sources (files, the environment, overrides, a
//! centre), formats (YAML, TOML, JSON, properties, HOCON), Seata's key tables and the
//! readers each part uses for its own keys. It depends on no other meshline crate:
//! `meshline-registry-core` (the discovery vocabulary) builds on it and re-exports it
//! as `meshline_registry_core::config` (and `centre`), so either path names the same
//! items.
//!
//! # Sources and precedence
//!
//! Later sources override earlier ones:
//!
//! 1. Built-in defaults (Seata's, see the field docs): with no file at all,
//!    `registry.type=file`, `default_tx_group -> default -> 127.0.0.1:8091` works.
//! 2. A file: YAML (`.yaml`/`.yml`), TOML (`.toml`) or JSON (`.json`) read through the
//!    `config` crate, Seata's flat Java `.properties`, or Seata 1.x's HOCON
//!    (`registry.conf`, `file.conf`; `.conf` or `.hocon`) read through the
//!    `hocon-parser` crate as Seata's Typesafe Config reads it: `key = value`,
//!    `key { }`, dotted and quoted keys, `#` / `//` comments, `"""` strings, `include`
//!    relative to the file, `${...}` substitutions (also from the process environment);
//!    a key set twice keeps the later value. Seata's `registry.conf` and `file.conf` are
//!    two files: load both (`ConfigLoader::new().file("registry.conf").file("file.conf")`).
//! 3. Environment variables (see below).
//! 4. Explicit overrides ([`ConfigLoader::set`], used by the CLI's `--registry`/`--server`).
//!
//! # Key shapes
//!
//! The same settings can be written in any of the shapes Seata users have:
//!
//! - Seata's flat keys: `registry.type`, `service.vgroupMapping.<group>`,
//!   `service.<cluster>.grouplist`, `client.loadBalance.type`, `registry.nacos.serverAddr`…
//! - Spring Boot / seata-go YAML under a `seata:` root: `seata.registry.type`,
//!   `seata.service.vgroup-mapping.<group>`, `seata.service.grouplist.<cluster>`,
//!   `seata.client.load-balance.type`, seata-go's `seata.getty.load-balance-type`.
//! - The same tree without the `seata:` root.
//!
//! Structural key segments are matched ignoring case, `-` and `_` (`serverAddr`,
//! `server-addr` and `server_addr` are one key); group and cluster names are kept
//! exactly as written, and, as in Seata, they are the whole rest of the key, dots
//! included: `service.vgroupMapping.order.tx=eu.west` maps group `order.tx`, and
//! `service.eu.west.grouplist` / `service.grouplist.eu.west` is cluster `eu.west`.
//!
//! # Durations
//!
//! Keys that Seata defines keep Seata's unit for a bare number: every duration key Seata
//! has counts milliseconds (`registry.zk.sessionTimeout=6000`,
//! `transport.rpcTmRequestTimeout=30000`, `registry.redis.timeout=0`). Keys only
//! meshline has (`registry.etcd3.ttl`, `registry.redis.refreshPeriod`,
//! `transport.writeTimeout`...) need a unit (`10s`, `500ms`): a bare number is refused
//! with a message asking for one. Text such as `10s` or `1m 30s` is accepted everywhere.
//! Backends read their keys with [`SectionReader::seata_duration`] and
//! [`SectionReader::duration`] accordingly.
//!
//! # Who owns which keys
//!
//! This crate interprets the keys every part of a Seata client shares:
//! `applicationId`, `txServiceGroup`, `service.*` (the group mapping and grouplists),
//! `registry.type`, `registry.emptyProtection`, `registry.preferredNetworks` and
//! `config.type`/`config.dataType`. Every other key it keeps raw for the crate that owns
//! it, which reads its part with a [`SectionReader`] (its defaults, units, validation,
//! and the keys it does not know, reported when it reads them):
//!
//! - `registry.<type>.*` and `config.<type>.*`: each registry backend and centre
//!   ([`RegistryConfig::section`], [`CentreConfig::section`]);
//! - `transport.*`, `getty.*` and Seata's `client.*` namespaces ([`SEATA_PART_ROOTS`],
//!   [`SEATA_CLIENT_PARTS`]): the rpc-client (`transport.*`, `client.tm.*`), the
//!   balancers (`client.loadBalance.*`, seata-go's `getty.load-balance-type`, read in
//!   this crate's [`balancer`] module so the balancer crate needs no configuration), the
//!   raft registry (`client.metadataMaxAgeMs`), read with [`Config::part`];
//! - an application's own root (`gateway.*` for the example game gateway): declared on
//!   the loader with [`ConfigLoader::part_root`] and read with [`Config::part`] too.
//!
//! So adding a transport key touches the rpc-client only. Seata 1.0-1.3's
//! `registry.loadBalance` and `registry.loadBalanceVirtualNodes` are accepted and
//! ignored, as Seata 1.4+ does.
//!
//! Keys nobody knows are reported in [`Config::warnings`] (or by their owner's reader)
//! and logged with `tracing`, never silently dropped; the message names the key, never
//! its value. Seata keys that belong to the server or to other client parts (`store.*`,
//! `server.*`, `client.rm.*`, the Spring starter's switches…) are accepted without a
//! warning, and so are the keys Seata defines for each registry that meshline has no use
//! for (Redis pool keys such as `registry.redis.test-on-borrow`,
//! `registry.nacos.clientApplication`, `registry.nacos.slbPattern`...: each backend
//! lists them). A root that is neither Seata's nor declared is reported unknown, and
//! still kept in the parts (so a program that reads it finds it).
//!
//! # Environment variables
//!
//! `MESHLINE_` followed by the key's segments joined by a double underscore `__`; within a
//! segment, `_` is ignored for structural keys, and group / cluster names are used as
//! written (a dotted name may be written with its dots or with `__` in their place:
//! `MESHLINE_SERVICE__GROUPLIST__eu__west` is cluster `eu.west`):
//!
//! ```text
//! MESHLINE_REGISTRY__TYPE=etcd3
//! MESHLINE_REGISTRY__ETCD3__SERVER_ADDR=http://10.0.0.5:2379
//! MESHLINE_SERVICE__VGROUP_MAPPING__my_tx_group=prod
//! MESHLINE_SERVICE__GROUPLIST__prod=10.0.0.1:8091;10.0.0.2:8091
//! MESHLINE_TX_SERVICE_GROUP=my_tx_group
//! ```
//!
//! `MESHLINE_CONFIG` (a file path, read by the CLI) and `MESHLINE_LOG` (log filter) are
//! not configuration keys.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod backoff;
pub mod balancer;
pub mod centre;
mod error;
mod hocon;
mod keys;
mod loader;
mod provenance;
mod router;
mod secret;
mod section;
mod source;
mod suggest;
mod values;
pub use backoff::Backoff;
pub use error::ConfigError;
pub(crate) use keys::{Entry, norm};
pub use loader::ConfigLoader;
pub(crate) use loader::{log_warnings, parse_text};
pub use provenance::{Provenance, SourceRead};
use router::apply_all;
pub use secret::Secret;
pub use section::{Section, SectionReader};
pub use source::ConfigSource;
pub use suggest::nearest;
pub use values::{MAX_DURATION, parse_bytes, parse_duration, parse_duration_with_unit};

/// File formats [`ConfigLoader`] understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// YAML (Spring Boot, seata-go `seata:` trees, or our own).
    Yaml,
    /// TOML.
    Toml,
    /// JSON.
    Json,
    /// Java `.properties` with Seata's flat keys.
    Properties,
    /// HOCON (`.conf`, `.hocon`): Seata 1.x's `registry.conf` and `file.conf`, read as
    /// Seata's Typesafe Config reads them (see the module docs).
    Hocon,
}

impl Format {
    /// The format a file name's extension implies.
    pub fn from_path(path: &Path) -> Result<Format, ConfigError> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase())
            .unwrap_or_default();
        match ext.as_str() {
            "yaml" | "yml" => Ok(Format::Yaml),
            "toml" => Ok(Format::Toml),
            "json" => Ok(Format::Json),
            "properties" => Ok(Format::Properties),
            "conf" | "hocon" => Ok(Format::Hocon),
            _ => Err(ConfigError::Invalid(format!(
                "{}: unknown config file extension `{ext}`; use .yaml, .yml, .toml, .json, .properties or .conf",
                path.display()
            ))),
        }
    }
}

/// The whole meshline configuration. See the [module docs](self) for how it is loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `applicationId` / `application-id`: sent in Seata's RegisterTM/RM. Default `meshline`.
    pub application_id: String,
    /// `txServiceGroup` / `tx-service-group`. Default `default_tx_group`.
    pub tx_service_group: String,
    /// `registry.*`.
    pub registry: RegistryConfig,
    /// `service.*`: group mapping and file-registry grouplists.
    pub service: ServiceConfig,
    /// `config.*`: where Seata's configuration centre is (see [`crate::centre`]).
    pub centre: CentreConfig,
    /// The file this config was read from, if any (the file registry watches it).
    pub path: Option<PathBuf>,
    /// Keys that were not understood, one message each (also logged), with the nearest
    /// known key when there is one ("did you mean").
    pub warnings: Vec<String>,
    /// The sources read, in order, and where each key that took effect came from.
    pub provenance: Provenance,
    /// The keys of the client's other parts, kept raw for the crates that own them
    /// (`transport.*` for the rpc-client, `client.loadBalance.*` for the balancers,
    /// `client.tm.*`, an application's own root...): read one with [`Config::part`].
    /// Keyed by the whole path, segments normalised (lower case, `-` and `_` removed).
    pub parts: Section,
    /// Where this configuration came from, for whatever re-reads it ([`ConfigSource`]).
    pub(crate) source: ConfigSource,
}

/// Roots of Seata's client configuration whose keys other crates own: kept raw in
/// [`Config::parts`], never reported by this crate (their owners report the keys they
/// do not know when they read them: [`SectionReader::finish`]).
pub const SEATA_PART_ROOTS: &[&str] = &["transport", "getty"];

/// Seata's `client.*` namespaces (`client.loadBalance.*`, `client.tm.*`, Seata 2.x's
/// `client.metadataMaxAgeMs`...), kept raw in [`Config::parts`] for whichever crate
/// reads them; any other `client.*` key is reported unknown.
pub const SEATA_CLIENT_PARTS: &[&str] = &[
    "loadBalance",
    "tm",
    "rm",
    "undo",
    "lock",
    "log",
    "metadataMaxAgeMs",
];

/// `registry.*`: which registry, the keys every registry shares, and each registry
/// type's own keys, raw (see [`Section`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RegistryConfig {
    /// `registry.type`: a registry type name (Seata's, any case, or an alias; the
    /// `meshline` facade's table of types resolves it), or `custom` (with
    /// `registry.custom.name`). Default `file`.
    pub kind: String,
    /// `registry.empty-protection` (meshline): keep the last non-empty list when the
    /// registry reports none. Default `true`.
    pub empty_protection: bool,
    /// `registry.preferredNetworks`: address prefixes to prefer when choosing the local
    /// address to register (comma-separated).
    pub preferred_networks: Vec<String>,
    /// `registry.<type>.*`, by normalised type name (`etcd3`, `zk`, `custom`...): each
    /// backend reads its own with [`RegistryConfig::section`].
    pub sections: BTreeMap<String, Section>,
}

impl RegistryConfig {
    /// The keys of the section named by any of `names` (a type and its aliases, e.g.
    /// `["etcd3", "etcd"]`), merged; later names win where both set a key, so list the
    /// canonical name last. Empty when none was given.
    pub fn section(&self, names: &[&str]) -> Section {
        section::merged(&self.sections, names)
    }

    /// The section `name`, created when absent: for setting keys in code
    /// (`config.registry.section_mut("etcd3").set("ttl", "3s")`).
    pub fn section_mut(&mut self, name: &str) -> &mut Section {
        section::named_mut(&mut self.sections, name)
    }
}

/// `config.*`: Seata's configuration centre, where `service.vgroupMapping.*`,
/// grouplists and `client.*` keys can live instead of in the file (see
/// [`crate::centre`] for how it is read and followed).
#[derive(Debug, Clone, PartialEq)]
pub struct CentreConfig {
    /// `config.type`: `file` (the default) or a registry type that is also a centre
    /// (the `meshline` facade resolves it). Seata's `apollo`, `springCloudConfig` and
    /// `custom` are refused as not supported ([`crate::centre::UNSUPPORTED_KINDS`]).
    pub kind: String,
    /// `config.dataType`: the format of the single configuration blob (`properties`,
    /// `yaml`...). `None`: from the blob's name suffix, else `properties` (as Seata).
    pub data_type: Option<String>,
    /// `config.<type>.*`, by normalised type name, raw: each centre reads its own with
    /// [`CentreConfig::section`] (`config.nacos.serverAddr`, `config.file.name`...).
    pub sections: BTreeMap<String, Section>,
}

impl CentreConfig {
    /// The keys of the section of `config.<names>`, merged as
    /// [`RegistryConfig::section`] does.
    pub fn section(&self, names: &[&str]) -> Section {
        section::merged(&self.sections, names)
    }

    /// The section `config.<name>`, created when absent, for setting keys in code.
    pub fn section_mut(&mut self, name: &str) -> &mut Section {
        section::named_mut(&mut self.sections, name)
    }
}

/// `service.*`.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceConfig {
    /// `service.vgroupMapping.<group>=<cluster>`. Default `default_tx_group -> default`.
    pub vgroup_mapping: BTreeMap<String, String>,
    /// `service.<cluster>.grouplist=ip:port;ip:port`. Default `default -> 127.0.0.1:8091`.
    pub grouplist: BTreeMap<String, String>,
}

impl Default for Config {
    fn default() -> Self {
        let mut vgroup_mapping = BTreeMap::new();
        vgroup_mapping.insert("default_tx_group".to_string(), "default".to_string());
        let mut grouplist = BTreeMap::new();
        grouplist.insert("default".to_string(), "127.0.0.1:8091".to_string());
        Config {
            application_id: "meshline".into(),
            tx_service_group: "default_tx_group".into(),
            registry: RegistryConfig {
                kind: "file".into(),
                empty_protection: true,
                preferred_networks: Vec::new(),
                sections: BTreeMap::new(),
            },
            service: ServiceConfig {
                vgroup_mapping,
                grouplist,
            },
            centre: CentreConfig {
                kind: "file".into(),
                data_type: None,
                sections: BTreeMap::new(),
            },
            path: None,
            warnings: Vec::new(),
            provenance: Provenance::default(),
            parts: Section::with_prefix("", ""),
            source: ConfigSource::default(),
        }
    }
}

impl Config {
    /// Defaults, then `path` (if any) and the file its `config.file.name` names
    /// (`config.type=file`, Seata's `registry.conf` -> `file.conf`), then the process
    /// environment.
    ///
    /// A configuration centre on a server (`config.type=nacos`, `etcd3`, `zk`,
    /// `consul`) needs a client: this reads files and the environment only, and says
    /// so in [`Config::warnings`]; `meshline::centre::live_config` reads and follows
    /// the centre (the CLI and the example programs use it).
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let mut l = ConfigLoader::new();
        if let Some(p) = path {
            l = l.file(p);
        }
        // Read once: the second pass below parses no file again.
        let l = l.process_env().read_now()?;
        let base = l.clone().load_quietly()?;
        if let Some(refused) = crate::centre::unsupported_kind(&base.centre.kind) {
            return Err(refused);
        }
        match base.centre.kind.trim() {
            kind if crate::centre::is_file_kind(kind) => {
                crate::centre::with_file_centre(l, &base)?.load()
            }
            kind => {
                let mut cfg = l.load_quietly()?;
                let msg = format!(
                    "config.type={kind}: Config::load reads files and the environment only; \
                     the {kind} configuration centre is read by meshline::centre::live_config"
                );
                cfg.warnings.push(msg);
                loader::log_warnings(&cfg, None);
                Ok(cfg)
            }
        }
    }

    /// The keys under `prefix` (a dotted path, any spelling: `transport`,
    /// `client.loadBalance`, `gateway`), relative to it, for the crate that owns them
    /// to read with [`Section::reader`]. Empty when none was given.
    pub fn part(&self, prefix: &str) -> Section {
        self.parts.sub(prefix)
    }

    /// Sets one key (any accepted spelling, dotted: `transport.maxFrameLength`) in code,
    /// as an explicit override: routed as a loaded key is, so it lands where a file's
    /// would (a field, a registry section, a part).
    ///
    /// The key is recorded in [`Config::source`], so a re-reader (the file registry
    /// following its sources) applies it again on top of what it reads.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let path = key.split('.').map(str::to_string).collect();
        let mut state = router::RouteState::default();
        apply_all(
            self,
            &mut state,
            vec![(path, value.to_string())],
            "override",
        )?;
        self.source.record_set(key, value);
        Ok(())
    }

    /// Where this configuration came from: a loader, a live configuration, or nothing
    /// to re-read ([`ConfigSource`]).
    pub fn source(&self) -> &ConfigSource {
        &self.source
    }

    /// Defaults, then `text` in `format` (no environment).
    pub fn from_text(text: &str, format: Format) -> Result<Config, ConfigError> {
        ConfigLoader::new().text(text, format).load()
    }

    /// The grouplist of `cluster`, parsed Seata's way (`;`-separated, blanks skipped).
    pub fn grouplist(&self, cluster: &str) -> Option<Vec<&str>> {
        self.service
            .grouplist
            .get(cluster)
            .map(|g| split_grouplist(g))
    }
}

/// Splits a Seata grouplist (`a:1;b:2`) into addresses; white space and empty entries are
/// skipped. Commas are accepted as separators too (a common mistake in hand-written files).
pub fn split_grouplist(text: &str) -> Vec<&str> {
    text.split([';', ','])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod hardening_tests;
#[cfg(test)]
mod seata_keys_tests;
#[cfg(test)]
mod tests;
