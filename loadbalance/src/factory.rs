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
//! | [`ConsistentHashLoadBalance`] fast | `ConsistentHashLoadBalance`, `consistent-hash`, `ch`, `ketama` |
//! | [`ConsistentHashLoadBalance`] Java | `ConsistentHashJava`, `java-consistent-hash`, `ch-java`    |
//! | [`LeastActiveLoadBalance`]         | `LeastActiveLoadBalance`, `least-active`                   |
//! | [`P2cLoadBalance`]                 | `P2C`, `peak-ewma`, `p2c-peak-ewma`                        |
//! | [`BoundedLoadLoadBalance`]         | `BoundedLoad`, `bounded-load-consistent-hash`, `chbl`      |
//! | [`JumpHashLoadBalance`]            | `JumpHash`, `jump`, `jump-consistent-hash`                 |
//! | game: account / role / source hash | `AccountHash`, `RoleHash`, `SourceHash` (`ip-hash`)        |
//! | game: fill one by one              | `FillOneByOne`, `fill`                                     |
//! | game: load-weighted random         | `LoadWeighted`, `load`                                     |
//! | game: fewest requests              | `FewestRequests`, `least-requests`                         |
//!
//! `zone:<name>` wraps any of them in [`ZoneAwareLoadBalance`].
//!
//! `ConsistentHashLoadBalance` means the fast ring by default. A fleet that mixes Java
//! and Rust Seata clients, which must agree on where an XID goes, should use
//! `ConsistentHashJava` or set [`LoadBalanceOptions::consistent_hash`] to
//! [`HashMode::java`].

use std::sync::Arc;
use std::time::Duration;

use meshline_registry_core::config::LoadBalanceConfig;

use crate::{
    AffinityHashLoadBalance, BoundedLoadLoadBalance, ConsistentHashLoadBalance, FillLoadBalance,
    HashMode, JumpHashLoadBalance, LeastActiveLoadBalance, LoadBalance, LoadBalanceError,
    LoadWeightedLoadBalance, P2cLoadBalance, RandomLoadBalance, RoundRobinLoadBalance,
    XidLoadBalance, ZoneAwareLoadBalance, fewest_requests,
};

/// Tunables of the algorithms [`by_name_with`] creates.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadBalanceOptions {
    /// What `ConsistentHashLoadBalance` means. Default: the fast ring.
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
            java_virtual_nodes: crate::java_ring::SEATA_DEFAULT_VIRTUAL_NODES,
            balance_factor: crate::bounded::DEFAULT_BALANCE_FACTOR,
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

/// The algorithm Seata's `client.loadBalance.*` keys select; `virtualNodes` sizes the
/// Java-compatible ring.
pub fn from_config(config: &LoadBalanceConfig) -> Result<Arc<dyn LoadBalance>, LoadBalanceError> {
    let options = LoadBalanceOptions {
        java_virtual_nodes: config.virtual_nodes.max(1),
        ..LoadBalanceOptions::default()
    };
    by_name_with(&config.kind, &options)
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
    let unknown = || LoadBalanceError::UnknownName {
        name: name.to_owned(),
    };
    let lb: Arc<dyn LoadBalance> = match normalise(trimmed).as_str() {
        "xid" => Arc::new(XidLoadBalance),
        "randomloadbalance" | "random" => Arc::new(RandomLoadBalance),
        "roundrobinloadbalance" | "roundrobin" | "rr" => Arc::new(RoundRobinLoadBalance::new()),
        "consistenthashloadbalance" | "consistenthash" | "ch" | "ketama" => Arc::new(match options
            .consistent_hash
        {
            HashMode::Java { .. } => ConsistentHashLoadBalance::java(options.java_virtual_nodes),
            fast => ConsistentHashLoadBalance::with_mode(fast),
        }),
        "consistenthashjava"
        | "javaconsistenthash"
        | "chjava"
        | "consistenthashloadbalancejava" => {
            Arc::new(ConsistentHashLoadBalance::java(options.java_virtual_nodes))
        }
        "leastactiveloadbalance" | "leastactive" => Arc::new(LeastActiveLoadBalance::new()),
        "p2c" | "peakewma" | "p2cpeakewma" => {
            Arc::new(P2cLoadBalance::new().with_default_rtt(options.p2c_default_rtt))
        }
        "boundedload" | "boundedloadconsistenthash" | "chbl" | "consistenthashboundedload" => {
            Arc::new(BoundedLoadLoadBalance::new().with_factor(options.balance_factor)?)
        }
        "jumphash" | "jump" | "jumpconsistenthash" => Arc::new(JumpHashLoadBalance),
        "accounthash" | "account" => Arc::new(AffinityHashLoadBalance::account()),
        "rolehash" | "role" => Arc::new(AffinityHashLoadBalance::role()),
        "sourcehash" | "iphash" | "sourceaddress" | "sourceaddresshash" => {
            Arc::new(AffinityHashLoadBalance::source_address())
        }
        "fillonebyone" | "fill" => Arc::new(FillLoadBalance::new(options.fill_capacity)),
        "loadweighted" | "load" | "loadweightedrandom" => Arc::new(LoadWeightedLoadBalance),
        "fewestrequests" | "leastrequests" | "leastrequest" => Arc::new(fewest_requests()),
        _ => return Err(unknown()),
    };
    Ok(lb)
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
        let cfg = LoadBalanceConfig {
            kind: "ConsistentHashJava".into(),
            virtual_nodes: 20,
        };
        assert_eq!(
            from_config(&cfg).unwrap().name(),
            "ConsistentHashLoadBalance"
        );
    }
}
