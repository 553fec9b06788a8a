//! Where each setting came from: the sources a load read, in order, and the source of
//! every key that took effect. `meshline doctor` prints them ("mapping from
//! nacos config `seata.properties`"), so a user sees which file, variable or centre
//! won.

use std::collections::BTreeMap;

use super::keys::norm;

/// One source a load read, in the order read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRead {
    /// The source's name as messages show it: a file path, `environment`, `override`,
    /// `nacos config `seata.properties``.
    pub origin: String,
    /// How many keys it gave (including keys accepted without effect).
    pub keys: usize,
}

/// The sources read and the origin of every key that took effect.
///
/// Not part of a configuration's value: any two [`Provenance`]s compare equal, so two
/// [`Config`](super::Config)s that mean the same are equal wherever their keys came from
/// (a YAML file and a `.properties` file giving the same settings; a centre re-read
/// that changed nothing is not a change).
#[derive(Debug, Clone, Default)]
pub struct Provenance {
    /// Every source, in the order read (later ones win).
    pub sources: Vec<SourceRead>,
    /// Key as written (without a `seata.` root) -> the source it came from last.
    pub keys: BTreeMap<String, String>,
}

impl PartialEq for Provenance {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Provenance {}

impl Provenance {
    pub(super) fn record_source(&mut self, origin: &str, keys: usize) {
        if keys > 0 {
            self.sources.push(SourceRead {
                origin: origin.to_string(),
                keys,
            });
        }
    }

    pub(super) fn record_key(&mut self, path: &[String], origin: &str) {
        let path = match path {
            [root, rest @ ..] if !rest.is_empty() && norm(root) == "seata" => rest,
            p => p,
        };
        let key = path.join(".");
        // A key written in another spelling replaces the earlier one.
        let normal = normalise(&key);
        self.keys.retain(|k, _| normalise(k) != normal);
        self.keys.insert(key, origin.to_string());
    }

    /// The source of `key` (any spelling: `service.vgroupMapping.g` finds
    /// `service.vgroup-mapping.g`), if it took effect.
    pub fn origin(&self, key: &str) -> Option<&str> {
        if let Some(o) = self.keys.get(key) {
            return Some(o);
        }
        let want = normalise(key);
        self.keys
            .iter()
            .find(|(k, _)| normalise(k) == want)
            .map(|(_, o)| o.as_str())
    }
}

fn normalise(key: &str) -> String {
    key.split('.').map(norm).collect::<Vec<_>>().join(".")
}

#[cfg(test)]
mod tests {
    use crate::{ConfigLoader, Format};

    #[test]
    fn sources_in_order_and_the_last_origin_of_each_key() {
        let c = ConfigLoader::new()
            .text(
                "seata:\n  registry:\n    type: etcd3\n  service:\n    vgroup-mapping:\n      g: a\n",
                Format::Yaml,
            )
            .env_vars([("MESHLINE_REGISTRY__TYPE", "zk"), ("HOME", "/root")])
            .set("client.loadBalance.type", "RandomLoadBalance")
            .load()
            .unwrap();
        let p = &c.provenance;
        let order: Vec<(&str, usize)> = p
            .sources
            .iter()
            .map(|s| (s.origin.as_str(), s.keys))
            .collect();
        assert_eq!(
            order,
            vec![("config text", 2), ("environment", 1), ("override", 1)]
        );
        // Any spelling finds the key; the later source wins.
        assert_eq!(p.origin("registry.type"), Some("environment"));
        assert_eq!(p.origin("service.vgroupMapping.g"), Some("config text"));
        assert_eq!(p.origin("client.load-balance.type"), Some("override"));
        assert_eq!(p.origin("txServiceGroup"), None);
    }
}
