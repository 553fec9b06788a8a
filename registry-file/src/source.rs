//! Where the file registry's grouplists come from: the same sources as the
//! configuration it was built from ([`ConfigSource`]), never one file read alone.
//!
//! - A configuration published by a live configuration (`meshline::centre::live_config`:
//!   files and Seata's configuration centre): the registry follows that live
//!   configuration, and a cluster it does not know is asked of the centre
//!   ([`LiveConfig::ask_cluster`]), as Seata's `FileRegistryServiceImpl` reads
//!   `service.<cluster>.grouplist` through `ConfigurationFactory.getInstance()`.
//! - A configuration built by a loader (`Config::load`, [`ConfigLoader::load`]): the
//!   registry follows that loader's files, rebuilding from all of its sources (the
//!   environment as read at load, the overrides), so a grouplist given by
//!   `MESHLINE_SERVICE__<cluster>__GROUPLIST` survives every poll and edit.
//! - `registry.file.name`: that file, read after the configuration's own files and
//!   before its environment (which still wins). With a configuration centre
//!   (`config.type`), the centre comes first and the file's grouplists are behind it,
//!   for the clusters the centre does not have ([`layered`]).
//! - Anything else (a configuration assembled in code): its grouplists, fixed.
//!
//! Keys set in code with `Config::set` are applied again on top of every rebuild.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use meshline_registry_core::centre::LiveConfig;
use meshline_registry_core::config::{ConfigError, ConfigLoader, ConfigSource};
use meshline_registry_core::{Config, RegistryError};

use crate::settings::FileSettings;

/// What the registry follows.
pub(crate) enum Follow {
    /// Nothing: the grouplists are fixed.
    Nothing,
    /// A loader whose files are to be followed once a watch starts (following needs a
    /// runtime, and a registry that is only looked up needs none).
    Files(ConfigLoader),
    /// A live configuration.
    Live(LiveConfig),
}

/// The registry's first configuration, what it follows, and the file shown as followed.
pub(crate) struct Start {
    pub(crate) config: Config,
    pub(crate) follow: Follow,
    pub(crate) path: Option<PathBuf>,
    pub(crate) source: ConfigSource,
    /// `registry.file.name`'s grouplists under a configuration centre's: read once,
    /// used for each cluster the centre and the configuration's own sources do not
    /// give (see [`layered`]).
    pub(crate) fallback: Option<Fallback>,
}

/// Where a cluster's grouplist came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A source of the configuration (a file, the environment, the centre), named as
    /// its provenance names it.
    Config(String),
    /// `registry.file.name`, behind a configuration centre.
    NamedFile(PathBuf),
    /// No source: the configuration's built-in default (Seata's
    /// `default -> 127.0.0.1:8091`).
    BuiltIn,
    /// Given in code ([`FileRegistry::from_grouplists`](crate::FileRegistry::from_grouplists)).
    Code,
}

impl Origin {
    /// Whether a configuration centre, when there is one, comes before it.
    pub(crate) fn yields_to_the_centre(&self) -> bool {
        matches!(self, Origin::NamedFile(_) | Origin::BuiltIn)
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Config(o) => f.write_str(o),
            Origin::NamedFile(p) => write!(f, "{}", p.display()),
            Origin::BuiltIn => f.write_str("the built-in default"),
            Origin::Code => f.write_str("the grouplists given in code"),
        }
    }
}

/// The grouplists of `registry.file.name`, when a configuration centre comes first.
pub(crate) struct Fallback {
    pub(crate) path: PathBuf,
    pub(crate) grouplists: BTreeMap<String, String>,
}

/// Each cluster's grouplist and where it came from: the configuration's own sources
/// and its centre first (a key with an origin in [`Config::provenance`]), then
/// `fallback` (the named file), then the configuration's built-in default. That is
/// Seata's order: `FileRegistryServiceImpl` reads through `ConfigurationFactory`'s
/// instance, the centre when `config.type` names one, and the file stays behind it.
pub(crate) fn layered(
    config: &Config,
    fallback: Option<&Fallback>,
) -> (BTreeMap<String, String>, BTreeMap<String, Origin>) {
    let mut lists = BTreeMap::new();
    let mut origins = BTreeMap::new();
    let origin_in_config = |cluster: &str| {
        let p = &config.provenance;
        p.origin(&format!("service.{cluster}.grouplist"))
            .or_else(|| p.origin(&format!("service.grouplist.{cluster}")))
            .map(str::to_string)
    };
    for (cluster, text) in &config.service.grouplist {
        if let Some(origin) = origin_in_config(cluster) {
            lists.insert(cluster.clone(), text.clone());
            origins.insert(cluster.clone(), Origin::Config(origin));
        }
    }
    if let Some(f) = fallback {
        for (cluster, text) in &f.grouplists {
            if !lists.contains_key(cluster) {
                lists.insert(cluster.clone(), text.clone());
                origins.insert(cluster.clone(), Origin::NamedFile(f.path.clone()));
            }
        }
    }
    for (cluster, text) in &config.service.grouplist {
        if !lists.contains_key(cluster) {
            lists.insert(cluster.clone(), text.clone());
            origins.insert(cluster.clone(), Origin::BuiltIn);
        }
    }
    (lists, origins)
}

/// Works out what a registry built from `config` reads and follows.
pub(crate) fn start(config: &Config) -> Result<Start, RegistryError> {
    let settings = FileSettings::from_config(config);
    let source = config.source().clone();
    if let Some(name) = &settings.name {
        let path = match &config.path {
            Some(main) => main.parent().unwrap_or_else(|| Path::new(".")).join(name),
            None => PathBuf::from(name),
        };
        // A name that cannot be read or parsed is an error naming it: falling back to
        // the main configuration's grouplists (often only the built-in default) would
        // send a misconfigured client to the wrong servers without a word.
        let base = source.config_loader().cloned().unwrap_or_default();
        let loader = base
            .file_before_env(&path)
            .read_now()
            .map_err(|e| named(&path, e))?;
        let cfg = loader.clone().load_quietly().map_err(|e| named(&path, e))?;
        let cfg = source.reapply(&cfg);
        // With a configuration centre, the centre comes first and the named file is
        // behind it (Seata's stock registry.conf names `file.conf` with any
        // `config.type`).
        if let Some(live) = source.live_config().filter(|l| l.centre().is_some()) {
            let fallback = Fallback {
                path: path.clone(),
                grouplists: cfg.service.grouplist,
            };
            return Ok(Start {
                config: source.reapply(&live.current()),
                follow: Follow::Live(live),
                path: Some(path),
                source,
                fallback: Some(fallback),
            });
        }
        return Ok(Start {
            config: cfg,
            follow: Follow::Files(loader),
            path: Some(path),
            source,
            fallback: None,
        });
    }
    let follow = match (source.live_config(), source.config_loader()) {
        (Some(live), _) => Follow::Live(live),
        (None, Some(loader)) if !loader.files().is_empty() => Follow::Files(loader.clone()),
        _ => {
            if source.is_live() {
                tracing::debug!(
                    "file registry: the live configuration this was read from is gone; \
                     its grouplists are kept as they are"
                );
            }
            Follow::Nothing
        }
    };
    Ok(Start {
        config: config.clone(),
        follow,
        path: config.path.clone(),
        source,
        fallback: None,
    })
}

fn named(path: &Path, e: ConfigError) -> RegistryError {
    let cause = match e {
        ConfigError::Invalid(m) => m,
        other => other.to_string(),
    };
    RegistryError::Config(format!("registry.file.name `{}`: {cause}", path.display()))
}
