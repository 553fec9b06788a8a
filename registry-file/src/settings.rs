//! `registry.file.*`: what the file registry reads from its section.

use meshline_registry_core::Config;

/// The file registry's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct FileSettings {
    /// `name`: a separate file holding the `service.*` keys, relative to the main
    /// config file. Default: the main config file itself.
    pub name: Option<String>,
    /// Keys of the section this backend does not know (also logged).
    pub warnings: Vec<String>,
}

impl FileSettings {
    /// Reads `registry.file.*` from `config`.
    pub fn from_config(config: &Config) -> Self {
        let section = config.registry.section(&["file"]);
        let r = section.reader();
        let name = r.optional("name");
        FileSettings {
            name,
            warnings: r.finish(),
        }
    }
}
