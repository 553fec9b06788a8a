//! The parts of the configuration that other crates own, read together.
//!
//! registry-core interprets only the keys every part of a Seata client shares and keeps
//! the rest raw for their owners ([`Config::part`]): the balancer reads
//! `client.loadBalance.*` ([`crate::loadbalance::LoadBalanceConfig`]), the rpc-client
//! `transport.*` and `client.tm.*` (`meshline::rpc::TransportConfig`, `TmConfig`), each
//! registry backend its `registry.<type>.*` when it is built. Each owner validates its
//! keys and reports the ones it does not know when it reads them; [`read_all`] reads
//! every owner compiled into this build at once, so a program (or `meshline doctor`)
//! can report every bad value and unknown key at start-up rather than when the part is
//! first used. This is the one place that lists the owners.

use crate::{Config, RegistryError};

/// The centre keys the owners ask for one by one when the centre's blob lacks them
/// (Seata's `getConfig` of each), for [`crate::centre::live_config`].
pub fn centre_keys() -> Vec<String> {
    crate::loadbalance::CENTRE_KEYS
        .iter()
        .map(|k| k.to_string())
        .collect()
}

/// Reads every owned part of `config` this build has a reader for: the balancer's,
/// and with the `rpc` feature the transport's and the TM's. Returns the unknown-key
/// messages (by name, never by value; each also logged), or the first invalid value,
/// naming its key and where it came from.
pub fn read_all(config: &Config) -> Result<Vec<String>, RegistryError> {
    let warnings = crate::loadbalance::LoadBalanceConfig::from_config(config)?.warnings;
    #[cfg(feature = "rpc")]
    let warnings = {
        let mut warnings = warnings;
        warnings.extend(crate::rpc::TransportConfig::from_config(config)?.warnings);
        warnings.extend(crate::rpc::TmConfig::from_config(config)?.warnings);
        warnings
    };
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::Format;

    #[test]
    fn every_owner_is_read() {
        let c = Config::from_text(
            "client.loadBalance.typo=1\ntransport.heartbeet=1\nclient.tm.retry=1\n",
            Format::Properties,
        )
        .unwrap();
        assert!(
            c.warnings.is_empty(),
            "the loader leaves them to their owners"
        );
        let w = read_all(&c).unwrap();
        let expected = if cfg!(feature = "rpc") { 3 } else { 1 };
        assert_eq!(w.len(), expected, "{w:?}");
        assert!(w[0].contains("`client.loadBalance.typo`"), "{w:?}");
        let bad =
            Config::from_text("client.loadBalance.virtualNodes=x\n", Format::Properties).unwrap();
        let e = read_all(&bad).unwrap_err().to_string();
        assert!(e.contains("key `client.loadBalance.virtualNodes`"), "{e}");
    }
}
