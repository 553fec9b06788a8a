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
    Entry::Bad(format!(
        "the address in the key does not match the value `{value}`"
    ))
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
    match classify(prefix, kv.key(), kv.value()) {
        Entry::Member(i) => Some(i),
        Entry::OtherCluster => None,
        Entry::Bad(reason) => {
            tracing::warn!(
                registry = KIND,
                cluster,
                key = %String::from_utf8_lossy(kv.key()),
                value = %String::from_utf8_lossy(kv.value()),
                "skipping malformed registry entry: {reason}"
            );
            None
        }
    }
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
}
