//! The `limits.*` settings: rates, per-opcode rule scopes, the settings themselves.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use super::{AllowList, CidrError};
use crate::gateway::settings::off_or_count;

/// A rate: `per_sec` a second on average, up to `burst` at once. `per_sec` 0 is off;
/// `burst` 0 means one second's worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Cells a second (0: no limit).
    pub per_sec: u32,
    /// Cells at once (0: `per_sec`).
    pub burst: u32,
}

impl Rate {
    /// No limit.
    pub const OFF: Rate = Rate {
        per_sec: 0,
        burst: 0,
    };

    /// `n` a second, `n` at once.
    pub const fn per_sec(n: u32) -> Rate {
        Rate {
            per_sec: n,
            burst: 0,
        }
    }

    /// Allows `b` at once.
    pub const fn burst(self, b: u32) -> Rate {
        Rate { burst: b, ..self }
    }

    /// True when this is no limit.
    pub fn is_off(&self) -> bool {
        self.per_sec == 0
    }

    fn effective_burst(&self) -> u32 {
        if self.burst == 0 {
            self.per_sec
        } else {
            self.burst
        }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_off() {
            f.write_str("off")
        } else {
            write!(f, "{}/s, burst {}", self.per_sec, self.effective_burst())
        }
    }
}

impl FromStr for Rate {
    type Err = String;

    /// `20`, `20/s`, `20/s burst 40`, `20 burst 40`; `0` or `off` is no limit.
    fn from_str(s: &str) -> Result<Rate, String> {
        let bad = || format!("`{s}` is not a rate (e.g. `20/s` or `20/s burst 40`; 0 = off)");
        let t = s.trim().to_ascii_lowercase();
        if t == "off" {
            return Ok(Rate::OFF);
        }
        let (rate, burst) = match t.split_once("burst") {
            Some((r, b)) => (r, Some(b)),
            None => (t.as_str(), None),
        };
        let rate = rate.trim().trim_end_matches(',').trim();
        let rate = rate.strip_suffix("/s").unwrap_or(rate).trim();
        let per_sec: u32 = rate.parse().map_err(|_| bad())?;
        let burst = match burst {
            Some(b) => b.trim().parse().map_err(|_| bad())?,
            None => 0,
        };
        Ok(Rate { per_sec, burst })
    }
}

/// A per-opcode rule's scope: `module.opcode`, or `module.*` for every opcode of the
/// module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpcodeKey {
    /// Module id.
    pub module: u16,
    /// Opcode, or `None` for all of the module's.
    pub opcode: Option<u16>,
}

impl fmt::Display for OpcodeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.opcode {
            Some(o) => write!(f, "{}.{o}", self.module),
            None => write!(f, "{}.*", self.module),
        }
    }
}

impl FromStr for OpcodeKey {
    type Err = String;

    fn from_str(s: &str) -> Result<OpcodeKey, String> {
        let bad = || format!("`{s}` is not `module.opcode` or `module.*` (e.g. 2.1)");
        let (m, o) = s.split_once('.').ok_or_else(bad)?;
        let module = m.trim().parse().map_err(|_| bad())?;
        let opcode = match o.trim() {
            "*" => None,
            o => Some(o.parse().map_err(|_| bad())?),
        };
        Ok(OpcodeKey { module, opcode })
    }
}

/// The `limits.*` settings (see the module docs). [`LimitSettings::default`] suits a
/// public gateway; [`LimitSettings::off`] limits nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitSettings {
    /// New connections per client IP (IPv6: per /64).
    pub ip_connects: Rate,
    /// Addresses that get [`allowed_ip_connects`](Self::allowed_ip_connects) instead.
    pub allow: AllowList,
    /// New connections per allow-listed IP.
    pub allowed_ip_connects: Rate,
    /// New connections to this gateway.
    pub global_connects: Rate,
    /// Messages per account.
    pub account_messages: Rate,
    /// Messages per account and opcode (or module).
    pub opcodes: BTreeMap<OpcodeKey, Rate>,
    /// Refused messages within 10 s before the connection is cut (0: never).
    pub kick_after: u32,
    /// Keys each limiter keeps at most.
    pub max_tracked: usize,
}

impl Default for LimitSettings {
    fn default() -> Self {
        LimitSettings {
            ip_connects: Rate::per_sec(20).burst(40),
            allow: AllowList::default(),
            allowed_ip_connects: Rate::per_sec(200).burst(400),
            global_connects: Rate::per_sec(2000),
            account_messages: Rate::per_sec(100).burst(200),
            opcodes: BTreeMap::new(),
            kick_after: 100,
            max_tracked: 100_000,
        }
    }
}

