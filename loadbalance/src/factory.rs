//! Choosing an algorithm by name, as `client.loadBalance.type` does.
//!
//! Seata's five names are accepted exactly as Seata spells them, case-insensitively,
//! and so are short aliases (`-`, `_`, `.` and spaces are ignored):
//!
//! | Algorithm                          | Names                                                      |
//! |------------------------------------|------------------------------------------------------------|
//! | [`XidLoadBalance`]                 | `XID`                                                      |
//! | [`RandomLoadBalance`]              | `RandomLoadBalance`, `random`                              |
//! | [`RoundRobinLoadBalance`]          | `RoundRobinLoadBalance`, `round-robin`, `rr`               |
//! | [`ConsistentHashLoadBalance`] Java | `ConsistentHashLoadBalance`, `ConsistentHashJava`, `ch-java` |
//! | [`ConsistentHashLoadBalance`] fast | `ConsistentHash`, `consistent-hash`, `ch`, `ketama`        |
//! | [`LeastActiveLoadBalance`]         | `LeastActiveLoadBalance`, `least-active`                   |
//! | [`P2cLoadBalance`]                 | `P2C`, `peak-ewma`, `p2c-peak-ewma`                        |
//! | [`BoundedLoadLoadBalance`]         | `BoundedLoad`, `bounded-load-consistent-hash`, `chbl`      |
//! | [`JumpHashLoadBalance`]            | `JumpHash`, `jump`, `jump-consistent-hash`                 |
//! | game: account / role / source hash | `AccountHash`, `RoleHash`, `SourceHash` (`ip-hash`)        |
//! | game: fill one by one              | `FillOneByOne`, `fill`                                     |
//! | game: load-weighted random         | `LoadWeighted`, `load`                                     |
//! | game: fewest requests              | `FewestRequests`, `least-requests`                         |
//!
//! `zone:<name>` wraps any of them in [`ZoneAwareLoadBalance`]. `xid:<name>` routes by
//! XID as `XID` does and picks with `<name>` where `XID` would pick at random
//! ([`XidFirstLoadBalance`]): `xid:P2C` keeps each transaction on the TC that began it
//! and moves the other calls off a slow TC.
//!
//! `ConsistentHashLoadBalance`, Seata's name, is Seata-Java's ring (SHA-256,
//! `client.loadBalance.virtualNodes` points per server, default 10): a fleet that
//! mixes Java and Rust clients sends every XID to the same TC, as a Seata
//! configuration expects (`ConsistentHashJava` and `java-consistent-hash` are aliases).
//! meshline's faster ring (XXH3, weighted, O(1) lookup, not Java-compatible) has names
//! of its own: `ConsistentHash`, `consistent-hash`, `ch`, `ketama`; what they build is
//! [`LoadBalanceOptions::consistent_hash`].

use std::sync::Arc;
use std::time::Duration;

use crate::{
    AffinityHashLoadBalance, BoundedLoadLoadBalance, ConsistentHashLoadBalance, FillLoadBalance,
    HashMode, JumpHashLoadBalance, LeastActiveLoadBalance, LoadBalance, LoadBalanceError,
    LoadWeightedLoadBalance, P2cLoadBalance, RandomLoadBalance, RoundRobinLoadBalance,
    XidFirstLoadBalance, XidLoadBalance, ZoneAwareLoadBalance, fewest_requests,
};

/// Tunables of the algorithms [`by_name_with`] creates.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadBalanceOptions {
    /// What meshline's own names `ConsistentHash`, `consistent-hash`, `ch`, `ketama`
    /// build. Default: the fast ring. (Seata's `ConsistentHashLoadBalance` is always the
    /// Java ring with [`java_virtual_nodes`](Self::java_virtual_nodes).)
    pub consistent_hash: HashMode,
    /// Virtual nodes of the Java-compatible ring (`client.loadBalance.virtualNodes`,
    /// default 10).
    pub java_virtual_nodes: u32,
    /// Bounded-load factor `c` (default 1.25, at least 1).
    pub balance_factor: f64,
    /// Fill-one-by-one default capacity per endpoint (default 1000).
    pub fill_capacity: u32,
    /// Zone preference: spill over below this many usable local endpoints (default 1).
    pub zone_min_healthy: usize,
    /// P2C: latency assumed for an endpoint that has not answered yet (default 30 ms).
    pub p2c_default_rtt: Duration,
}

