//! Configs for tests, loaded as a user's would be: a backend's keys for its test
//! server, then a test's own keys on top.

use meshline_registry_core::Config;
use meshline_registry_core::config::ConfigLoader;

/// `keys`, then `extra` (a later key wins), loaded; panics naming the keys if the
/// config is refused.
pub fn config_of(keys: &[(&str, &str)], extra: &[(&str, &str)]) -> Config {
    let mut l = ConfigLoader::new();
    for (k, v) in keys.iter().chain(extra) {
        l = l.set(*k, *v);
    }
    l.load()
        .unwrap_or_else(|e| panic!("config {keys:?} + {extra:?}: {e}"))
}
