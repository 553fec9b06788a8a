//! Seata's zk layout: the paths of clusters and members, which cluster names can be
//! path segments, and how child names are parsed into members. Kept apart from the I/O
//! so the compatibility rules and their tests read on their own.

use meshline_registry_core::{Instance, RegistryError};

use super::KIND;

/// The parent of every cluster's path: its children are the cluster names.
pub(super) const ROOT: &str = "/registry/zk";

/// The path under which `cluster`'s members are ephemeral children.
pub fn cluster_path(cluster: &str) -> String {
    format!("{ROOT}/{cluster}")
}

/// The ephemeral node of `instance` in `cluster` (Seata's layout).
pub fn instance_path(cluster: &str, instance: &Instance) -> String {
    format!("{}/{}", cluster_path(cluster), instance.to_java_string())
}

pub(super) fn check_cluster(cluster: &str) -> Result<(), RegistryError> {
    if cluster.is_empty() || cluster.contains('/') || cluster == "." || cluster == ".." {
        return Err(RegistryError::Config(format!(
            "cluster name `{cluster}` cannot be a ZooKeeper path segment"
        )));
    }
    Ok(())
}
pub(super) fn parse_children(cluster: &str, children: &[String]) -> Vec<Instance> {
    let mut out = Vec::with_capacity(children.len());
    for name in children {
        match Instance::parse(name) {
            Ok(i) => out.push(i),
            // Truncated and rate-limited per cluster: a hostile server can list
            // thousands of long garbage names on every change.
            Err(e) => meshline_registry_core::redact::malformed_entry(
                KIND,
                cluster,
                format!("{}/{name}", cluster_path(cluster)).as_bytes(),
                b"",
                &format!("the child name is not an address: {e}"),
            ),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seata_paths() {
        let i = Instance::parse("[2000::1:2345:6789:abcd]:8091").unwrap();
        assert_eq!(
            instance_path("default", &i),
            "/registry/zk/default/2000:0:0:0:1:2345:6789:abcd:8091"
        );
        assert_eq!(cluster_path("prod"), "/registry/zk/prod");
    }

    #[test]
    fn bad_children_are_skipped() {
        let got = parse_children(
            "c",
            &[
                "10.0.0.1:80".into(),
                "junk".into(),
                "10.0.0.2:0".into(),
                "2000:0:0:0:0:0:0:1:81".into(),
            ],
        );
        let shown: Vec<String> = got.iter().map(|i| i.to_string()).collect();
        assert_eq!(shown, vec!["10.0.0.1:80", "[2000::1]:81"]);
    }

    /// 50 long garbage names are one short line (each was a line of
    /// its own, whole).
    #[test]
    fn malformed_children_log_short_rate_limited_lines() {
        let buf = meshline_testkit::watch::LogBuf::default();
        let _g = buf.capture();
        let names: Vec<String> = (0..50)
            .map(|i| format!("{i}{}", "x".repeat(8192)))
            .collect();
        assert!(parse_children("zk-huge-names", &names).is_empty());
        let text = buf.text();
        assert_eq!(text.lines().count(), 1, "{}", &text[..text.len().min(2000)]);
        assert!(text.len() < 2048, "{} bytes logged", text.len());
    }

    proptest::proptest! {
        /// Any child name is parsed without a panic; it is a member
        /// exactly when it parses as an address, and then is that address.
        #[test]
        fn any_child_name_is_parsed_as_specified(
            name in proptest::prelude::any::<String>(),
            addr in "[0-9a-f:.\\[\\]]{0,40}",
        ) {
            for n in [name, addr] {
                let got = parse_children("zk-prop", std::slice::from_ref(&n));
                match Instance::parse(&n) {
                    Ok(i) => {
                        proptest::prop_assert_eq!(got.len(), 1);
                        proptest::prop_assert_eq!(got[0].key(), i.key());
                    }
                    Err(_) => proptest::prop_assert!(got.is_empty()),
                }
            }
        }
    }

    #[test]
    fn cluster_names_must_be_path_segments() {
        assert!(check_cluster("a/b").is_err());
        assert!(check_cluster("").is_err());
        assert!(check_cluster("default").is_ok());
    }
}
