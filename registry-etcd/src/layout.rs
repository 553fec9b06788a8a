//! Seata's etcd3 key layout: the key names (`registry-seata-<cluster>-<ip>:<port>`) and
//! how a listed or watched key-value is classified as a member, another cluster's key or
//! a malformed entry. Kept apart from the I/O so the compatibility rules and their test
//! vectors read on their own.

use std::collections::BTreeMap;

use etcd_client::KeyValue;
use meshline_registry_core::Instance;

use crate::KIND;

/// The key prefix of `cluster`'s members, with the trailing `-`.
pub fn cluster_prefix(cluster: &str) -> String {
    format!("registry-seata-{cluster}-")
}

/// The key under which `instance` is a member of `cluster` (Seata's layout).
pub fn instance_key(cluster: &str, instance: &Instance) -> String {
    format!("{}{}", cluster_prefix(cluster), instance.to_java_string())
}

/// What one key under a cluster prefix turned out to be.
#[derive(Debug, PartialEq)]
enum Entry {
    Member(Instance),
    /// A key of another cluster sharing the prefix (`a-b` when asked for `a`).
    OtherCluster,
    Bad(String),
}

fn classify(prefix: &str, key: &[u8], value: &[u8]) -> Entry {
    let Ok(key) = std::str::from_utf8(key) else {
        return Entry::Bad("key is not UTF-8".into());
    };
    let Some(addr_part) = key.strip_prefix(prefix) else {
        return Entry::OtherCluster;
    };
    let Ok(value) = std::str::from_utf8(value) else {
        return Entry::Bad("value is not UTF-8".into());
    };
    let value = value.trim();
    let inst = match Instance::parse(value) {
        Ok(i) => i,
        Err(e) => return Entry::Bad(format!("value is not an address: {e}")),
    };
    if addr_part == value {
        return Entry::Member(inst);
    }
    if let Ok(k) = Instance::parse(addr_part)
        && k.key() == inst.key()
    {
        return Entry::Member(inst);
    }
    if addr_part.ends_with(&format!("-{value}")) {
        return Entry::OtherCluster;
    }
    // The value is logged beside the reason (truncated); not repeated here.
    Entry::Bad("the address in the key does not match the value".into())
}

/// Parses a range of key-values of `cluster` into members (bad entries are logged).
pub(crate) fn parse_members(cluster: &str, kvs: &[KeyValue]) -> BTreeMap<Vec<u8>, Instance> {
    let prefix = cluster_prefix(cluster);
    let mut out = BTreeMap::new();
    for kv in kvs {
        if let Some(inst) = member_of(&prefix, cluster, kv) {
            out.insert(kv.key().to_vec(), inst);
        }
    }
    out
}

pub(crate) fn member_of(prefix: &str, cluster: &str, kv: &KeyValue) -> Option<Instance> {
    member_of_raw(prefix, cluster, kv.key(), kv.value())
}

fn member_of_raw(prefix: &str, cluster: &str, key: &[u8], value: &[u8]) -> Option<Instance> {
    match classify(prefix, key, value) {
        Entry::Member(i) => Some(i),
        Entry::OtherCluster => None,
        Entry::Bad(reason) => {
            // Truncated and rate-limited: a hostile etcd can store 1.5 MiB per value
            // and rewrite it in a loop.
            meshline_registry_core::redact::malformed_entry(KIND, cluster, key, value, &reason);
            None
        }
    }
}

/// Every key of Seata's layout starts with this (`registry-seata-<cluster>-<ip>:<port>`).
pub(crate) const LAYOUT_PREFIX: &str = "registry-seata-";

/// The cluster a listed key belongs to and the member it names, for a key under
/// [`LAYOUT_PREFIX`]; `None` for a key that is not a member of any cluster.
///
/// A cluster name may itself contain `-` (`a-b`), so the key alone is ambiguous; the
/// value settles it: the cluster is the shortest name for which the rest of the key is
/// the member's address, by the same rule [`parse_members`] applies to one cluster.
pub(crate) fn split_member(key: &[u8], value: &[u8]) -> Option<(String, Instance)> {
    let text = std::str::from_utf8(key).ok()?;
    let rest = text.strip_prefix(LAYOUT_PREFIX)?;
    rest.match_indices('-').find_map(|(at, _)| {
        let cluster = &rest[..at];
        match classify(&cluster_prefix(cluster), key, value) {
            Entry::Member(i) => Some((cluster.to_string(), i)),
            Entry::OtherCluster | Entry::Bad(_) => None,
        }
    })
}

