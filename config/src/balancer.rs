//! The balancer's keys, read from its part of the configuration: Seata's
//! `client.loadBalance.*` and seata-go's `getty.load-balance-type`.
//!
//! Seata-Java reads `client.loadBalance.type` (Spring: `seata.client.load-balance.type`)
//! and `client.loadBalance.virtualNodes`; seata-go reads only
//! `seata.getty.load-balance-type` and ignores `client.load-balance.*`. meshline reads
//! both into [`LoadBalanceConfig::kind`]: a seata-go file works unchanged. When both
//! are set, in any source and in any order, `client.loadBalance.type` wins (it is
//! Seata's own key, and the one the Java clients of a mixed fleet read); the getty
//! value is then ignored (logged at debug level). A name means the same whichever key
//! it came from: `ConsistentHashLoadBalance` is Seata-Java's ring with
//! `client.loadBalance.virtualNodes` points per server (seata-go's own ring is MD5 with
//! a fixed 10 and is not reproduced). seata-go's other `getty.*` keys are accepted
//! without a warning and have no effect.
//!
//! They are read here, with the configuration, and not in `meshline-loadbalance`: the
//! balancer crate depends on no configuration at all and takes what these keys select
//! as plain values (`meshline_loadbalance::from_seata_keys(kind, virtual_nodes)`);
//! whoever builds a balancer from a configuration (the rpc-client, the facade, the
//! CLI) reads [`LoadBalanceConfig`] and passes them on.

use crate::{Config, ConfigError};

/// Seata's default for `client.loadBalance.virtualNodes`: points per server on its
/// consistent-hash ring.
pub const SEATA_DEFAULT_VIRTUAL_NODES: u32 = 10;

/// The keys a Seata client looks up one by one in a configuration centre when its
/// blob lacks them (Seata's `getConfig` of each): what the `meshline` facade adds to
/// the centre's single keys.
pub const CENTRE_KEYS: &[&str] = &["client.loadBalance.type", "client.loadBalance.virtualNodes"];

/// `client.loadBalance.*` (and seata-go's `getty.load-balance-type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadBalanceConfig {
    /// `client.loadBalance.type`, else `getty.load-balance-type`. Default `XID`.
    pub kind: String,
    /// `client.loadBalance.virtualNodes`: points per server of Seata-Java's ring.
    /// Default 10.
    pub virtual_nodes: u32,
    /// The keys of `client.loadBalance.*` this crate does not know, one message each
    /// (by name and origin, never the value; also logged).
    pub warnings: Vec<String>,
}

impl Default for LoadBalanceConfig {
    fn default() -> Self {
        LoadBalanceConfig {
            kind: "XID".into(),
            virtual_nodes: SEATA_DEFAULT_VIRTUAL_NODES,
            warnings: Vec::new(),
        }
    }
}

impl LoadBalanceConfig {
    /// The balancer keys of `config`, validated; the keys of `client.loadBalance.*` this
    /// crate does not know are reported (logged, by name) as unknown.
    pub fn from_config(config: &Config) -> Result<LoadBalanceConfig, ConfigError> {
        let d = LoadBalanceConfig::default();
        let part = config.part("client.loadBalance");
        let r = part.reader();
        let kind = r.parse("type", nonempty)?;
        let virtual_nodes = r.number("virtualNodes", d.virtual_nodes)?;
        let mut warnings = r.finish();
        let getty = config.part("getty");
        let g = getty.reader();
        let getty_kind = g.parse("loadBalanceType", nonempty)?;
        // seata-go's other getty keys are its own; none is meshline's.
        g.accept_prefixes(&[""]);
        warnings.extend(g.finish());
        let kind = match (kind, getty_kind) {
            (Some(k), Some(_)) => {
                tracing::debug!(
                    "getty.load-balance-type ignored: client.loadBalance.type ({k}) is set"
                );
                k
            }
            (Some(k), None) | (None, Some(k)) => k,
            (None, None) => d.kind,
        };
        Ok(LoadBalanceConfig {
            kind,
            virtual_nodes,
            warnings,
        })
    }
}

fn nonempty(v: &str) -> Result<String, String> {
    match v.trim() {
        "" => Err("must not be empty".into()),
        t => Ok(t.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use crate::{ConfigLoader, Format};

    use super::*;

    fn read(text: &str, format: Format) -> LoadBalanceConfig {
        LoadBalanceConfig::from_config(&Config::from_text(text, format).unwrap()).unwrap()
    }

    #[test]
    fn seatas_defaults_and_keys() {
        let d = read("", Format::Properties);
        assert_eq!((d.kind.as_str(), d.virtual_nodes), ("XID", 10));
        let c = read(
            "client.loadBalance.type=ConsistentHashLoadBalance\nclient.loadBalance.virtualNodes=20\n",
            Format::Properties,
        );
        assert_eq!(
            (c.kind.as_str(), c.virtual_nodes),
            ("ConsistentHashLoadBalance", 20)
        );
        let y = read(
            "seata:\n  client:\n    load-balance:\n      type: RandomLoadBalance\n",
            Format::Yaml,
        );
        assert_eq!(y.kind, "RandomLoadBalance");
        assert!(y.warnings.is_empty());
    }

    #[test]
    fn client_load_balance_type_wins_over_seata_go_getty_key() {
        // seata-go alone: its key is honoured, its other getty keys are quietly its own.
        let go = "seata:\n  getty:\n    load-balance-type: RoundRobinLoadBalance\n    \
                  reconnect-interval: 0\n    session:\n      compress-encoding: false\n";
        let c = read(go, Format::Yaml);
        assert_eq!(c.kind, "RoundRobinLoadBalance");
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        // Both in one file: Seata's key wins.
        let both = "seata:\n  getty:\n    load-balance-type: RoundRobinLoadBalance\n  \
                    client:\n    load-balance:\n      type: ConsistentHashLoadBalance\n";
        assert_eq!(read(both, Format::Yaml).kind, "ConsistentHashLoadBalance");
        // In separate sources, in either order: Seata's key wins.
        for (first, second) in [
            ("client.loadBalance.type", "getty.load-balance-type"),
            ("getty.load-balance-type", "client.loadBalance.type"),
        ] {
            let value = |k: &str| {
                if k.starts_with("client") {
                    "LeastActiveLoadBalance"
                } else {
                    "RandomLoadBalance"
                }
            };
            let c = ConfigLoader::new()
                .set(first, value(first))
                .set(second, value(second))
                .load()
                .unwrap();
            assert_eq!(
                LoadBalanceConfig::from_config(&c).unwrap().kind,
                "LeastActiveLoadBalance",
                "{first} then {second}"
            );
        }
    }

    #[test]
    fn bad_values_name_the_key_and_unknown_keys_are_reported_by_name() {
        for (text, want) in [
            (
                "client.loadBalance.virtualNodes=-3",
                "key `client.loadBalance.virtualNodes` has invalid value `-3`",
            ),
            (
                "client.loadBalance.type=",
                "key `client.loadBalance.type` has invalid value ``: must not be empty",
            ),
        ] {
            let c = Config::from_text(text, Format::Properties).unwrap();
            let e = LoadBalanceConfig::from_config(&c).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
        let c = read("client.loadBalance.typo=s3cret\n", Format::Properties);
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(
            c.warnings[0].contains("unknown config key `client.loadBalance.typo`")
                && c.warnings[0].contains("did you mean `type`")
                && !c.warnings[0].contains("s3cret"),
            "{:?}",
            c.warnings
        );
    }
}
