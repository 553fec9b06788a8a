//! Rate limits: new connections per client IP and gateway-wide, checked when a
//! connection is accepted; messages per account and per opcode, checked for every
//! message after admission.
//!
//! ```yaml
//! gateway:
//!   limits:
//!     ip-connects-per-sec: 20           # new connections per client IP (0 = no limit)
//!     ip-connects-burst: 40
//!     allow: 203.0.113.0/24, 2001:db8:5::/48   # known proxies / NATs (internet cafés)
//!     allowed-ip-connects-per-sec: 200  # their per-IP limit instead (0 = none)
//!     allowed-ip-connects-burst: 400
//!     global-connects-per-sec: 2000     # new connections to this gateway (0 = no limit)
//!     global-connects-burst: 2000
//!     account-messages-per-sec: 100     # messages per account (0 = no limit)
//!     account-messages-burst: 200
//!     opcodes:                          # per account, per module.opcode (or module.*)
//!       "2.1": 5/s burst 10             #   chat: 5 a second, 10 at once
//!       "3.*": 30/s burst 60            #   any room opcode
//!     kick-after: 100                   # refused messages within 10 s before a disconnect (0 = never)
//!     max-tracked: 100000               # keys each limiter keeps (bounded memory)
//! ```
//!
//! **Connections** are checked in the accept loop, before the gateway spends anything
//! on the connection beyond the socket the kernel already made: no task, no buffer, no
//! handshake. A refused connection is told why when one of a small number of refusal
//! slots is free (`AUTH_FAIL` with [`Refusal::RateLimited`](super::admission::Refusal),
//! code 10, and the limit's name; over WebSocket after the handshake, as every refusal),
//! else it is just closed: a flood must not turn into a flood of refusal work. The
//! per-IP check comes first, so one address flooding is refused without using up the
//! gateway-wide budget that everyone else shares.
//!
//! **The allow-list** exists because the per-IP limit is wrong for a shared address: an
//! internet café, a campus or a carrier NAT puts many players behind one IP. Their
//! addresses get a separate, higher per-IP limit (not none: a NAT can still be abused),
//! and the gateway-wide limit still applies to them.
//!
//! **Messages** (frames for backend modules; the gateway's own PING is not counted) are
//! limited per account — keyed by account, not connection, so reconnecting does not
//! refill the bucket — and by per-opcode rules, also per account (a `module.*` rule is
//! one bucket for the whole module; a `module.opcode` rule takes precedence over it). A
//! message over a limit is answered at once with an error reply `rate limited: <which
//! limit>` and never reaches a backend; the connection stays. A client that keeps
//! going — refused more than `kick-after` times within 10 s — is disconnected (KICK
//! `rate limited: sustained abuse`): a client that ignores the replies is a script, and
//! reading its frames costs the gateway even when they are refused.
//!
//! **Memory** is bounded under a flood from many addresses: every keyed limiter keeps
//! at most `max-tracked` keys (see `bounded`; a key that does not fit is judged as a
//! fresh key and not kept), and once a second the gateway drops the keys whose bucket
//! has refilled (governor's `retain_recent`), giving memory back when the map shrinks.
//! IPv6 clients are counted per /64 (see `allow`).
//!
//! Every refusal is counted in `gateway_rate_limited_total{kind}` (`ip`, `allowed_ip`,
//! `global`, `account`, `opcode`) and in [`Limits::refused`].

mod allow;
mod bounded;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use allow::{AllowList, Cidr, CidrError, canonical, ip_key};
use bounded::{DirectLimit, KeyedLimit};

/// Connections being told why they were refused at once, at most; past that a refused
/// connection is closed without a word.
const REFUSING_AT_ONCE: usize = 256;
/// The window of `kick-after`.
const ABUSE_WINDOW: Duration = Duration::from_secs(10);

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
        let count = |v: &str| {
            v.trim()
                .parse::<u32>()
                .map_err(|e| format!("`{v}`: {e} (a whole number; 0 = off)"))
        };
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

/// Which limit refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// New connections per client IP.
    Ip,
    /// New connections per allow-listed IP.
    AllowedIp,
    /// New connections to the gateway.
    Global,
    /// Messages per account.
    Account,
    /// Messages per account and opcode.
    Opcode,
}

impl LimitKind {
    /// Every kind.
    pub const ALL: [LimitKind; 5] = [
        LimitKind::Ip,
        LimitKind::AllowedIp,
        LimitKind::Global,
        LimitKind::Account,
        LimitKind::Opcode,
    ];

    /// The `kind` label of `gateway_rate_limited_total`.
    pub fn label(self) -> &'static str {
        match self {
            LimitKind::Ip => "ip",
            LimitKind::AllowedIp => "allowed_ip",
            LimitKind::Global => "global",
            LimitKind::Account => "account",
            LimitKind::Opcode => "opcode",
        }
    }
}