pub(crate) fn members_of(members: &BTreeMap<Vec<u8>, Instance>) -> Vec<Instance> {
    members.values().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(prefix: &str, key: &str, value: &str) -> Entry {
        classify(prefix, key.as_bytes(), value.as_bytes())
    }

    #[test]
    fn seata_vectors_parse() {
        let p = cluster_prefix("default");
        assert_eq!(
            member(
                &p,
                "registry-seata-default-172.0.0.1:8091",
                "172.0.0.1:8091"
            ),
            Entry::Member(Instance::parse("172.0.0.1:8091").unwrap())
        );
        let v6 = "2000:0000:0000:0000:0001:2345:6789:abcd:8091";
        match member(&p, &format!("registry-seata-default-{v6}"), v6) {
            Entry::Member(i) => {
                assert_eq!(i.port(), 8091);
                assert_eq!(i.ip(), Some("2000::1:2345:6789:abcd".parse().unwrap()));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn clusters_match_exactly() {
        let p = cluster_prefix("a");
        assert_eq!(
            member(&p, "registry-seata-a-b-10.0.0.1:80", "10.0.0.1:80"),
            Entry::OtherCluster
        );
        assert!(!"registry-seata-default2-10.0.0.1:80".starts_with(&cluster_prefix("default")));
    }

    #[test]
    fn listed_keys_split_into_cluster_and_member() {
        let split = |k: &str, v: &str| {
            split_member(k.as_bytes(), v.as_bytes()).map(|(c, i)| (c, i.to_string()))
        };
        assert_eq!(
            split("registry-seata-default2-10.0.0.1:80", "10.0.0.1:80"),
            Some(("default2".into(), "10.0.0.1:80".into()))
        );
        assert_eq!(
            split("registry-seata-a-b-10.0.0.1:80", "10.0.0.1:80"),
            Some(("a-b".into(), "10.0.0.1:80".into()))
        );
        let v6 = "2000:0000:0000:0000:0001:2345:6789:abcd:8091";
        assert_eq!(
            split(&format!("registry-seata-default-{v6}"), v6),
            Some(("default".into(), "[2000::1:2345:6789:abcd]:8091".into()))
        );
        assert_eq!(split("registry-seata-c-x", "not an address"), None);
        assert_eq!(split("registry-seata-c-1.1.1.1:1", "2.2.2.2:2"), None);
        assert_eq!(split("other-10.0.0.1:80", "10.0.0.1:80"), None);
        assert_eq!(split_member(&[0xff], b"1.1.1.1:1"), None);
    }

    #[test]
    fn garbage_is_bad_not_a_panic() {
        let p = cluster_prefix("c");
        assert!(matches!(
            member(&p, "registry-seata-c-x", "not an address"),
            Entry::Bad(_)
        ));
        assert!(matches!(
            classify(&p, b"registry-seata-c-1.1.1.1:1", &[0xff, 0xfe]),
            Entry::Bad(_)
        ));
        assert!(matches!(
            member(&p, "registry-seata-c-1.1.1.1:1", "2.2.2.2:2"),
            Entry::Bad(_)
        ));
    }

    #[test]
    fn our_keys_are_seata_keys() {
        let i = Instance::parse("[2000::1:2345:6789:abcd]:8091").unwrap();
        assert_eq!(
            instance_key("default", &i),
            "registry-seata-default-2000:0:0:0:1:2345:6789:abcd:8091"
        );
    }

    /// A malformed value of 1.5 MiB, rewritten in a loop, is one
    /// short line per period (it was one 1.5 MiB line per entry).
    #[test]
    fn malformed_entries_log_short_rate_limited_lines() {
        let buf = meshline_testkit::watch::LogBuf::default();
        let _g = buf.capture();
        let p = cluster_prefix("huge");
        let value = "x".repeat(1536 * 1024);
        for _ in 0..50 {
            assert!(
                member_of_raw(
                    &p,
                    "huge",
                    b"registry-seata-huge-1.2.3.4:5",
                    value.as_bytes()
                )
                .is_none()
            );
        }
        let text = buf.text();
        assert_eq!(text.lines().count(), 1, "{}", &text[..text.len().min(2000)]);
        assert!(text.len() < 2048, "{} bytes logged", text.len());
        assert!(
            text.contains("1572864 bytes"),
            "says how long the value was"
        );
    }

    proptest::proptest! {
        /// Any key and value bytes: classified without a panic; a member's key is under
        /// the prefix and its address is the value's.
        #[test]
        fn any_key_value_is_classified(
            key in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            value in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            tail in "[0-9a-f:.\\[\\]-]{0,40}",
            v in "[0-9a-f:.\\[\\] ]{0,40}",
        ) {
            let p = cluster_prefix("c");
            let _ = classify(&p, &key, &value);
            let k = format!("{p}{tail}");
            if let Entry::Member(i) = classify(&p, k.as_bytes(), v.as_bytes()) {
                let expected = Instance::parse(v.trim()).unwrap();
                proptest::prop_assert_eq!(i.key(), expected.key());
            }
        }
    }
}
