//! "Did you mean": the nearest known key to a key nobody knows, so a warning about
//! `registry.tpye` names `registry.type`.
//!
//! Keys are compared by their normalised form (case, `-` and `_` ignored, as the router
//! matches them) with the Damerau-Levenshtein distance (`strsim`): a typo, a swapped
//! pair of letters or one letter too many is a near miss; anything farther is no
//! suggestion rather than a wrong one.

use super::keys::norm;

/// The nearest of `candidates` to `key`, when it is near: at most one edit for short
/// keys, at most a quarter of the key's length for long ones. Candidates keep their
/// spelling in the answer.
pub fn nearest<'a>(key: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let want = normalise(key);
    let limit = (want.len() / 4).max(1);
    candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(&want, &normalise(c)), c))
        .filter(|(d, _)| *d > 0 && *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn normalise(key: &str) -> String {
    key.split('.').map(norm).collect::<Vec<_>>().join(".")
}

/// The shared keys this crate interprets, in Seata's spelling (for suggestions; a
/// registry's or a part's own keys are suggested by its section reader).
pub(super) const KNOWN_KEYS: &[&str] = &[
    "txServiceGroup",
    "applicationId",
    "registry.type",
    "registry.preferredNetworks",
    "registry.emptyProtection",
    "config.type",
    "config.dataType",
    "service.vgroupMapping",
];

/// The roots a key can start with, for a misspelt root (`trasnport.heartbeat`).
const ROOTS: &[&str] = &[
    "registry",
    "config",
    "service",
    "client",
    "transport",
    "getty",
];

/// The suggestion for an unknown key: the nearest shared key; else, when only its root
/// (or, under `client.`, its namespace) is a near miss, the key with that part
/// corrected.
pub(super) fn suggest(key: &str) -> Option<String> {
    if let Some(k) = nearest(key, KNOWN_KEYS.iter().copied()) {
        return Some(k.to_string());
    }
    let mut segs: Vec<&str> = key.split('.').collect();
    if segs.len() < 2 {
        return None;
    }
    if norm(segs[0]) == "client" {
        let fixed = nearest(segs[1], super::SEATA_CLIENT_PARTS.iter().copied())?;
        segs[1] = fixed;
    } else {
        segs[0] = nearest(segs[0], ROOTS.iter().copied())?;
    }
    Some(segs.join("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_misses_are_suggested_and_far_ones_are_not() {
        assert_eq!(
            nearest("registry.tpye", KNOWN_KEYS.iter().copied()),
            Some("registry.type")
        );
        assert_eq!(
            nearest("txServiceGrop", KNOWN_KEYS.iter().copied()),
            Some("txServiceGroup")
        );
        assert_eq!(
            nearest("pasword", ["password", "username"]),
            Some("password")
        );
        // Spelling differences the router ignores are not typos (distance 0).
        assert_eq!(nearest("registry.TYPE", KNOWN_KEYS.iter().copied()), None);
        assert_eq!(
            nearest("something.else.entirely", KNOWN_KEYS.iter().copied()),
            None
        );
        assert_eq!(nearest("ab", ["xy"]), None);
    }

    #[test]
    fn a_misspelt_root_or_client_namespace_is_corrected_in_place() {
        assert_eq!(
            suggest("trasnport.heartbeatInterval").as_deref(),
            Some("transport.heartbeatInterval")
        );
        assert_eq!(
            suggest("client.loadBalanse.type").as_deref(),
            Some("client.loadBalance.type")
        );
        assert_eq!(suggest("registy.type").as_deref(), Some("registry.type"));
        assert_eq!(suggest("gateway.listen"), None);
    }
}
