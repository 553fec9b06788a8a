//! [`ConfigLoader`]: the sources (files in each format, environment variables,
//! overrides) and how a text becomes flat `(path, value)` entries.

use std::path::PathBuf;

use super::keys::Entry;
use super::router::RouteState;
use super::{Config, Format, apply_all};
use crate::ConfigError;

#[derive(Clone)]
enum Source {
    File(PathBuf),
    /// A file already read and parsed ([`ConfigLoader::read_now`]).
    Read(PathBuf, Vec<Entry>),
    Text(String, Format),
    Env(Vec<(String, String)>),
    ProcessEnv,
    Set(String, String),
}

/// Builds a [`Config`] from several sources, later ones overriding earlier ones.
///
/// Cloning a loader clones its list of sources (nothing is read until
/// [`load`](Self::load)); a configuration centre re-runs a clone each time the centre's
/// keys change ([`crate::centre`]).
#[derive(Default, Clone)]
pub struct ConfigLoader {
    sources: Vec<Source>,
    /// Application roots declared with [`part_root`](Self::part_root), normalised.
    roots: Vec<String>,
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

    /// Adds a file after the files and texts added so far but before any environment
    /// or override source: Seata's `config.file.name` (see [`crate::centre`]), which
    /// the environment must still be able to override.
    pub fn file_before_env(mut self, path: impl Into<PathBuf>) -> Self {
        let at = self
            .sources
            .iter()
            .position(|s| matches!(s, Source::Env(_) | Source::ProcessEnv | Source::Set(..)))
            .unwrap_or(self.sources.len());
        self.sources.insert(at, Source::File(path.into()));
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

    /// Declares `root` (`gateway`) an application's own part of the configuration: its
    /// keys (from files, the centre, `MESHLINE_<ROOT>__*` variables) are kept for the
    /// application to read with [`Config::part`] and not reported unknown here; the
    /// application's reader reports the ones it does not know.
    pub fn part_root(mut self, root: &str) -> Self {
        let n = super::norm(root.trim());
        if !self.roots.contains(&n) {
            self.roots.push(n);
        }
        self
    }

    /// Sets one key (any accepted spelling, dotted: `registry.type`).
    pub fn set(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.sources.push(Source::Set(key.into(), value.into()));
        self
    }

    /// Reads and parses every file now, and takes a snapshot of the process
    /// environment, so that loading this loader (or a clone) again reads no file: what
    /// a configuration centre does on every change, and a first pass that only learns
    /// where to look next. A file that cannot be read is an error here.
    pub fn read_now(self) -> Result<ConfigLoader, ConfigError> {
        let sources = self
            .sources
            .into_iter()
            .map(|s| match s {
                Source::File(path) => read_file(&path).map(|entries| Source::Read(path, entries)),
                Source::ProcessEnv => Ok(Source::Env(utf8_vars(std::env::vars_os()))),
                other => Ok(other),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ConfigLoader {
            sources,
            roots: self.roots,
        })
    }

    /// The files this loader reads, in order (read already or not): what a follower of
    /// the configuration polls ([`crate::centre::LiveConfig::files`]).
    pub fn files(&self) -> Vec<PathBuf> {
        self.sources
            .iter()
            .filter_map(|s| match s {
                Source::File(p) | Source::Read(p, _) => Some(p.clone()),
                _ => None,
            })
            .collect()
    }

    /// Reads and parses the file at `path` again (every source naming it), keeping the
    /// other sources as they are. A file that cannot be read or parsed is an error, and
    /// the loader is unchanged.
    pub fn reread(&mut self, path: &std::path::Path) -> Result<(), ConfigError> {
        let entries = read_file(path)?;
        for s in &mut self.sources {
            if let Source::File(p) | Source::Read(p, _) = s
                && p == path
            {
                *s = Source::Read(p.clone(), entries.clone());
            }
        }
        Ok(())
    }

    /// Reads every source and builds the config; each of its [`Config::warnings`] is
    /// also logged.
    pub fn load(self) -> Result<Config, ConfigError> {
        let cfg = self.load_with_centre(None)?;
        log_warnings(&cfg, None);
        Ok(cfg)
    }

    /// [`load`](Self::load) without logging the warnings: for a caller that reads the
    /// sources once to learn where to look next (`config.type`), then loads again.
    pub fn load_quietly(self) -> Result<Config, ConfigError> {
        self.load_with_centre(None)
    }

    /// [`load`](Self::load), with the entries a configuration centre gave applied after
    /// the files and texts and before the environment and overrides: a key in the
    /// centre wins over the same key in a file (as in Seata, where a `config.type`
    /// other than `file` makes the centre the source of `service.*` and `client.*`),
    /// and `MESHLINE_*` variables and explicit overrides still win over both.
    pub(crate) fn load_with_centre(
        self,
        centre: Option<(&[Entry], &str)>,
    ) -> Result<Config, ConfigError> {
        let mut cfg = Config {
            source: super::ConfigSource::loader(self.clone()),
            ..Config::default()
        };
        let mut centre = centre;
        let mut state = RouteState {
            declared_roots: self.roots,
        };
        for source in self.sources {
            if matches!(
                source,
                Source::Env(_) | Source::ProcessEnv | Source::Set(..)
            ) && let Some((entries, origin)) = centre.take()
            {
                apply_all(&mut cfg, &mut state, entries.to_vec(), origin)?;
            }
            match source {
                Source::File(path) => {
                    let entries = read_file(&path)?;
                    apply_all(&mut cfg, &mut state, entries, &path.display().to_string())?;
                    cfg.path = Some(path);
                }
                Source::Read(path, entries) => {
                    apply_all(&mut cfg, &mut state, entries, &path.display().to_string())?;
                    cfg.path = Some(path);
                }
                Source::Text(text, format) => {
                    let entries = parse_text(&text, format).map_err(ConfigError::Invalid)?;
                    apply_all(&mut cfg, &mut state, entries, "config text")?;
                }
                Source::Env(vars) => {
                    apply_all(&mut cfg, &mut state, env_entries(vars), "environment")?
                }
                Source::ProcessEnv => apply_all(
                    &mut cfg,
                    &mut state,
                    env_entries(utf8_vars(std::env::vars_os())),
                    "environment",
                )?,
                Source::Set(k, v) => {
                    let path = k.split('.').map(str::to_string).collect();
                    apply_all(&mut cfg, &mut state, vec![(path, v)], "override")?;
                }
            }
        }
        if let Some((entries, origin)) = centre {
            apply_all(&mut cfg, &mut state, entries.to_vec(), origin)?;
        }
        Ok(cfg)
    }
}

/// Logs the warnings of `cfg` that `before` did not have (all of them without
/// `before`), so a configuration rebuilt on every centre change repeats none.
pub(crate) fn log_warnings(cfg: &Config, before: Option<&Config>) {
    for w in &cfg.warnings {
        if before.is_none_or(|b| !b.warnings.contains(w)) {
            tracing::warn!("{w}");
        }
    }
}

/// Reads and parses the file at `path` by its extension's format.
fn read_file(path: &std::path::Path) -> Result<Vec<Entry>, ConfigError> {
    let format = Format::from_path(path)?;
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError::Invalid(format!("cannot read config file {}: {e}", path.display()))
    })?;
    match format {
        // Includes are relative to the file, as Typesafe Config does.
        Format::Hocon => super::hocon::parse(&text, path.parent()),
        _ => parse_text(&text, format),
    }
    .map_err(|e| ConfigError::Invalid(format!("{}: {e}", path.display())))
}

/// Parses a whole text into flat `(path, value)` entries.
pub(crate) fn parse_text(text: &str, format: Format) -> Result<Vec<Entry>, String> {
    match format {
        Format::Hocon => super::hocon::parse(text, None),
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

/// The UTF-8 variables of `vars`. `std::env::vars()` panics on the first variable
/// that is not UTF-8, anywhere in the environment; such a variable is skipped here, with
/// a warning (by name, lossy) when it looks like ours.
pub(crate) fn utf8_vars(
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Vec<(String, String)> {
    vars.into_iter()
        .filter_map(|(k, v)| match (k.into_string(), v.into_string()) {
            (Ok(k), Ok(v)) => Some((k, v)),
            (k, _) => {
                let name = match &k {
                    Ok(k) => k.clone(),
                    Err(k) => k.to_string_lossy().into_owned(),
                };
                if name.starts_with("MESHLINE_") {
                    tracing::warn!(
                        variable = %name,
                        "environment variable is not UTF-8; ignored"
                    );
                }
                None
            }
        })
        .collect()
}

pub(crate) fn env_entries<I: IntoIterator<Item = (String, String)>>(vars: I) -> Vec<Entry> {
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
