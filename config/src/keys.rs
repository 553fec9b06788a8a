//! Key paths as every source yields them, and how their structural segments compare.

/// One entry of a source: its key's segments (as written) and its value.
pub(crate) type Entry = (Vec<String>, String);

/// Structural segment normalisation: lower-case, `-` and `_` removed (`serverAddr`,
/// `server-addr` and `server_addr` are one key).
pub(crate) fn norm(s: &str) -> String {
    s.chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}
