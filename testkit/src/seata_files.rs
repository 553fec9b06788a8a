//! Seata's shipped client configuration files (`registry.conf`, `file.conf`,
//! `application.yml`, `application.properties`, verbatim in
//! `registry-core/tests/fixtures/seata/`), loaded for tests: every backend checks that
//! its section of them reads without a warning and with Seata's values.

use meshline_registry_core::Config;
use meshline_registry_core::config::ConfigLoader;

/// The names of the shipped files a client configuration is read from.
pub const SEATA_CLIENT_FILES: &[&str] =
    &["registry.conf", "application.yml", "application.properties"];

/// The path of shipped file `name`.
pub fn seata_file(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../registry-core/tests/fixtures/seata")
        .join(name)
}

/// Shipped file `name` loaded alone (no environment); panics when it does not load,
/// which is a test failure.
pub fn seata_shipped(name: &str) -> Config {
    ConfigLoader::new()
        .file(seata_file(name))
        .load()
        .unwrap_or_else(|e| panic!("Seata's shipped {name} does not load: {e}"))
}

/// Each shipped client file read into a backend's settings with `from_config`, as
/// (file name, settings), for the check every backend makes of its section: the
/// settings' own fields differ, so the caller asserts on them. Panics, naming the
/// file, when one does not load or `from_config` refuses it (a test failure).
pub fn seata_shipped_settings<S, E: std::fmt::Display>(
    from_config: impl Fn(&Config) -> Result<S, E>,
) -> Vec<(&'static str, S)> {
    SEATA_CLIENT_FILES
        .iter()
        .map(|&name| {
            let s = from_config(&seata_shipped(name))
                .unwrap_or_else(|e| panic!("Seata's shipped {name} is refused: {e}"));
            (name, s)
        })
        .collect()
}