/// A refusal by a limit: which one, and its rate (for the text the client gets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    /// The limit.
    pub kind: LimitKind,
    /// Its rate.
    pub rate: Rate,
    /// The rule, for [`LimitKind::Opcode`].
    pub rule: Option<OpcodeKey>,
}

impl fmt::Display for Limited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            LimitKind::Ip => write!(f, "per-IP connection limit ({})", self.rate),
            LimitKind::AllowedIp => {
                write!(f, "allow-listed IP connection limit ({})", self.rate)
            }
            LimitKind::Global => write!(f, "gateway connection limit ({})", self.rate),
            LimitKind::Account => write!(f, "per-account message limit ({})", self.rate),
            LimitKind::Opcode => match self.rule {
                Some(r) => write!(f, "opcode {r} limit per account ({})", self.rate),
                None => write!(f, "opcode limit per account ({})", self.rate),
            },
        }
    }
}

/// The running limiters (one per gateway). `C` is the clock (tests use a fake one).
pub struct Limits<C: Clock = DefaultClock> {
    allow: AllowList,
    ip: Option<KeyedLimit<IpAddr, C>>,
    allowed_ip: Option<KeyedLimit<IpAddr, C>>,
    global: Option<DirectLimit<C>>,
    account: Option<KeyedLimit<String, C>>,
    /// `None` values: an explicit "no limit" overriding a `module.*` rule.
    opcodes: HashMap<OpcodeKey, Option<KeyedLimit<String, C>>>,
    kick_after: u32,
    refused: [AtomicU64; LimitKind::ALL.len()],
    refusing: Arc<Semaphore>,
}

impl<C: Clock> fmt::Debug for Limits<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limits")
            .field("allow", &self.allow.to_string())
            .field("tracked_ips", &self.tracked_ips())
            .finish_non_exhaustive()
    }
}

impl Limits<DefaultClock> {
    /// The limiters `settings` describe.
    pub fn new(settings: &LimitSettings) -> Self {
        Self::with_clock(settings, DefaultClock::default())
    }
}

impl<C: Clock + Clone> Limits<C> {
    /// The limiters `settings` describe, on `clock`.
    pub fn with_clock(s: &LimitSettings, clock: C) -> Self {
        let by_ip = |r: Rate| KeyedLimit::new(r, s.max_tracked, clock.clone());
        let by_account = |r: Rate| KeyedLimit::new(r, s.max_tracked, clock.clone());
        Limits {
            allow: s.allow.clone(),
            ip: by_ip(s.ip_connects),
            allowed_ip: by_ip(s.allowed_ip_connects),
            global: DirectLimit::new(s.global_connects, clock.clone()),
            account: by_account(s.account_messages),
            opcodes: s
                .opcodes
                .iter()
                .map(|(k, r)| (*k, by_account(*r)))
                .collect(),
            kick_after: s.kick_after,
            refused: Default::default(),
            refusing: Arc::new(Semaphore::new(REFUSING_AT_ONCE)),
        }
    }
}

impl<C: Clock> Limits<C> {
    fn refuse(&self, kind: LimitKind, rate: Rate, rule: Option<OpcodeKey>) -> Limited {
        self.refused[kind as usize].fetch_add(1, Ordering::Relaxed);
        metrics::counter!("gateway_rate_limited_total", "kind" => kind.label()).increment(1);
        Limited { kind, rate, rule }
    }

    /// Counts a new connection from `ip`: per IP (or allow-listed IP), then
    /// gateway-wide.
    pub fn check_connect(&self, ip: IpAddr) -> Result<(), Limited> {
        let ip = canonical(ip);
        let (per_ip, kind) = if !self.allow.is_empty() && self.allow.contains(ip) {
            (&self.allowed_ip, LimitKind::AllowedIp)
        } else {
            (&self.ip, LimitKind::Ip)
        };
        if let Some(l) = per_ip
            && !l.allow(&ip_key(ip))
        {
            return Err(self.refuse(kind, l.rate(), None));
        }
        if let Some(g) = &self.global
            && !g.allow()
        {
            return Err(self.refuse(LimitKind::Global, g.rate(), None));
        }
        Ok(())
    }

