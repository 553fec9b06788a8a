//! "Did you mean": the nearest known key to a key nobody knows, so a warning about
//! `registry.tpye` names `registry.type`.
//!
//! Keys are compared by their normalised form (case, `-` and `_` ignored, as the router
//! matches them) with the Damerau-Levenshtein distance (`strsim`): a typo, a swapped
//! pair of letters or one letter too many is a near miss; anything farther is no
//! suggestion rather than a wrong one.

use super::router::norm;

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

/// The shared keys the router knows, in Seata's spelling (for suggestions; a
/// registry's own keys are suggested by its section reader).
pub(super) const KNOWN_KEYS: &[&str] = &[
    "txServiceGroup",
    "applicationId",
    "registry.type",
    "registry.preferredNetworks",
    "registry.emptyProtection",
    "config.type",
    "config.dataType",
    "service.vgroupMapping",
    "client.loadBalance.type",
    "client.loadBalance.virtualNodes",
    "client.metadataMaxAgeMs",
    "client.tm.commitRetryCount",
    "client.tm.rollbackRetryCount",
    "client.tm.defaultGlobalTransactionTimeout",
    "transport.heartbeat",
    "transport.serialization",
    "transport.compressor",
    "transport.rpcTmRequestTimeout",
    "transport.rpcRmRequestTimeout",
    "transport.rpcTcRequestTimeout",
    "transport.enableTmClientBatchSendRequest",
    "transport.enableRmClientBatchSendRequest",
    "transport.enableClientBatchSendRequest",
    "transport.maxMergeSendMills",
    "transport.heartbeatInterval",
    "transport.heartbeatTimeout",
    "transport.probeAfter",
    "transport.probeTimeout",
    "transport.ejectAfterFailures",
    "transport.ejectionTime",
    "transport.maxFrameLength",
    "transport.requestQueueBytes",
    "transport.responseQueueBytes",
    "transport.writeTimeout",
    "transport.maxInboundRequests",
    "transport.maxConnectedMembers",
];

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
            nearest("client.loadBalance.typ", KNOWN_KEYS.iter().copied()),
            Some("client.loadBalance.type")
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
}
