//! See [`ConfigSource`].

use std::sync::Weak;

use super::ConfigLoader;
use crate::Config;
use crate::centre::{LiveConfig, LiveShared};

/// [`ConfigSource`]: where a [`Config`] came from, so that whatever re-reads the
/// configuration later (the file registry) rebuilds it from the same sources as the
/// first load instead of from one file alone.
///
/// A configuration is built from files, a configuration centre, the environment and
/// overrides ([`ConfigLoader`]). A re-reader that went back to the file alone dropped
/// the rest: a grouplist given by `MESHLINE_SERVICE__default__GROUPLIST` was replaced by
/// the built-in `127.0.0.1:8091` on the file registry's first poll, and a grouplist kept
/// in the centre was never read. Each [`Config`] therefore carries its source:
///
/// - built by a [`ConfigLoader`]: that loader (its files, environment and overrides),
///   which a re-reader follows with [`LiveConfig::files`];
/// - published by a [`LiveConfig`] (files and a centre, followed): a handle to it, so a
///   re-reader follows the same live configuration (and asks it for the keys it needs);
/// - anything else ([`Config::default`], a configuration assembled in code): fixed.
///
/// Keys set in code with [`Config::set`] are recorded too, and applied again on top of
/// every rebuild. A field changed directly is not: change a configuration through
/// [`Config::set`] when something may re-read it.
///
/// Never part of a configuration's equality: two configurations with the same values
/// are equal wherever they came from.
#[derive(Clone, Default)]
pub struct ConfigSource {
    origin: Origin,
    sets: Vec<(String, String)>,
}

#[derive(Clone, Default)]
enum Origin {
    #[default]
    Fixed,
    Loader(Box<ConfigLoader>),
    /// Weak: the live configuration's channel holds configurations that hold this. The
    /// loader of a live configuration without a centre, to follow its files if the
    /// live configuration is dropped before the re-reader starts.
    Live(Weak<LiveShared>, Option<Box<ConfigLoader>>),
}

impl ConfigSource {
    pub(crate) fn loader(loader: ConfigLoader) -> ConfigSource {
        ConfigSource {
            origin: Origin::Loader(Box::new(loader)),
            sets: Vec::new(),
        }
    }

    pub(crate) fn live(shared: Weak<LiveShared>, files: Option<ConfigLoader>) -> ConfigSource {
        ConfigSource {
            origin: Origin::Live(shared, files.map(Box::new)),
            sets: Vec::new(),
        }
    }

    /// The loader this configuration was built by, when it was built by one; for a
    /// configuration published by a [`LiveConfig`] without a centre, that live
    /// configuration's loader (its files, environment and overrides). `None` for a
    /// centre's configuration: its files alone would drop the centre's keys.
    pub fn config_loader(&self) -> Option<&ConfigLoader> {
        match &self.origin {
            Origin::Loader(l) | Origin::Live(_, Some(l)) => Some(l),
            _ => None,
        }
    }

    /// The live configuration that published this configuration, while it is still
    /// held somewhere (a [`LiveConfig`] clone, a `meshline_registry_core::Discovery` built on it).
    pub fn live_config(&self) -> Option<LiveConfig> {
        match &self.origin {
            Origin::Live(w, _) => w.upgrade().map(LiveConfig::from_shared),
            _ => None,
        }
    }

    /// True when the configuration came from a [`LiveConfig`] (held or not).
    pub fn is_live(&self) -> bool {
        matches!(self.origin, Origin::Live(..))
    }

    /// The keys set in code ([`Config::set`]), in order.
    pub fn sets(&self) -> &[(String, String)] {
        &self.sets
    }

    pub(crate) fn record_set(&mut self, key: &str, value: &str) {
        self.sets.push((key.to_string(), value.to_string()));
    }

    /// `rebuilt` (the same sources read again) with this configuration's keys set in
    /// code applied on top, and this source kept.
    pub fn reapply(&self, rebuilt: &Config) -> Config {
        let mut cfg = rebuilt.clone();
        for (k, v) in &self.sets {
            // Each key was accepted when first set; a failure here cannot be new.
            if let Err(e) = cfg.set(k, v) {
                tracing::warn!(key = %k, error = %e, "a key set in code no longer applies");
            }
        }
        cfg.source = self.clone();
        cfg
    }
}

impl PartialEq for ConfigSource {
    /// Always equal: where a configuration came from is not one of its values.
    fn eq(&self, _: &ConfigSource) -> bool {
        true
    }
}

impl std::fmt::Debug for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let origin = match &self.origin {
            Origin::Fixed => "fixed",
            Origin::Loader(_) => "loader",
            Origin::Live(..) => "live",
        };
        f.debug_struct("ConfigSource")
            .field("origin", &origin)
            .field("sets", &self.sets.len())
            .finish()
    }
}