impl LimitSettings {
    /// No limit at all.
    pub fn off() -> Self {
        LimitSettings {
            ip_connects: Rate::OFF,
            allow: AllowList::default(),
            allowed_ip_connects: Rate::OFF,
            global_connects: Rate::OFF,
            account_messages: Rate::OFF,
            opcodes: BTreeMap::new(),
            kick_after: 0,
            max_tracked: 100_000,
        }
    }

    /// Sets one `limits.<key>` (key normalised as the config loader does: lower case,
    /// no `-` or `_`).
    pub(crate) fn set(&mut self, key: &str, v: &str) -> Result<(), String> {
        let count = off_or_count::<u32>;
        match key {
            "ipconnectspersec" => self.ip_connects.per_sec = count(v)?,
            "ipconnectsburst" => self.ip_connects.burst = count(v)?,
            "allow" => self.allow = v.parse().map_err(|e: CidrError| e.to_string())?,
            "allowedipconnectspersec" => self.allowed_ip_connects.per_sec = count(v)?,
            "allowedipconnectsburst" => self.allowed_ip_connects.burst = count(v)?,
            "globalconnectspersec" => self.global_connects.per_sec = count(v)?,
            "globalconnectsburst" => self.global_connects.burst = count(v)?,
            "accountmessagespersec" => self.account_messages.per_sec = count(v)?,
            "accountmessagesburst" => self.account_messages.burst = count(v)?,
            "kickafter" => self.kick_after = count(v)?,
            "maxtracked" => {
                self.max_tracked = v
                    .trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("`{v}`: a number of keys, at least 1"))?
            }
            other => match other.strip_prefix("opcodes.") {
                Some(k) => {
                    self.opcodes.insert(k.parse()?, v.parse()?);
                }
                None => return Err("unknown limits setting".into()),
            },
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_print() {
        assert_eq!("20".parse::<Rate>().unwrap(), Rate::per_sec(20));
        assert_eq!("20/s".parse::<Rate>().unwrap(), Rate::per_sec(20));
        assert_eq!(
            "20/s burst 40".parse::<Rate>().unwrap(),
            Rate::per_sec(20).burst(40)
        );
        assert_eq!(
            " 5, burst 9 ".parse::<Rate>().unwrap(),
            Rate::per_sec(5).burst(9)
        );
        assert!("off".parse::<Rate>().unwrap().is_off());
        assert!("0".parse::<Rate>().unwrap().is_off());
        assert!("fast".parse::<Rate>().is_err());
        assert!("5/m".parse::<Rate>().is_err());
        assert_eq!(Rate::per_sec(20).to_string(), "20/s, burst 20");
        assert_eq!(Rate::per_sec(20).burst(40).to_string(), "20/s, burst 40");
        assert_eq!("2.*".parse::<OpcodeKey>().unwrap().to_string(), "2.*");
        assert_eq!("2.7".parse::<OpcodeKey>().unwrap().opcode, Some(7));
        assert!("2".parse::<OpcodeKey>().is_err());
        assert!("x.1".parse::<OpcodeKey>().is_err());
    }

    #[test]
    fn settings_keys() {
        let mut s = LimitSettings::default();
        s.set("ipconnectspersec", "5").unwrap();
        s.set("ipconnectsburst", "7").unwrap();
        s.set("allow", "10.0.0.0/8,2001:db8::/32").unwrap();
        s.set("globalconnectspersec", "0").unwrap();
        s.set("opcodes.2.1", "3/s burst 4").unwrap();
        s.set("opcodes.3.*", "0").unwrap();
        assert_eq!(s.ip_connects, Rate::per_sec(5).burst(7));
        assert_eq!(s.allow.blocks().len(), 2);
        assert!(s.global_connects.is_off());
        assert_eq!(s.opcodes.len(), 2);
        for (k, v, want) in [
            ("colour", "red", "unknown"),
            ("allow", "10.0.0.0/40", "at most 32"),
            ("ipconnectspersec", "-1", "whole number"),
            ("opcodes.2", "1", "module.opcode"),
            ("opcodes.2.1", "lots", "not a rate"),
            ("maxtracked", "0", "at least 1"),
        ] {
            let e = s.set(k, v).unwrap_err();
            assert!(e.contains(want), "{k}={v}: {e}");
        }
    }
}
