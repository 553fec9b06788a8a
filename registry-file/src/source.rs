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
//!   before its environment (which still wins).
//! - Anything else (a configuration assembled in code): its grouplists, fixed.
//!
//! Keys set in code with `Config::set` are applied again on top of every rebuild.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use meshline_registry_core::centre::LiveConfig;
use meshline_registry_core::config::{ConfigLoader, ConfigSource};
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

/// The registry's first grouplists, what it follows, and the file shown as followed.
pub(crate) struct Start {
    pub(crate) grouplists: BTreeMap<String, String>,
    pub(crate) follow: Follow,
    pub(crate) path: Option<PathBuf>,
    pub(crate) source: ConfigSource,
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
        return Ok(Start {
            grouplists: cfg.service.grouplist,
            follow: Follow::Files(loader),
            path: Some(path),
            source,
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
        grouplists: config.service.grouplist.clone(),
        follow,
        path: config.path.clone(),
        source,
    })
}

fn named(path: &Path, e: RegistryError) -> RegistryError {
    let cause = match e {
        RegistryError::Config(m) => m,
        other => other.to_string(),
    };
    RegistryError::Config(format!("registry.file.name `{}`: {cause}", path.display()))
}
