//! [`Propagation`]: what a transactional block does about the transaction it finds.

/// What [`Transactional::run`](super::Transactional::run) does about the transaction
/// current in the task, with the meaning of Seata's `Propagation` (its
/// `TransactionalTemplate`), mode for mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Propagation {
    /// Join the current transaction, or begin one (Seata's default).
    #[default]
    Required,
    /// Suspend the current transaction, if any, and begin a new one; the suspended one
    /// is current again when the block ends, whatever its outcome.
    RequiresNew,
    /// Suspend the current transaction, if any, and run with none.
    NotSupported,
    /// Join the current transaction, or run with none.
    Supports,
    /// Run with none; an error (and the block does not run) if one is current.
    Never,
    /// Join the current transaction; an error (and the block does not run) if none is.
    Mandatory,
}

impl Propagation {
    /// Every mode, in the order Seata's enum lists them: what a name is looked up in.
    const ALL: [Propagation; 6] = [
        Propagation::Required,
        Propagation::RequiresNew,
        Propagation::NotSupported,
        Propagation::Supports,
        Propagation::Never,
        Propagation::Mandatory,
    ];

    /// Seata's name for it (`REQUIRED`, `REQUIRES_NEW`...).
    pub fn java_name(self) -> &'static str {
        match self {
            Propagation::Required => "REQUIRED",
            Propagation::RequiresNew => "REQUIRES_NEW",
            Propagation::NotSupported => "NOT_SUPPORTED",
            Propagation::Supports => "SUPPORTS",
            Propagation::Never => "NEVER",
            Propagation::Mandatory => "MANDATORY",
        }
    }
}

impl std::fmt::Display for Propagation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.java_name())
    }
}

impl std::str::FromStr for Propagation {
    type Err = String;

    /// Seata's names, as `@GlobalTransactional(propagation = ...)` spells them (any case).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.java_name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                format!(
                    "unknown propagation {s:?}: one of REQUIRED, REQUIRES_NEW, NOT_SUPPORTED, SUPPORTS, NEVER, MANDATORY"
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seatas_names_read_back() {
        for p in Propagation::ALL {
            assert_eq!(p.java_name().parse::<Propagation>(), Ok(p));
        }
        assert_eq!("requires_new".parse(), Ok(Propagation::RequiresNew));
        assert!(
            "NESTED"
                .parse::<Propagation>()
                .unwrap_err()
                .contains("NESTED")
        );
    }
}
