//! One configuration type for every backend, loaded from the files Seata users already
//! have.
//!
//! # Sources and precedence
//!
//! Later sources override earlier ones:
//!
//! 1. Built-in defaults (Seata's, see the field docs): with no file at all,
//!    `registry.type=file`, `default_tx_group -> default -> 127.0.0.1:8091` works.
//! 2. A file: YAML (`.yaml`/`.yml`), TOML (`.toml`) or JSON (`.json`) read through the
//!    `config` crate, or Seata's flat Java `.properties`.
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
//! exactly as written. Bare numbers for durations are milliseconds (Seata's
//! convention: `sessionTimeout=6000`); text such as `10s` or `1m 30s` is also accepted.
//!
//! Keys nobody knows are reported in [`Config::warnings`] and logged with `tracing`,
//! never silently dropped. Seata keys that belong to the server or to other client parts
//! (`store.*`, `server.*`, `client.rm.*`, `transport.threadFactory.*`…) are accepted
//! without a warning.
//!
//! # Environment variables
//!
//! `MESHLINE_` followed by the key's segments joined by a double underscore `__`; within a
//! segment, `_` is ignored for structural keys, and group / cluster names are used as
//! written:
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
use std::time::Duration;

use crate::RegistryError;

mod section;
pub use section::{Section, SectionReader};

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
}

impl Format {
    /// The format a file name's extension implies.
    pub fn from_path(path: &Path) -> Result<Format, RegistryError> {
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
            "conf" => Err(RegistryError::Config(format!(
                "{}: Seata's HOCON `.conf` files are not supported; write the same keys as a flat `.properties` file \
                 (registry.type=..., service.vgroupMapping.<group>=...)",
                path.display()
            ))),
            _ => Err(RegistryError::Config(format!(
                "{}: unknown config file extension `{ext}`; use .yaml, .yml, .toml, .json or .properties",
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
    /// `client.*`.
    pub client: ClientConfig,
    /// `transport.*`.
    pub transport: TransportConfig,
    /// The file this config was read from, if any (the file registry watches it).
    pub path: Option<PathBuf>,
    /// Keys that were not understood, one message each (also logged).
    pub warnings: Vec<String>,
    /// Application sections meshline reads but does not interpret, kept raw: every key
    /// under one of [`APP_SECTIONS`] (from files and `MESHLINE_*` variables alike, so an
    /// application's settings share the loader and the env overrides), keyed by the
    /// section-relative path with segments normalised (lower case, `-` and `_` removed)
    /// and joined by `.`; e.g. `gateway.modules.chat.cluster` is
    /// `app_sections["gateway"]["modules.chat.cluster"]`.
    pub app_sections: BTreeMap<String, BTreeMap<String, String>>,
}

/// Top-level sections kept raw for the application in [`Config::app_sections`] instead
/// of being reported as unknown keys: `gateway` (the example game gateway's settings).
pub const APP_SECTIONS: &[&str] = &["gateway"];

/// `registry.*`: which registry, the keys every registry shares, and each registry
/// type's own keys, raw (see [`Section`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RegistryConfig {
    /// `registry.type`: `file`, `nacos`, `etcd3` (`etcd`), `zk` (`zookeeper`), `redis`,
    /// `consul`, `eureka`, or `custom` (with `registry.custom.name`). Default `file`.
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
        let mut out = Section::new(names.last().copied().unwrap_or_default());
        for n in names {
            if let Some(s) = self.sections.get(&norm(n)) {
                out.merge(s);
            }
        }
        out
    }

    /// The section `name`, created when absent: for setting keys in code
    /// (`config.registry.section_mut("etcd3").set("ttl", "3s")`).
    pub fn section_mut(&mut self, name: &str) -> &mut Section {
        self.sections
            .entry(norm(name))
            .or_insert_with(|| Section::new(name))
    }

    /// The empty-list policy `registry.empty-protection` asks for.
    pub fn empty_policy(&self) -> crate::EmptyProtection {
        if self.empty_protection {
            crate::EmptyProtection::Protect
        } else {
            crate::EmptyProtection::Apply
        }
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

/// `client.*`.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConfig {
    /// `client.loadBalance.*`.
    pub load_balance: LoadBalanceConfig,
}

/// `client.loadBalance.*`.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadBalanceConfig {
    /// `client.loadBalance.type` (seata-go: `getty.load-balance-type`). Default `XID`.
    pub kind: String,
    /// `client.loadBalance.virtualNodes`. Default 10.
    pub virtual_nodes: u32,
}

/// `transport.*`.
#[derive(Debug, Clone, PartialEq)]
pub struct TransportConfig {
    /// `transport.heartbeat`. Default `true`.
    pub heartbeat: bool,
    /// `transport.serialization`. Default `seata`.
    pub serialization: String,
    /// `transport.compressor`. Default `none`.
    pub compressor: String,
    /// `transport.rpcTmRequestTimeout`. Default 30000 ms.
    pub rpc_tm_request_timeout: Duration,
    /// `transport.rpcRmRequestTimeout`. Default 15000 ms.
    pub rpc_rm_request_timeout: Duration,
    /// `transport.rpcTcRequestTimeout`. Default 15000 ms.
    pub rpc_tc_request_timeout: Duration,
    /// `transport.enableTmClientBatchSendRequest`. Default `false`.
    pub enable_tm_client_batch_send_request: bool,
    /// `transport.enableRmClientBatchSendRequest`. Default `true`.
    pub enable_rm_client_batch_send_request: bool,
    /// `transport.maxFrameLength` (meshline): largest RPC frame, in bytes (`8MiB`,
    /// `65536`). `None`: the rpc-client's default (8 MiB, as Seata).
    pub max_frame_length: Option<usize>,
    /// `transport.requestQueueBytes` (meshline): bytes of requests queued per connection.
    pub request_queue_bytes: Option<usize>,
    /// `transport.responseQueueBytes` (meshline): bytes of answers queued per connection
    /// before a peer that does not read them is disconnected.
    pub response_queue_bytes: Option<usize>,
    /// `transport.writeTimeout` (meshline, a unit is required: `10s`): close a connection
    /// whose socket accepts nothing for this long; `0s` disables.
    pub write_timeout: Option<Duration>,
    /// `transport.maxInboundRequests` (meshline): requests from the peer handled at once
    /// per connection; at the cap the connection stops reading.
    pub max_inbound_requests: Option<usize>,
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
            client: ClientConfig {
                load_balance: LoadBalanceConfig {
                    kind: "XID".into(),
                    virtual_nodes: 10,
                },
            },
            transport: TransportConfig {
                heartbeat: true,
                serialization: "seata".into(),
                compressor: "none".into(),
                rpc_tm_request_timeout: Duration::from_millis(30000),
                rpc_rm_request_timeout: Duration::from_millis(15000),
                rpc_tc_request_timeout: Duration::from_millis(15000),
                enable_tm_client_batch_send_request: false,
                enable_rm_client_batch_send_request: true,
                max_frame_length: None,
                request_queue_bytes: None,
                response_queue_bytes: None,
                write_timeout: None,
                max_inbound_requests: None,
            },
            path: None,
            warnings: Vec::new(),
            app_sections: BTreeMap::new(),
        }
    }
}

