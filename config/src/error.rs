//! [`ConfigError`]: what reading a configuration can fail with.

/// A configuration that cannot be read: an invalid value or file, or a config centre
/// that cannot be reached. `meshline_registry_core::RegistryError` converts from it
/// (an invalid configuration is its `Config` variant; a centre's own error comes back
/// as it was), so a caller of both keeps one error type.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The configuration is invalid (a bad value, an unreadable file...); the text
    /// names the key or file, never a secret's value.
    #[error("configuration error: {0}")]
    Invalid(String),
    /// A config centre could not be read or followed: its client's error.
    #[error(transparent)]
    Centre(Box<dyn std::error::Error + Send + Sync>),
}

impl ConfigError {
    /// A config centre's own error (its client's), kept whole.
    pub fn centre(e: impl std::error::Error + Send + Sync + 'static) -> ConfigError {
        ConfigError::Centre(Box::new(e))
    }
}
