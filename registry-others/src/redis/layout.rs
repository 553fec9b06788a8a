//! Seata's redis layout: key and channel names, the value our keys carry, and how a
//! scanned key is classified as a member, another cluster's key or a malformed entry.
//! Kept apart from the I/O so the compatibility rules and their tests read on their own.

use meshline_registry_core::Instance;

/// The start of every key and channel of Seata's redis layout.
pub(super) const PREFIX: &str = "registry.redis.";

/// The key prefix of `cluster`'s members: `registry.redis.<cluster>_`.
pub fn key_prefix(cluster: &str) -> String {
    format!("{PREFIX}{cluster}_")
}

/// The key of `instance` in `cluster` (Seata's layout).
pub fn instance_key(cluster: &str, instance: &Instance) -> String {
    format!("{}{}", key_prefix(cluster), instance.to_java_string())
}

/// The pub/sub channel of `cluster`: `registry.redis.<cluster>`.
pub fn channel(cluster: &str) -> String {
    format!("{PREFIX}{cluster}")
}

/// Escapes Redis glob characters so `text` matches only itself in `SCAN MATCH`.
pub(super) fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[derive(Debug, PartialEq)]
pub(super) enum Entry {
    Member(Instance),
    OtherCluster,
    Bad(String),
}

pub(super) fn classify(prefix: &str, key: &[u8]) -> Entry {
    let Ok(key) = std::str::from_utf8(key) else {
        return Entry::Bad("key is not UTF-8".into());
    };
    let Some(rest) = key.strip_prefix(prefix) else {
        return Entry::OtherCluster;
    };
    if rest.contains('_') {
        return Entry::OtherCluster;
    }
    match Instance::parse(rest) {
        Ok(i) => Entry::Member(i),
        Err(e) => Entry::Bad(format!("not an address after the cluster prefix: {e}")),
    }
}

/// The cluster a scanned key belongs to and the member it names; `None` for a key that
/// is not a member of any cluster. The address never contains `_`, so the cluster is
/// everything up to the last `_` (it may itself contain `_`), by the same rule
/// [`classify`] applies to one cluster.
pub(super) fn split_member(key: &[u8]) -> Option<(String, Instance)> {
    let text = std::str::from_utf8(key).ok()?;
    let (cluster, _) = text.strip_prefix(PREFIX)?.rsplit_once('_')?;
    match classify(&key_prefix(cluster), key) {
        Entry::Member(i) => Some((cluster.to_string(), i)),
        Entry::OtherCluster | Entry::Bad(_) => None,
    }
}

/// What a message on a cluster's channel announces (Seata publishes
/// `<ip>:<port>-register` and `<ip>:<port>-unregister`).
#[derive(Debug, PartialEq)]
pub(super) enum Message {
    Register(Instance),
    Unregister(Instance),
}

/// Parses a pub/sub payload; `None` for anything else (which still triggers a
/// rescan: the message says something changed).
pub(super) fn parse_message(payload: &[u8]) -> Option<Message> {
    let text = std::str::from_utf8(payload).ok()?;
    let (addr, what) = text.rsplit_once('-')?;
    let instance = Instance::parse(addr).ok()?;
    match what {
        "register" => Some(Message::Register(instance)),
        "unregister" => Some(Message::Unregister(instance)),
        _ => None,
    }
}