impl Default for LoadBalanceOptions {
    fn default() -> Self {
        LoadBalanceOptions {
            consistent_hash: HashMode::default(),
            java_virtual_nodes: crate::algorithms::java_ring::SEATA_DEFAULT_VIRTUAL_NODES,
            balance_factor: crate::algorithms::bounded::DEFAULT_BALANCE_FACTOR,
            fill_capacity: 1000,
            zone_min_healthy: 1,
            p2c_default_rtt: Duration::from_millis(30),
        }
    }
}

/// The algorithm called `name` (see the module table), with default options.
pub fn by_name(name: &str) -> Result<Arc<dyn LoadBalance>, LoadBalanceError> {
    by_name_with(name, &LoadBalanceOptions::default())
}

/// The algorithm Seata's `client.loadBalance.*` keys select: `kind` is
/// `client.loadBalance.type`, `virtual_nodes` is `client.loadBalance.virtualNodes`
/// (sizes the Java-compatible ring; 0 counts as 1). The keys themselves are read by the
/// configuration crate (`meshline_config::balancer::LoadBalanceConfig`): this crate
/// takes their values and depends on no configuration.
pub fn from_seata_keys(
    kind: &str,
    virtual_nodes: u32,
) -> Result<Arc<dyn LoadBalance>, LoadBalanceError> {
    let options = LoadBalanceOptions {
        java_virtual_nodes: virtual_nodes.max(1),
        ..LoadBalanceOptions::default()
    };
    by_name_with(kind, &options)
}

/// The algorithm called `name`, with `options`.
pub fn by_name_with(
    name: &str,
    options: &LoadBalanceOptions,
) -> Result<Arc<dyn LoadBalance>, LoadBalanceError> {
    let trimmed = name.trim();
    if let Some((prefix, inner)) = trimmed.split_once(':')
        && normalise(prefix) == "zone"
    {
        let inner = by_name_with(inner, options)?;
        return Ok(Arc::new(
            ZoneAwareLoadBalance::new(inner).with_min_healthy(options.zone_min_healthy),
        ));
    }
    if let Some((prefix, inner)) = trimmed.split_once(':')
        && normalise(prefix) == "xid"
    {
        let inner = by_name_with(inner, options)?;
        return Ok(Arc::new(XidFirstLoadBalance::new(inner)));
    }
    let wanted = normalise(trimmed);
    match NAMES
        .iter()
        .find(|entry| entry.aliases.contains(&wanted.as_str()))
    {
        Some(entry) => (entry.make)(options),
        None => Err(LoadBalanceError::UnknownName {
            name: name.to_owned(),
        }),
    }
}

/// One row of the name table: the name users are told about, every accepted spelling
/// (normalised: lower case, without `-`, `_`, `.` and spaces) and the constructor.
struct Named {
    name: &'static str,
    aliases: &'static [&'static str],
    make: fn(&LoadBalanceOptions) -> Result<Arc<dyn LoadBalance>, LoadBalanceError>,
}

