//! Message limits: per account and per opcode rule (also per account), checked for
//! every message after admission; the abuse meter that disconnects a client which
//! keeps going over them (`kick-after`).

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::Clock;
use governor::{Quota, RateLimiter};

use super::{LimitKind, Limited, Limits, OpcodeKey};

/// The window of `kick-after`.
const ABUSE_WINDOW: Duration = Duration::from_secs(10);

impl<C: Clock> Limits<C> {
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
    use super::super::test_limits as limits;
    use super::*;
    use crate::gateway::limits::Rate;

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
    fn the_abuse_meter_cuts_after_its_budget() {
        let (l, _) = limits(|s| s.kick_after = 5);
        let mut m = l.abuse_meter();
        assert_eq!((0..5).filter(|_| m.refused()).count(), 0);
        assert!(m.refused());
    }
}
