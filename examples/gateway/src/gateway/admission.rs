//! Admission: the first frame must be a valid token, or the connection is closed.
//!
//! A token is `account.expiry.nonce.signature`:
//! - `account`: 1..=64 characters of `[A-Za-z0-9_-]`;
//! - `expiry`: Unix seconds after which the token is refused;
//! - `nonce`: 32 hex digits, random per token;
//! - `signature`: 64 lower-case hex digits, the HMAC-SHA256 with the gateway's shared
//!   secret (`gateway.secret`, its UTF-8 bytes) of the three fields joined by one line
//!   feed (0x0A) and nothing else: `account` LF `expiry` LF `nonce`, no spaces, no
//!   trailing LF (`docs/gateway-protocol.md` has a worked example).
//!
//! The login service mints tokens ([`TokenMinter`]); every gateway holding the same
//! secret verifies them ([`TokenVerifier`]) without a round trip. A nonce is accepted once
//! while its token is valid, so a token captured from the wire cannot be replayed
//! (the replay table keeps only nonces of tokens not yet expired, so it is bounded by
//! the issue rate times the token lifetime).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Why a token was refused; the code goes to the client in `AUTH_FAIL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not of the form `account.expiry.nonce.signature`.
    #[error("malformed token")]
    Malformed,
    /// The signature does not match: not minted with our secret.
    #[error("forged token (bad signature)")]
    Forged,
    /// Past its expiry.
    #[error("expired token")]
    Expired,
    /// Its nonce was already used.
    #[error("replayed token (nonce already used)")]
    Replayed,
    /// No `AUTH` within the admission deadline.
    #[error("no authentication within the deadline")]
    Late,
    /// The first frame was not `AUTH` or `RESUME`.
    #[error("the first frame must be AUTH or RESUME")]
    NotAuth,
    /// Too many connections waiting to authenticate, or the login queue is full (the
    /// refusal's text says which).
    #[error("too many unauthenticated connections")]
    Busy,
    /// A resume named a session this gateway cannot find, or the wrong secret.
    #[error("unknown session or wrong resume secret")]
    BadResume,
    /// A resume needed the shared session store, which cannot be reached now (the
    /// client can authenticate again for a new session).
    #[error("session store unavailable: cannot resume now")]
    StoreUnavailable,
    /// Over a connection-rate limit (per IP, per allow-listed IP or gateway-wide: the
    /// refusal's text names it); try again later.
    #[error("rate limited")]
    RateLimited,
    /// The first frame announced more than `auth-max-frame` bytes (the cap before
    /// login), or more than `max-frame`.
    #[error("first frame over the size limit before login")]
    TooLarge,
    /// What came first was not a frame: a length shorter than the header, a WebSocket
    /// text message, a message that is not one whole frame, or WebSocket garbage.
    #[error("not a frame")]
    BadFrame,
    /// The account already has a session and `duplicate-login` is `refuse-new`.
    #[error("account already logged in")]
    AlreadyOnline,
}

impl Refusal {
    /// Every refusal, in code order (the table of `docs/gateway-protocol.md`).
    pub const ALL: [Refusal; 13] = [
        Refusal::Malformed,
        Refusal::Forged,
        Refusal::Expired,
        Refusal::Replayed,
        Refusal::Late,
        Refusal::NotAuth,
        Refusal::Busy,
        Refusal::BadResume,
        Refusal::StoreUnavailable,
        Refusal::RateLimited,
        Refusal::TooLarge,
        Refusal::BadFrame,
        Refusal::AlreadyOnline,
    ];

    /// The name the protocol document gives it (`MALFORMED_TOKEN`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Refusal::Malformed => "MALFORMED_TOKEN",
            Refusal::Forged => "FORGED",
            Refusal::Expired => "EXPIRED",
            Refusal::Replayed => "REPLAYED",
            Refusal::Late => "LATE",
            Refusal::NotAuth => "NOT_AUTH",
            Refusal::Busy => "BUSY",
            Refusal::BadResume => "BAD_RESUME",
            Refusal::StoreUnavailable => "STORE_UNAVAILABLE",
            Refusal::RateLimited => "RATE_LIMITED",
            Refusal::TooLarge => "TOO_LARGE",
            Refusal::BadFrame => "BAD_FRAME",
            Refusal::AlreadyOnline => "ALREADY_ONLINE",
        }
    }
}

impl Refusal {
    /// The wire code.
    pub fn code(self) -> u16 {
        match self {
            Refusal::Malformed => 1,
            Refusal::Forged => 2,
            Refusal::Expired => 3,
            Refusal::Replayed => 4,
            Refusal::Late => 5,
            Refusal::NotAuth => 6,
            Refusal::Busy => 7,
            Refusal::BadResume => 8,
            Refusal::StoreUnavailable => 9,
            Refusal::RateLimited => 10,
            Refusal::TooLarge => 11,
            Refusal::BadFrame => 12,
            Refusal::AlreadyOnline => 13,
        }
    }

