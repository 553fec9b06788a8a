//! Small helpers shared by the backends of this crate.

use meshline_registry_core::{Config, EmptyProtection};

/// The empty-list policy configured by `registry.empty-protection`.
pub(crate) fn empty_policy(config: &Config) -> EmptyProtection {
    if config.registry.empty_protection {
        EmptyProtection::Protect
    } else {
        EmptyProtection::Apply
    }
}

/// Splits a `host:port[,host:port...]` list (`;` accepted too), trimming blanks.
pub(crate) fn split_addrs(text: &str) -> Vec<String> {
    text.split([',', ';'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}