    /// Counts a message of `account` to `module`/`opcode`.
    // `&String`: governor looks keys up by `&K`, and the account keys are `String`s.
    #[allow(clippy::ptr_arg)]
    pub fn check_message(&self, account: &String, module: u16, opcode: u16) -> Result<(), Limited> {
        if let Some(l) = &self.account
            && !l.allow(account)
        {
            return Err(self.refuse(LimitKind::Account, l.rate(), None));
        }
        if self.opcodes.is_empty() {
            return Ok(());
        }
        let exact = OpcodeKey {
            module,
            opcode: Some(opcode),
        };
        let whole = OpcodeKey {
            module,
            opcode: None,
        };
        let rule = match self.opcodes.get_key_value(&exact) {
            Some(r) => Some(r),
            None => self.opcodes.get_key_value(&whole),
        };
        if let Some((key, Some(l))) = rule
            && !l.allow(account)
        {
            return Err(self.refuse(LimitKind::Opcode, l.rate(), Some(*key)));
        }
        Ok(())
    }

    /// Drops the keys whose buckets have refilled (the gateway calls this once a
    /// second).
    pub fn sweep(&self) {
        for l in [&self.ip, &self.allowed_ip].into_iter().flatten() {
            l.sweep();
        }
        let by_account = self.opcodes.values().flatten();
        for l in self.account.iter().chain(by_account) {
            l.sweep();
        }
    }

    /// Refusals by `kind` so far.
    pub fn refused(&self, kind: LimitKind) -> u64 {
        self.refused[kind as usize].load(Ordering::Relaxed)
    }

    /// Client addresses (IPv6: /64s) the per-IP limiters hold now.
    pub fn tracked_ips(&self) -> usize {
        [&self.ip, &self.allowed_ip]
            .into_iter()
            .flatten()
            .map(|l| l.tracked())
            .sum()
    }

    /// Connection checks for addresses that did not fit under `max-tracked`.
    pub fn untracked_ips(&self) -> u64 {
        [&self.ip, &self.allowed_ip]
            .into_iter()
            .flatten()
            .map(|l| l.untracked())
            .sum()
    }

    /// A slot to tell a refused connection why, if one is free.
    pub(crate) fn refusal_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.refusing.clone().try_acquire_owned().ok()
    }

    /// A meter of one connection's refused messages.
    pub(crate) fn abuse_meter(&self) -> AbuseMeter {
        AbuseMeter {
            kick_after: self.kick_after,
            budget: None,
        }
    }
}

/// Counts one connection's refused messages (`kick-after` within 10 s). Its limiter is
/// made at the first refusal: a well-behaved client costs nothing.
pub(crate) struct AbuseMeter {
    kick_after: u32,
    budget: Option<governor::DefaultDirectRateLimiter>,
}

impl AbuseMeter {
    /// Counts a refused message; true when the client is to be disconnected.
    pub(crate) fn refused(&mut self) -> bool {
        let Some(n) = NonZeroU32::new(self.kick_after) else {
            return false;
        };
        let budget = self.budget.get_or_insert_with(|| {
            let period = (ABUSE_WINDOW / n.get()).max(Duration::from_nanos(1));
            let quota = Quota::with_period(period)
                .expect("a non-zero period")
                .allow_burst(n);
            RateLimiter::direct(quota)
        });
        budget.check().is_err()
    }
}

#[cfg(test)]
mod tests {
    use governor::clock::FakeRelativeClock;

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn limits(
        tweak: impl FnOnce(&mut LimitSettings),
    ) -> (Limits<FakeRelativeClock>, FakeRelativeClock) {
        let mut s = LimitSettings::off();
        tweak(&mut s);
        let clock = FakeRelativeClock::default();
        (Limits::with_clock(&s, clock.clone()), clock)
    }

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

    #[test]
    fn per_ip_then_global_and_the_allow_list() {
        let (l, clock) = limits(|s| {
            s.ip_connects = Rate::per_sec(1).burst(3);
            s.allow = "192.0.2.0/24".parse().unwrap();
            s.allowed_ip_connects = Rate::per_sec(1).burst(10);
            s.global_connects = Rate::per_sec(100).burst(20);
        });
        let a = ip("198.51.100.1");
        let refused: Vec<_> = (0..5).filter_map(|_| l.check_connect(a).err()).collect();
        assert_eq!(refused.len(), 2);
        assert_eq!(refused[0].kind, LimitKind::Ip);
        assert_eq!(
            refused[0].to_string(),
            "per-IP connection limit (1/s, burst 3)"
        );
        // The same client through a dual-stack listener is the same key.
        assert!(l.check_connect(ip("::ffff:198.51.100.1")).is_err());
        // Another address has its own bucket.
        assert!(l.check_connect(ip("198.51.100.2")).is_ok());
        // An allow-listed NAT gets its higher limit.
        let nat = ip("192.0.2.77");
        assert_eq!((0..12).filter(|_| l.check_connect(nat).is_ok()).count(), 10);
        assert_eq!(l.check_connect(nat).unwrap_err().kind, LimitKind::AllowedIp);
        assert_eq!(l.refused(LimitKind::Ip), 3);
        // 3 + 1 + 10 counted gateway-wide so far (refusals per IP are not); the global
        // burst of 20 ends 6 connections from fresh addresses later.
        let fresh = (0..10)
            .map(|i| l.check_connect(ip(&format!("203.0.113.{i}"))))
            .filter(|r| r.is_ok())
            .count();
        assert_eq!(fresh, 6);
        assert_eq!(l.refused(LimitKind::Global), 4);
        clock.advance(Duration::from_secs(1));
        assert!(l.check_connect(ip("203.0.113.99")).is_ok());
    }

