//! The one way an instance cannot be made: its address text is not an address.

/// Text that should have been a `host:port` address was not one: which text, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid address `{text}`: {reason}")]
pub struct AddressError {
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

impl AddressError {
    /// The address `text` is refused because of `reason`.
    pub fn new(text: impl Into<String>, reason: impl Into<String>) -> Self {
        AddressError {
            text: text.into(),
            reason: reason.into(),
        }
    }
}
