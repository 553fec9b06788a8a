//! A configured secret (a password, a token, a secret key) that never prints.
//!
//! Settings structs hold their credentials as [`Secret`] so that they can derive
//! `Debug` and still be logged whole: a derived `Debug` of a plain `String` field
//! prints the password, and a hand-written `Debug` per struct is one more list of
//! fields to keep in step. `secrecy`'s `SecretString` does the same job but is not
//! `PartialEq`, and settings are compared (a config centre's change is applied only
//! when the settings differ), so the type is this small one.

use std::fmt;

/// A secret value read from the configuration. `Debug` prints `<redacted>`; there is
/// no `Display`, so the value reaches text only through [`expose`](Secret::expose),
/// where the code means it to.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the one place that sends it (a login, an auth header).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True for an empty or all-blank value: Seata's HTTP clients treat such a
    /// password as no password at all.
    pub fn is_blank(&self) -> bool {
        self.0.trim().is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Secret {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Secret {
        Secret(value.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_value() {
        let s = Secret::new("s3cret");
        assert_eq!(format!("{s:?}"), "<redacted>");
        assert_eq!(format!("{:?}", Some(&s)), "Some(<redacted>)");
        assert_eq!(s.expose(), "s3cret");
        assert!(Secret::new(" \t").is_blank());
        assert!(!s.is_blank());
    }
}
