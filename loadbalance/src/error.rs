//! Errors of this crate (configuration only: picking never fails, it returns `None`).

/// A load balancer could not be created.
#[derive(Debug, thiserror::Error)]
pub enum LoadBalanceError {
    /// `client.loadBalance.type` (or the name given) is not an algorithm we know.
    /// The message lists the names from the factory's name table.
    #[error(
        "unknown load balancer `{name}`; use one of: {} (case-insensitive; prefix `zone:` for \
         zone preference)",
        crate::factory::known_names()
    )]
    UnknownName {
        /// The name as given.
        name: String,
    },
    /// An option value is out of range.
    #[error("invalid load-balancer option {option}: {reason}")]
    InvalidOption {
        /// Which option.
        option: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}