/// Every name [`by_name_with`] accepts (apart from the `zone:` prefix), in the order the
/// "unknown load balancer" error lists them: the single source of both.
static NAMES: &[Named] = &[
    Named {
        name: "XID",
        aliases: &["xid"],
        make: |_| Ok(Arc::new(XidLoadBalance)),
    },
    Named {
        name: "RandomLoadBalance",
        aliases: &["randomloadbalance", "random"],
        make: |_| Ok(Arc::new(RandomLoadBalance)),
    },
    Named {
        name: "RoundRobinLoadBalance",
        aliases: &["roundrobinloadbalance", "roundrobin", "rr"],
        make: |_| Ok(Arc::new(RoundRobinLoadBalance::new())),
    },
    // Seata's name, Seata's ring: what a Java client of the same fleet computes.
    Named {
        name: "ConsistentHashLoadBalance",
        aliases: &[
            "consistenthashloadbalance",
            "consistenthashjava",
            "javaconsistenthash",
            "chjava",
            "consistenthashloadbalancejava",
        ],
        make: |o| {
            Ok(Arc::new(ConsistentHashLoadBalance::java(
                o.java_virtual_nodes,
            )))
        },
    },
    // meshline's own names: the fast ring (or what `consistent_hash` asks for).
    Named {
        name: "ConsistentHash",
        aliases: &["consistenthash", "ch", "ketama", "consistenthashfast"],
        make: |o| {
            Ok(Arc::new(match o.consistent_hash {
                HashMode::Java { .. } => ConsistentHashLoadBalance::java(o.java_virtual_nodes),
                fast => ConsistentHashLoadBalance::with_mode(fast),
            }))
        },
    },
    Named {
        name: "LeastActiveLoadBalance",
        aliases: &["leastactiveloadbalance", "leastactive"],
        make: |_| Ok(Arc::new(LeastActiveLoadBalance::new())),
    },
    Named {
        name: "P2C",
        aliases: &["p2c", "peakewma", "p2cpeakewma"],
        make: |o| {
            Ok(Arc::new(
                P2cLoadBalance::new().with_default_rtt(o.p2c_default_rtt),
            ))
        },
    },
    Named {
        name: "BoundedLoad",
        aliases: &[
            "boundedload",
            "boundedloadconsistenthash",
            "chbl",
            "consistenthashboundedload",
        ],
        make: |o| {
            Ok(Arc::new(
                BoundedLoadLoadBalance::new().with_factor(o.balance_factor)?,
            ))
        },
    },
    Named {
        name: "JumpHash",
        aliases: &["jumphash", "jump", "jumpconsistenthash"],
        make: |_| Ok(Arc::new(JumpHashLoadBalance)),
    },
    Named {
        name: "AccountHash",
        aliases: &["accounthash", "account"],
        make: |_| Ok(Arc::new(AffinityHashLoadBalance::account())),
    },
    Named {
        name: "RoleHash",
        aliases: &["rolehash", "role"],
        make: |_| Ok(Arc::new(AffinityHashLoadBalance::role())),
    },
    Named {
        name: "SourceHash",
        aliases: &["sourcehash", "iphash", "sourceaddress", "sourceaddresshash"],
        make: |_| Ok(Arc::new(AffinityHashLoadBalance::source_address())),
    },
    Named {
        name: "FillOneByOne",
        aliases: &["fillonebyone", "fill"],
        make: |o| Ok(Arc::new(FillLoadBalance::new(o.fill_capacity))),
    },
    Named {
        name: "LoadWeighted",
        aliases: &["loadweighted", "load", "loadweightedrandom"],
        make: |_| Ok(Arc::new(LoadWeightedLoadBalance)),
    },
    Named {
        name: "FewestRequests",
        aliases: &["fewestrequests", "leastrequests", "leastrequest"],
        make: |_| Ok(Arc::new(fewest_requests())),
    },
];

/// The names the "unknown load balancer" error offers, from the name table:
/// `XID, RandomLoadBalance, ...`.
pub(crate) fn known_names() -> String {
    let names: Vec<&str> = NAMES.iter().map(|entry| entry.name).collect();
    names.join(", ")
}

