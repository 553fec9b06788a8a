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
mod connect;
mod message;
mod settings;

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use governor::clock::{Clock, DefaultClock};
use tokio::sync::Semaphore;

pub use allow::{AllowList, Cidr, CidrError, canonical, ip_key};
use bounded::{DirectLimit, KeyedLimit};
pub(crate) use message::AbuseMeter;
pub use settings::{LimitSettings, OpcodeKey, Rate};

/// Connections being told why they were refused at once, at most; past that a refused
/// connection is closed without a word.
const REFUSING_AT_ONCE: usize = 256;

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
}

#[cfg(test)]
use governor::clock::FakeRelativeClock;

/// The limiters of `LimitSettings::off()` changed by `tweak`, on a fake clock (for the
/// tests here and in the submodules).
#[cfg(test)]
fn test_limits(
    tweak: impl FnOnce(&mut LimitSettings),
) -> (Limits<FakeRelativeClock>, FakeRelativeClock) {
    let mut s = LimitSettings::off();
    tweak(&mut s);
    let clock = FakeRelativeClock::default();
    (Limits::with_clock(&s, clock.clone()), clock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_off_limits_nothing() {
        let (l, _) = test_limits(|_| {});
        let a = "a".to_string();
        for _ in 0..10_000 {
            assert!(l.check_connect("127.0.0.1".parse().unwrap()).is_ok());
            assert!(l.check_message(&a, 1, 1).is_ok());
        }
        assert_eq!(l.tracked_ips(), 0);
        assert!(!l.abuse_meter().refused());
    }
}
