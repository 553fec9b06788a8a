//! The one error type of registry operations.
//!
//! Every variant says what went wrong and, where there is one, what to do about it: a
//! missing mapping names the config key to set, a backend that is not compiled in names
//! the cargo feature to enable.

use std::time::Duration;

/// Why a registry operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Text that should have been an `host:port` address was not one.
    #[error("invalid address `{text}`: {reason}")]
    InvalidAddress {
        /// The text as given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A transaction service group has no `vgroupMapping` entry.
    #[error(
        "no cluster mapped for tx-service-group `{group}`: set `service.vgroupMapping.{group}=<cluster>` \
         (YAML: service.vgroup-mapping.{group})"
    )]
    MissingMapping {
        /// The tx-service-group that was looked up.
        group: String,
    },

    /// The file registry was asked for a cluster that has no grouplist.
    #[error(
        "no grouplist for cluster `{cluster}`: set `service.{cluster}.grouplist=ip:port;ip:port` \
         (YAML: service.grouplist.{cluster})"
    )]
    MissingGrouplist {
        /// The cluster that was looked up.
        cluster: String,
    },

    /// The configuration is invalid (a bad value, an unreadable file...).
    #[error("configuration error: {0}")]
    Config(String),

    /// The registry cannot take registrations (Seata's file registry registers nothing).
    #[error(
        "the `{kind}` registry is read-only: it cannot {op}; use a network registry (etcd3, nacos, zk, redis, consul, eureka) to register"
    )]
    ReadOnly {
        /// The registry kind.
        kind: &'static str,
        /// The refused operation (`register`, `unregister`).
        op: &'static str,
    },

    /// A known registry type whose backend is not compiled into this build.
    #[error(
        "registry type `{kind}` is not compiled into this build: enable the cargo feature `{feature}` of the `meshline` crate (or `all`)"
    )]
    FeatureNotEnabled {
        /// The registry type as configured.
        kind: String,
        /// The cargo feature that provides it.
        feature: &'static str,
    },

    /// A registry type nobody knows.
    #[error("unknown registry type `{given}`; known types: {known}")]
    UnknownType {
        /// The registry type as configured.
        given: String,
        /// Comma-separated list of the known types.
        known: String,
    },

    /// The registry server could not be reached or refused the operation.
    #[error("{kind} registry unavailable: {message}")]
    Unavailable {
        /// The registry kind.
        kind: &'static str,
        /// What the client or server said.
        message: String,
    },

    /// An operation did not finish in time.
    #[error("{kind} registry: `{op}` timed out after {after:?}")]
    Timeout {
        /// The registry kind.
        kind: &'static str,
        /// The operation.
        op: &'static str,
        /// How long we waited.
        after: Duration,
    },

    /// The registry was closed; create a new one.
    #[error("the {kind} registry is closed")]
    Closed {
        /// The registry kind.
        kind: &'static str,
    },

    /// An error from a backend's client library.
    #[error("{kind} registry: {message}")]
    Backend {
        /// The registry kind.
        kind: &'static str,
        /// Context: what we were doing.
        message: String,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl RegistryError {
    /// Shorthand for [`RegistryError::InvalidAddress`].
    pub fn invalid_address(text: impl Into<String>, reason: impl Into<String>) -> Self {
        RegistryError::InvalidAddress {
            text: text.into(),
            reason: reason.into(),
        }
    }

    /// Shorthand for [`RegistryError::Backend`].
    pub fn backend<E>(kind: &'static str, message: impl Into<String>, source: E) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        RegistryError::Backend {
            kind,
            message: message.into(),
            source: Box::new(source),
        }
    }

    /// Shorthand for [`RegistryError::Unavailable`].
    pub fn unavailable(kind: &'static str, message: impl Into<String>) -> Self {
        RegistryError::Unavailable {
            kind,
            message: message.into(),
        }
    }
}