pub(super) fn local_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("{}@{host}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seata_keys_and_channels() {
        let i = Instance::parse("[2000::1:2345:6789:abcd]:8091").unwrap();
        assert_eq!(
            instance_key("default", &i),
            "registry.redis.default_2000:0:0:0:1:2345:6789:abcd:8091"
        );
        assert_eq!(channel("default"), "registry.redis.default");
    }

    #[test]
    fn exact_cluster_and_garbage() {
        let p = key_prefix("a");
        assert_eq!(
            classify(&p, b"registry.redis.a_10.0.0.1:80"),
            Entry::Member(Instance::parse("10.0.0.1:80").unwrap())
        );
        assert_eq!(
            classify(&p, b"registry.redis.a_b_10.0.0.1:80"),
            Entry::OtherCluster
        );
        assert!(matches!(
            classify(&p, b"registry.redis.a_garbage"),
            Entry::Bad(_)
        ));
        assert!(matches!(classify(&p, &[0xff, 0x00]), Entry::Bad(_)));
    }

    #[test]
    fn scanned_keys_split_into_cluster_and_member() {
        let split = |k: &str| split_member(k.as_bytes()).map(|(c, i)| (c, i.to_string()));
        assert_eq!(
            split("registry.redis.default2_10.0.0.1:80"),
            Some(("default2".into(), "10.0.0.1:80".into()))
        );
        assert_eq!(
            split("registry.redis.a_b_10.0.0.1:80"),
            Some(("a_b".into(), "10.0.0.1:80".into()))
        );
        assert_eq!(
            split("registry.redis.default_2000:0:0:0:1:2345:6789:abcd:8091"),
            Some(("default".into(), "[2000::1:2345:6789:abcd]:8091".into()))
        );
        assert_eq!(split("registry.redis.a_garbage"), None);
        assert_eq!(split("registry.redis.nounderscore"), None);
        assert_eq!(split("other.a_10.0.0.1:80"), None);
        assert_eq!(split_member(&[0xff, b'_']), None);
    }

    #[test]
    fn messages() {
        let i = Instance::parse("10.0.0.1:80").unwrap();
        assert_eq!(
            parse_message(b"10.0.0.1:80-register"),
            Some(Message::Register(i.clone()))
        );
        assert_eq!(
            parse_message(b"10.0.0.1:80-unregister"),
            Some(Message::Unregister(i))
        );
        assert_eq!(parse_message(b"10.0.0.1:80-other"), None);
        assert_eq!(parse_message(b"\xff-register"), None);
    }

    proptest::proptest! {
        /// Any key bytes are classified without a panic, as
        /// specified: not UTF-8 is bad; outside the prefix, or with `_` after it, is
        /// another cluster's; else a member exactly when the rest is an address.
        #[test]
        fn any_key_is_classified_as_specified(
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            tail in "[0-9a-f:.\\[\\]_x-]{0,40}",
        ) {
            let p = key_prefix("c");
            let with_prefix = format!("{p}{tail}").into_bytes();
            for key in [raw, with_prefix] {
                let got = classify(&p, &key);
                match std::str::from_utf8(&key) {
                    Err(_) => proptest::prop_assert!(matches!(got, Entry::Bad(_))),
                    Ok(k) => match k.strip_prefix(&p) {
                        None => proptest::prop_assert_eq!(got, Entry::OtherCluster),
                        Some(rest) if rest.contains('_') => {
                            proptest::prop_assert_eq!(got, Entry::OtherCluster)
                        }
                        Some(rest) => match Instance::parse(rest) {
                            Ok(i) => proptest::prop_assert_eq!(got, Entry::Member(i)),
                            Err(_) => proptest::prop_assert!(matches!(got, Entry::Bad(_))),
                        },
                    },
                }
            }
        }

        /// Any payload is parsed without a panic; a message is
        /// recognised exactly for `<address>-register` / `<address>-unregister`.
        #[test]
        fn any_payload_is_parsed_as_specified(
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            addr in "[0-9a-f:.\\[\\]-]{0,40}",
            what in "(register|unregister|regist|-register|)",
        ) {
            let _ = parse_message(&raw);
            let payload = format!("{addr}-{what}");
            let got = parse_message(payload.as_bytes());
            let (a, w) = payload.rsplit_once('-').unwrap();
            let expected = match (Instance::parse(a), w) {
                (Ok(i), "register") => Some(Message::Register(i)),
                (Ok(i), "unregister") => Some(Message::Unregister(i)),
                _ => None,
            };
            proptest::prop_assert_eq!(got, expected);
        }
    }

    #[test]
    fn globs_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