impl Config {
    /// Defaults, then `path` (if any), then the process environment.
    pub fn load(path: Option<&Path>) -> Result<Config, RegistryError> {
        let mut l = ConfigLoader::new();
        if let Some(p) = path {
            l = l.file(p);
        }
        l.process_env().load()
    }

    /// Defaults, then `text` in `format` (no environment).
    pub fn from_text(text: &str, format: Format) -> Result<Config, RegistryError> {
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

enum Source {
    File(PathBuf),
    Text(String, Format),
    Env(Vec<(String, String)>),
    ProcessEnv,
    Set(String, String),
}

/// Builds a [`Config`] from several sources, later ones overriding earlier ones.
#[derive(Default)]
pub struct ConfigLoader {
    sources: Vec<Source>,
}

impl ConfigLoader {
    /// A loader with only the defaults.
    pub fn new() -> Self {
        ConfigLoader::default()
    }

    /// Adds a file; the format comes from its extension.
    pub fn file(mut self, path: impl Into<PathBuf>) -> Self {
        self.sources.push(Source::File(path.into()));
        self
    }

    /// Adds text in a given format.
    pub fn text(mut self, text: impl Into<String>, format: Format) -> Self {
        self.sources.push(Source::Text(text.into(), format));
        self
    }

    /// Adds environment variables from an explicit list (`MESHLINE_*` are used).
    pub fn env_vars<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.sources.push(Source::Env(
            vars.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        ));
        self
    }

    /// Adds the process environment (`MESHLINE_*` variables).
    pub fn process_env(mut self) -> Self {
        self.sources.push(Source::ProcessEnv);
        self
    }

    /// Sets one key (any accepted spelling, dotted: `registry.type`).
    pub fn set(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.sources.push(Source::Set(key.into(), value.into()));
        self
    }

    /// Reads every source and builds the config.
    pub fn load(self) -> Result<Config, RegistryError> {
        let mut cfg = Config::default();
        for source in self.sources {
            match source {
                Source::File(path) => {
                    let format = Format::from_path(&path)?;
                    let text = std::fs::read_to_string(&path).map_err(|e| {
                        RegistryError::Config(format!(
                            "cannot read config file {}: {e}",
                            path.display()
                        ))
                    })?;
                    let entries = parse_text(&text, format)
                        .map_err(|e| RegistryError::Config(format!("{}: {e}", path.display())))?;
                    apply_all(&mut cfg, entries, &path.display().to_string())?;
                    cfg.path = Some(path);
                }
                Source::Text(text, format) => {
                    let entries = parse_text(&text, format).map_err(RegistryError::Config)?;
                    apply_all(&mut cfg, entries, "config text")?;
                }
                Source::Env(vars) => apply_all(&mut cfg, env_entries(vars), "environment")?,
                Source::ProcessEnv => {
                    apply_all(&mut cfg, env_entries(std::env::vars()), "environment")?
                }
                Source::Set(k, v) => {
                    let path = k.split('.').map(str::to_string).collect();
                    apply_all(&mut cfg, vec![(path, v)], "override")?;
                }
            }
        }
        for w in &cfg.warnings {
            tracing::warn!("{w}");
        }
        Ok(cfg)
    }
}

type Entry = (Vec<String>, String);

/// Parses a whole text into flat `(path, value)` entries.
pub(crate) fn parse_text(text: &str, format: Format) -> Result<Vec<Entry>, String> {
    match format {
        Format::Properties => {
            let map = java_properties::read(text.as_bytes())
                .map_err(|e| format!("bad .properties: {e}"))?;
            let mut v: Vec<Entry> = map
                .into_iter()
                .map(|(k, v)| (k.split('.').map(str::to_string).collect(), v))
                .collect();
            v.sort();
            Ok(v)
        }
        Format::Yaml | Format::Toml | Format::Json => {
            let ff = match format {
                Format::Yaml => config::FileFormat::Yaml,
                Format::Toml => config::FileFormat::Toml,
                _ => config::FileFormat::Json,
            };
            if text.trim().is_empty() {
                return Ok(Vec::new());
            }
            let built = config::Config::builder()
                .add_source(config::File::from_str(text, ff))
                .build()
                .map_err(|e| format!("bad {format:?}: {e}"))?;
            let table =
                config::Source::collect(&built).map_err(|e| format!("bad {format:?}: {e}"))?;
            let mut out = Vec::new();
            for (k, v) in table {
                let mut path: Vec<String> = k.split('.').map(str::to_string).collect();
                flatten(&mut path, &v, &mut out);
            }
            out.sort();
            Ok(out)
        }
    }
}

fn flatten(path: &mut Vec<String>, v: &config::Value, out: &mut Vec<Entry>) {
    use config::ValueKind as K;
    let scalar = match &v.kind {
        K::Table(t) => {
            for (k, child) in t {
                let n = path.len();
                path.extend(k.split('.').map(str::to_string));
                flatten(path, child, out);
                path.truncate(n);
            }
            return;
        }
        K::Array(items) => items
            .iter()
            .filter_map(|i| match &i.kind {
                K::Table(_) | K::Array(_) => None,
                _ => Some(i.to_string()),
            })
            .collect::<Vec<_>>()
            .join(","),
        K::Nil => String::new(),
        _ => v.to_string(),
    };
    out.push((path.clone(), scalar));
}

fn env_entries<I: IntoIterator<Item = (String, String)>>(vars: I) -> Vec<Entry> {
    let mut out: Vec<Entry> = vars
        .into_iter()
        .filter_map(|(k, v)| {
            let rest = k.strip_prefix("MESHLINE_")?;
            if rest == "CONFIG" || rest == "LOG" || rest.is_empty() {
                return None;
            }
            Some((rest.split("__").map(str::to_string).collect(), v))
        })
        .collect();
    out.sort();
    out
}

/// Structural segment normalisation: lower-case, `-` and `_` removed.
fn norm(s: &str) -> String {
    s.chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

fn apply_all(cfg: &mut Config, entries: Vec<Entry>, origin: &str) -> Result<(), RegistryError> {
    for (path, value) in entries {
        let shown = path.join(".");
        match apply(cfg, &path, &value, origin) {
            Ok(Applied::Used) | Ok(Applied::Ignored) => {}
            Ok(Applied::Unknown) => cfg.warnings.push(format!(
                "{origin}: unknown config key `{shown}` (value `{value}`) ignored"
            )),
            Err(reason) => {
                return Err(RegistryError::Config(format!(
                    "{origin}: key `{shown}` has invalid value `{value}`: {reason}"
                )));
            }
        }
    }
    Ok(())
}

enum Applied {
    Used,
    /// A Seata key for another part of Seata; accepted silently.
    Ignored,
    Unknown,
}

/// Top-level Seata / Spring / seata-go sections that are not ours.
const IGNORED_TOP: &[&str] = &[
    "store",
    "server",
    "log",
    "metrics",
    "tcc",
    "saga",
    "config",
    "security",
    "console",
    "spring",
    "tm",
    "rm",
    "undo",
    "lock",
    "enabled",
    "datasourceproxymode",
    "enableautodatasourceproxy",
    "usejdkproxy",
    "scanpackages",
    "excludesforautoproxying",
    "accesskey",
    "secretkey",
    "sqlparsertype",
    "logging",
    "management",
];
const IGNORED_CLIENT: &[&str] = &["rm", "tm", "undo", "lock", "log"];
const IGNORED_SERVICE: &[&str] = &[
    "disableglobaltransaction",
    "enabledegrade",
    "degradecheck",
    "degradecheckperiod",
    "degradecheckallowtimes",
];
const IGNORED_TRANSPORT: &[&str] = &[
    "type",
    "server",
    "threadfactory",
    "shutdown",
    "enableclientbatchsendrequest",
    "enabletcserverbatchsendresponse",
    "rpctimeout",
    "protocol",
    "rpctmclientbatchsendrequest",
];
const IGNORED_REGISTRY: &[&str] = &["raft", "seata", "sofa", "namingserver", "metadata"];

fn apply(cfg: &mut Config, path: &[String], v: &str, origin: &str) -> Result<Applied, String> {
    let mut p: Vec<String> = path.iter().map(|s| s.trim().to_string()).collect();
    if p.first().map(|s| norm(s) == "seata").unwrap_or(false) && p.len() > 1 {
        p.remove(0);
    }
    let n: Vec<String> = p.iter().map(|s| norm(s)).collect();
    let ns: Vec<&str> = n.iter().map(String::as_str).collect();
    use Applied::*;
    if let [section, rest @ ..] = ns.as_slice()
        && !rest.is_empty()
        && APP_SECTIONS.contains(section)
    {
        cfg.app_sections
            .entry(section.to_string())
            .or_default()
            .insert(rest.join("."), v.trim().to_string());
        return Ok(Used);
    }
    Ok(match ns.as_slice() {
        ["applicationid"] => {
            cfg.application_id = v.trim().to_string();
            Used
        }
        ["txservicegroup"] => {
            cfg.tx_service_group = nonempty(v)?;
            Used
        }
        // ---- service.*
        ["service", "vgroupmapping", _] => {
            cfg.service
                .vgroup_mapping
                .insert(p[2].clone(), v.trim().to_string());
            Used
        }
        ["service", "grouplist", _] => {
            cfg.service
                .grouplist
                .insert(p[2].clone(), v.trim().to_string());
            Used
        }
        ["service", _, "grouplist"] => {
            cfg.service
                .grouplist
                .insert(p[1].clone(), v.trim().to_string());
            Used
        }
        ["service", k, ..] if IGNORED_SERVICE.contains(k) => Ignored,
        // ---- client.* / seata-go getty.*
        ["client", "loadbalance", "type"] | ["getty", "loadbalancetype"] => {
            cfg.client.load_balance.kind = nonempty(v)?;
            Used
        }
        ["client", "loadbalance", "virtualnodes"] => {
            cfg.client.load_balance.virtual_nodes = parse_num(v)?;
            Used
        }
        ["client", k, ..] if IGNORED_CLIENT.contains(k) => Ignored,
        ["getty", ..] => Ignored,
        // ---- transport.*
        ["transport", k] => match *k {
            "heartbeat" => {
                cfg.transport.heartbeat = parse_bool(v)?;
                Used
            }
            "serialization" => {
                cfg.transport.serialization = nonempty(v)?;
                Used
            }
            "compressor" => {
                cfg.transport.compressor = nonempty(v)?;
                Used
            }
            "rpctmrequesttimeout" => {
                cfg.transport.rpc_tm_request_timeout = parse_duration(v)?;
                Used
            }
            "rpcrmrequesttimeout" => {
                cfg.transport.rpc_rm_request_timeout = parse_duration(v)?;
                Used
            }
            "rpctcrequesttimeout" => {
                cfg.transport.rpc_tc_request_timeout = parse_duration(v)?;
                Used
            }
            "enabletmclientbatchsendrequest" => {
                cfg.transport.enable_tm_client_batch_send_request = parse_bool(v)?;
                Used
            }
            "enablermclientbatchsendrequest" => {
                cfg.transport.enable_rm_client_batch_send_request = parse_bool(v)?;
                Used
            }
            "maxframelength" => {
                cfg.transport.max_frame_length = Some(parse_bytes(v)?);
                Used
            }
            "requestqueuebytes" => {
                cfg.transport.request_queue_bytes = Some(parse_bytes(v)?);
                Used
            }
            "responsequeuebytes" => {
                cfg.transport.response_queue_bytes = Some(parse_bytes(v)?);
                Used
            }
            "writetimeout" => {
                cfg.transport.write_timeout = Some(parse_duration_with_unit(v)?);
                Used
            }
            "maxinboundrequests" => {
                let n: usize = parse_num(v)?;
                if n == 0 {
                    return Err("must be at least 1".into());
                }
                cfg.transport.max_inbound_requests = Some(n);
                Used
            }
            k if IGNORED_TRANSPORT.contains(&k) || k.starts_with("enable") => Ignored,
            _ => Unknown,
        },
        ["transport", k, ..] if IGNORED_TRANSPORT.contains(k) => Ignored,
        // ---- registry.*
        ["registry", "type"] => {
            cfg.registry.kind = nonempty(v)?;
            Used
        }
        ["registry", "emptyprotection"] => {
            cfg.registry.empty_protection = parse_bool(v)?;
            Used
        }
        ["registry", "preferrednetworks"] => {
            cfg.registry.preferred_networks = split_list(v);
            Used
        }
        ["registry", b, ..] if IGNORED_REGISTRY.contains(b) => Ignored,
        // Seata's per-backend heartbeat knobs (registry.<type>.heartbeat-period...).
        ["registry", _, k] if k.starts_with("heartbeat") => Ignored,
        // Each registry type's own keys, raw, for its backend to read.
        ["registry", section, rest @ ..] if !rest.is_empty() => {
            let shown = p.join(".");
            cfg.registry
                .sections
                .entry(section.to_string())
                .or_insert_with(|| Section::new(p[1].trim()))
                .insert(&shown, &p[2..].join("."), v.to_string(), origin);
            Used
        }
        [top, ..] if IGNORED_TOP.contains(top) => Ignored,
        _ => Unknown,
    })
}

fn nonempty(v: &str) -> Result<String, String> {
    let t = v.trim();
    if t.is_empty() {
        Err("must not be empty".into())
    } else {
        Ok(t.to_string())
    }
}

fn split_list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn parse_bool(v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" => Ok(false),
        _ => Err("expected true or false".into()),
    }
}

fn parse_num<T: std::str::FromStr>(v: &str) -> Result<T, String> {
    v.trim().parse().map_err(|_| {
        format!(
            "expected a whole number in range for {}",
            std::any::type_name::<T>()
        )
    })
}

/// Bare numbers are milliseconds; otherwise humantime text (`10s`, `1m 30s`, `500ms`).
pub fn parse_duration(v: &str) -> Result<Duration, String> {
    let t = v.trim();
    if let Ok(ms) = t.parse::<u64>() {
        return Ok(Duration::from_millis(ms));
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("expected milliseconds or a duration like `10s`: {e}"))
}

/// A duration that must carry its unit (`10s`, `500ms`): for keys only meshline has,
/// where a bare number would be ambiguous.
pub fn parse_duration_with_unit(v: &str) -> Result<Duration, String> {
    let t = v.trim();
    if t.parse::<u64>().is_ok() {
        return Err(format!(
            "`{t}` has no unit: write it with one, e.g. `{t}ms` or `{t}s`"
        ));
    }
    humantime::parse_duration(t).map_err(|e| format!("expected a duration like `10s`: {e}"))
}

/// A byte size: a bare number of bytes, or a number with `B`, `KiB`/`KB`/`K`,
/// `MiB`/`MB`/`M` or `GiB`/`GB`/`G` (all powers of 1024, any case), e.g. `8MiB`. Zero
/// is refused.
pub fn parse_bytes(v: &str) -> Result<usize, String> {
    let t = v.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("expected a size like `8MiB` or `65536`, got `{t}`"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => {
            return Err(format!(
                "unknown size unit `{other}` (use B, KiB, MiB or GiB)"
            ));
        }
    };
    let bytes = n
        .checked_mul(mult)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| format!("size `{t}` is too large"))?;
    if bytes == 0 {
        return Err("must be larger than 0".into());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests;