fn normalise(name: &str) -> String {
    name.chars()
        .filter(|c| !matches!(c, '-' | '_' | '.' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seata_names_and_aliases() {
        for (name, want) in [
            ("XID", "XID"),
            ("xid", "XID"),
            ("RandomLoadBalance", "RandomLoadBalance"),
            ("randomloadbalance", "RandomLoadBalance"),
            ("random", "RandomLoadBalance"),
            ("RoundRobinLoadBalance", "RoundRobinLoadBalance"),
            ("round-robin", "RoundRobinLoadBalance"),
            ("ConsistentHashLoadBalance", "ConsistentHashLoadBalance"),
            ("ConsistentHashJava", "ConsistentHashLoadBalance"),
            ("consistent_hash", "ConsistentHashLoadBalance"),
            ("LEASTACTIVELOADBALANCE", "LeastActiveLoadBalance"),
            ("least-active", "LeastActiveLoadBalance"),
            ("p2c", "P2C"),
            ("bounded-load", "BoundedLoadConsistentHash"),
            ("jump", "JumpHash"),
            ("AccountHash", "AccountHash"),
            ("ip-hash", "SourceHash"),
            ("fill", "FillOneByOne"),
            ("LoadWeighted", "LoadWeighted"),
            ("fewest-requests", "FewestRequests"),
            (" zone:rr ", "zone:RoundRobinLoadBalance"),
            ("Zone:XID", "zone:XID"),
        ] {
            assert_eq!(by_name(name).unwrap().name(), want, "{name}");
        }
    }

    #[test]
    fn every_table_name_and_alias_resolves_and_the_error_lists_the_table() {
        let err = by_name("nope").err().unwrap().to_string();
        for entry in NAMES {
            assert_eq!(
                normalise(entry.name),
                entry.aliases[0],
                "{}: the first alias is the name",
                entry.name
            );
            for alias in entry.aliases {
                assert_eq!(*alias, normalise(alias), "{alias} is not normalised");
                by_name(alias).unwrap_or_else(|e| panic!("{alias}: {e}"));
            }
            by_name(entry.name).unwrap();
            assert!(err.contains(entry.name), "{err} lacks {}", entry.name);
        }
        assert!(err.contains(&known_names()), "{err}");
        let mut all: Vec<&str> = NAMES
            .iter()
            .flat_map(|e| e.aliases.iter().copied())
            .collect();
        all.sort_unstable();
        let len = all.len();
        all.dedup();
        assert_eq!(all.len(), len, "an alias names two algorithms");
    }

    /// The module docs' table names only spellings the table accepts, and every
    /// algorithm of the table.
    #[test]
    fn the_doc_table_agrees_with_the_name_table() {
        let docs: Vec<&str> = include_str!("factory.rs")
            .lines()
            .filter(|l| l.starts_with("//! | ") && !l.starts_with("//! | Algorithm"))
            .filter_map(|l| l.split('|').nth(2))
            .flat_map(|cell| cell.split('`').skip(1).step_by(2))
            .collect();
        assert!(docs.len() > NAMES.len(), "{docs:?}");
        for spelling in &docs {
            by_name(spelling).unwrap_or_else(|e| panic!("documented {spelling}: {e}"));
        }
        for entry in NAMES {
            assert!(
                docs.contains(&entry.name),
                "{} is not documented",
                entry.name
            );
        }
    }

    #[test]
    fn unknown_names_are_errors_naming_the_name() {
        for bad in ["", "Weighted", "zone:", "zone:nope", "XID2"] {
            let err = by_name(bad).err().expect(bad).to_string();
            assert!(err.contains("unknown load balancer"), "{err}");
        }
        let opts = LoadBalanceOptions {
            balance_factor: 0.5,
            ..LoadBalanceOptions::default()
        };
        assert!(matches!(
            by_name_with("bounded-load", &opts),
            Err(LoadBalanceError::InvalidOption { .. })
        ));
    }

    #[test]
    fn from_seata_config() {
        assert_eq!(
            from_seata_keys("ConsistentHashJava", 20).unwrap().name(),
            "ConsistentHashLoadBalance"
        );
    }
}