    /// The refusal for a wire code.
    pub fn from_code(code: u16) -> Option<Refusal> {
        Refusal::ALL.into_iter().find(|r| r.code() == code)
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn sign(secret: &[u8], account: &str, expiry: u64, nonce: &str) -> String {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(format!("{account}\n{expiry}\n{nonce}").as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

fn valid_account(a: &str) -> bool {
    (1..=64).contains(&a.len())
        && a.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Mints tokens (the login service's half; tests and bots use it too).
pub struct TokenMinter {
    secret: Vec<u8>,
}

impl std::fmt::Debug for TokenMinter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenMinter { secret: <redacted> }")
    }
}

impl TokenMinter {
    /// A minter with the shared secret.
    pub fn new(secret: impl Into<Vec<u8>>) -> Self {
        TokenMinter {
            secret: secret.into(),
        }
    }

    /// A token for `account`, valid for `ttl`. Panics on an account the format cannot
    /// carry (a programming error of the caller).
    pub fn mint(&self, account: &str, ttl: Duration) -> String {
        self.mint_at(account, now_secs().saturating_add(ttl.as_secs()))
    }

    /// A token with an explicit expiry (Unix seconds), for tests of expiry.
    pub fn mint_at(&self, account: &str, expiry: u64) -> String {
        assert!(
            valid_account(account),
            "account `{account}` cannot be in a token"
        );
        let nonce = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
        let sig = sign(&self.secret, account, expiry, &nonce);
        format!("{account}.{expiry}.{nonce}.{sig}")
    }
}

/// A verified token's facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// The account it was minted for.
    pub account: String,
    /// Its expiry (Unix seconds).
    pub expiry: u64,
}

/// Verifies tokens and remembers used nonces until their tokens expire.
pub struct TokenVerifier {
    secret: Vec<u8>,
    seen: Mutex<HashMap<String, u64>>,
}

impl std::fmt::Debug for TokenVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenVerifier { secret: <redacted> }")
    }
}

impl TokenVerifier {
    /// A verifier with the shared secret.
    pub fn new(secret: impl Into<Vec<u8>>) -> Self {
        TokenVerifier {
            secret: secret.into(),
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Checks `token` now.
    pub fn verify(&self, token: &str) -> Result<Admitted, Refusal> {
        self.verify_at(token, now_secs())
    }

    /// Checks `token` as of `now` (Unix seconds).
    pub fn verify_at(&self, token: &str, now: u64) -> Result<Admitted, Refusal> {
        let mut parts = token.trim().split('.');
        let (Some(account), Some(expiry), Some(nonce), Some(sig), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(Refusal::Malformed);
        };
        let expiry: u64 = expiry.parse().map_err(|_| Refusal::Malformed)?;
        if !valid_account(account)
            || nonce.len() != 32
            || !nonce.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(Refusal::Malformed);
        }
        let sig = hex::decode(sig).map_err(|_| Refusal::Malformed)?;
        let mut mac = HmacSha256::new_from_slice(&self.secret).expect("any key length");
        mac.update(format!("{account}\n{expiry}\n{nonce}").as_bytes());
        // Constant-time comparison.
        mac.verify_slice(&sig).map_err(|_| Refusal::Forged)?;
        if expiry <= now {
            return Err(Refusal::Expired);
        }
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= 4096 && seen.len().is_power_of_two() {
            // Amortised pruning: forget nonces whose tokens can no longer be used anyway.
            seen.retain(|_, exp| *exp > now);
        }
        if seen.get(nonce).is_some_and(|exp| *exp > now) {
            return Err(Refusal::Replayed);
        }
        seen.insert(nonce.to_string(), expiry);
        Ok(Admitted {
            account: account.to_string(),
            expiry,
        })
    }

    /// Nonces remembered (for tests and metrics).
    pub fn remembered(&self) -> usize {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_once_then_refuses_replay() {
        let m = TokenMinter::new("s3cret");
        let v = TokenVerifier::new("s3cret");
        let t = m.mint("alice", Duration::from_secs(60));
        assert_eq!(v.verify(&t).unwrap().account, "alice");
        assert_eq!(v.verify(&t), Err(Refusal::Replayed));
    }

    #[test]
    fn forged_expired_and_malformed() {
        let v = TokenVerifier::new("s3cret");
        let other = TokenMinter::new("other");
        assert_eq!(
            v.verify(&other.mint("alice", Duration::from_secs(60))),
            Err(Refusal::Forged)
        );
        let m = TokenMinter::new("s3cret");
        // Changing the account breaks the signature.
        let t = m.mint("alice", Duration::from_secs(60));
        let tampered = t.replacen("alice", "bob", 1);
        assert_eq!(v.verify(&tampered), Err(Refusal::Forged));
        let past = m.mint_at("alice", 1_000);
        assert_eq!(v.verify(&past), Err(Refusal::Expired));
        for bad in [
            "",
            "a.b.c",
            "alice.x.00.00",
            "al ice.1.0.0",
            "a.1.zz.00",
            "a.b.c.d.e",
        ] {
            assert_eq!(v.verify(bad), Err(Refusal::Malformed), "{bad}");
        }
    }

    #[test]
    fn expired_nonces_are_forgotten() {
        let m = TokenMinter::new("k");
        let v = TokenVerifier::new("k");
        for i in 0..5000 {
            let t = m.mint_at("a", 2_000 + (i % 2));
            v.verify_at(&t, 1_000).unwrap();
        }
        // Far in the future every token has expired: pruning keeps the table small.
        for _ in 0..5000 {
            let t = m.mint_at("a", 10_000);
            v.verify_at(&t, 5_000).unwrap();
        }
        assert!(v.remembered() < 9000, "{}", v.remembered());
    }

    #[test]
    fn codes_round_trip() {
        for c in 1..=13 {
            assert_eq!(Refusal::from_code(c).unwrap().code(), c);
        }
        assert!(Refusal::from_code(99).is_none());
    }
}