    #[test]
    fn ipv6_clients_share_their_slash_64() {
        let (l, _) = limits(|s| s.ip_connects = Rate::per_sec(1).burst(2));
        assert!(l.check_connect(ip("2001:db8:1:2::1")).is_ok());
        assert!(l.check_connect(ip("2001:db8:1:2::2")).is_ok());
        assert!(l.check_connect(ip("2001:db8:1:2:ffff::3")).is_err());
        assert!(l.check_connect(ip("2001:db8:1:3::1")).is_ok());
        assert_eq!(l.tracked_ips(), 2);
    }

    #[test]
    fn accounts_and_opcodes() {
        let (l, clock) = limits(|s| {
            s.account_messages = Rate::per_sec(10).burst(10);
            s.opcodes
                .insert("2.1".parse().unwrap(), Rate::per_sec(1).burst(2));
            s.opcodes
                .insert("3.*".parse().unwrap(), Rate::per_sec(1).burst(1));
            s.opcodes.insert("3.9".parse().unwrap(), Rate::OFF);
        });
        let alice = "alice".to_string();
        let bob = "bob".to_string();
        assert!(l.check_message(&alice, 2, 1).is_ok());
        assert!(l.check_message(&alice, 2, 1).is_ok());
        let e = l.check_message(&alice, 2, 1).unwrap_err();
        assert_eq!(e.kind, LimitKind::Opcode);
        assert_eq!(e.to_string(), "opcode 2.1 limit per account (1/s, burst 2)");
        // Other opcodes of the module, and other accounts, are not touched.
        assert!(l.check_message(&alice, 2, 2).is_ok());
        assert!(l.check_message(&bob, 2, 1).is_ok());
        // A module rule is one bucket for the module; an exact "off" rule overrides it.
        assert!(l.check_message(&alice, 3, 1).is_ok());
        assert!(l.check_message(&alice, 3, 2).is_err());
        assert!(l.check_message(&alice, 3, 9).is_ok());
        // Alice has now sent 7 messages counted per account (refusals included);
        // three more, then the account limit.
        for _ in 0..3 {
            assert!(l.check_message(&alice, 1, 1).is_ok());
        }
        let e = l.check_message(&alice, 1, 1).unwrap_err();
        assert_eq!(e.kind, LimitKind::Account);
        assert_eq!(e.to_string(), "per-account message limit (10/s, burst 10)");
        clock.advance(Duration::from_millis(200));
        assert!(l.check_message(&alice, 1, 1).is_ok());
        assert_eq!(l.refused(LimitKind::Opcode), 2);
        assert_eq!(l.refused(LimitKind::Account), 1);
    }

    #[test]
    fn everything_off_limits_nothing() {
        let (l, _) = limits(|_| {});
        let a = "a".to_string();
        for _ in 0..10_000 {
            assert!(l.check_connect(ip("127.0.0.1")).is_ok());
            assert!(l.check_message(&a, 1, 1).is_ok());
        }
        assert_eq!(l.tracked_ips(), 0);
        assert!(!l.abuse_meter().refused());
    }

    #[test]
    fn a_flood_from_many_addresses_is_bounded_in_memory() {
        let (l, clock) = limits(|s| {
            s.ip_connects = Rate::per_sec(20).burst(40);
            s.max_tracked = 5_000;
        });
        // 200,000 distinct addresses in one instant.
        for i in 0..200_000u32 {
            let _ = l.check_connect(IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i)));
        }
        assert_eq!(l.tracked_ips(), 5_000);
        assert_eq!(l.untracked_ips(), 195_000);
        // Once their buckets refill, the sweep forgets them.
        clock.advance(Duration::from_secs(3));
        l.sweep();
        assert_eq!(l.tracked_ips(), 0);
    }

    #[test]
    fn the_abuse_meter_cuts_after_its_budget() {
        let (l, _) = limits(|s| s.kick_after = 5);
        let mut m = l.abuse_meter();
        assert_eq!((0..5).filter(|_| m.refused()).count(), 0);
        assert!(m.refused());
    }
}
