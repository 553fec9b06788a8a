//! The one error type of registry operations.
//!
//! Every variant says what went wrong and, where there is one, what to do about it: a
//! missing mapping names the config key to set, a backend that is not compiled in names
//! the cargo feature to enable.
//!
//! Errors of a registry server (unreachable, refusing, too slow) name the server and
//! the cause in their `Display`, so `error: {e}` alone tells the user which address
//! failed and why (`etcd3 registry at http://127.0.0.1:2379: get: ... Connection
//! refused`): [`RegistryError::Unavailable`], [`RegistryError::Timeout`] and
//! [`RegistryError::Backend`] carry the `server` (the address or address list the
//! backend was configured with), and `Backend` writes its `source` and the source's own
//! causes after its message. The `source` stays available through
//! [`std::error::Error::source`] for code that inspects it; reporters that print the
//! whole source chain will see the cause twice.

use std::fmt;
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
        "the `{kind}` registry is read-only: it cannot {op}; register in a registry type that takes registrations (`meshline types` lists them)"
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
    #[error("{kind} registry at {server} unavailable: {message}")]
    Unavailable {
        /// The registry kind.
        kind: &'static str,
        /// The server address (or the configured address list) that failed.
        server: String,
        /// What the client or server said.
        message: String,
    },

    /// An operation did not finish in time.
    #[error("{kind} registry at {server}: `{op}` timed out after {after:?}")]
    Timeout {
        /// The registry kind.
        kind: &'static str,
        /// The server address (or the configured address list) that did not answer.
        server: String,
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
    ///
    /// Displayed as `<kind> registry at <server>: <message>: <source>: <its causes>`.
    #[error("{kind} registry at {server}: {message}: {}", Causes(&**.source))]
    Backend {
        /// The registry kind.
        kind: &'static str,
        /// The server address (or the configured address list) the client talked to.
        server: String,
        /// Context: what we were doing.
        message: String,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

/// A configuration error is this crate's `Config` error, and a config centre's own
/// error (a backend's [`RegistryError`] that travelled through `meshline-config` boxed)
/// comes back as it was.
impl From<meshline_config::ConfigError> for RegistryError {
    fn from(e: meshline_config::ConfigError) -> Self {
        match e {
            meshline_config::ConfigError::Invalid(text) => RegistryError::Config(text),
            meshline_config::ConfigError::Centre(source) => {
                match source.downcast::<RegistryError>() {
                    Ok(own) => *own,
                    Err(other) => RegistryError::Config(other.to_string()),
                }
            }
        }
    }
}

/// Writes an error and every cause in its source chain, `: `-separated. A cause whose
/// text is already part of what was written (libraries that repeat their source in
/// their own message) is left out.
struct Causes<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for Causes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut written = self.0.to_string();
        let mut cause = self.0.source();
        while let Some(c) = cause {
            let text = c.to_string();
            if !text.is_empty() && !written.contains(&text) {
                written.push_str(": ");
                written.push_str(&text);
            }
            cause = c.source();
        }
        f.write_str(&written)
    }
}

/// An address that did not parse is the registry's [`RegistryError::InvalidAddress`].
impl From<meshline_instance::AddressError> for RegistryError {
    fn from(e: meshline_instance::AddressError) -> Self {
        RegistryError::InvalidAddress {
            text: e.text,
            reason: e.reason,
        }
    }
}

impl RegistryError {
    /// Shorthand for [`RegistryError::InvalidAddress`].
    pub fn invalid_address(text: impl Into<String>, reason: impl Into<String>) -> Self {
        RegistryError::InvalidAddress {
            text: text.into(),
            reason: reason.into(),
        }
    }

    /// Shorthand for [`RegistryError::Backend`]: the `kind` registry at `server` failed
    /// while doing `message`, because of `source`.
    pub fn backend<E>(
        kind: &'static str,
        server: impl Into<String>,
        message: impl Into<String>,
        source: E,
    ) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        RegistryError::Backend {
            kind,
            server: server.into(),
            message: message.into(),
            source: Box::new(source),
        }
    }

    /// Shorthand for [`RegistryError::Unavailable`].
    pub fn unavailable(
        kind: &'static str,
        server: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        RegistryError::Unavailable {
            kind,
            server: server.into(),
            message: message.into(),
        }
    }

    /// Shorthand for [`RegistryError::Timeout`].
    pub fn timeout(
        kind: &'static str,
        server: impl Into<String>,
        op: &'static str,
        after: Duration,
    ) -> Self {
        RegistryError::Timeout {
            kind,
            server: server.into(),
            op,
            after,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error whose own message hides its cause (as many client libraries do).
    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("transport error")
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn backend_display_names_the_server_and_the_whole_cause() {
        let refused =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let e = RegistryError::backend("etcd3", "http://127.0.0.1:9", "get", Outer(refused));
        assert_eq!(
            e.to_string(),
            "etcd3 registry at http://127.0.0.1:9: get: transport error: Connection refused"
        );
        // The cause is still the error's source.
        let source = std::error::Error::source(&e).expect("source kept");
        assert_eq!(source.to_string(), "transport error");
    }

    #[test]
    fn a_cause_repeated_in_its_parent_message_is_written_once() {
        #[derive(Debug)]
        struct Repeats(std::io::Error);
        impl fmt::Display for Repeats {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "connect failed: {}", self.0)
            }
        }
        impl std::error::Error for Repeats {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let io = std::io::Error::other("Connection refused");
        let e = RegistryError::backend("zk", "127.0.0.1:9", "connect", Repeats(io));
        assert_eq!(
            e.to_string(),
            "zk registry at 127.0.0.1:9: connect: connect failed: Connection refused"
        );
    }

    #[test]
    fn unavailable_and_timeout_name_the_server() {
        let e = RegistryError::unavailable("redis", "127.0.0.1:9", "Connection refused");
        assert_eq!(
            e.to_string(),
            "redis registry at 127.0.0.1:9 unavailable: Connection refused"
        );
        let e = RegistryError::timeout(
            "nacos",
            "127.0.0.1:8848",
            "connect",
            Duration::from_secs(10),
        );
        assert_eq!(
            e.to_string(),
            "nacos registry at 127.0.0.1:8848: `connect` timed out after 10s"
        );
    }
}
