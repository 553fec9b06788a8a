//! Why the gateway ends an admitted client's connection: the `KICK` frame (module 0,
//! opcode [`op::KICK`]) with payload `<code> <text>`, always the last frame of the
//! connection. The codes are in [`Kick`] and in `docs/gateway-protocol.md`.
//!
//! A refusal before login is `AUTH_FAIL` with a [`Refusal`](super::admission::Refusal)
//! code instead: a client that has no session yet is refused, one that has is kicked.
//! Whether the session survives the kick is part of the code's meaning: after
//! [`Kick::Takeover`], [`Kick::Drain`], [`Kick::SlowClient`], [`Kick::Oversize`],
//! [`Kick::BadFrame`], [`Kick::Abuse`] and [`Kick::Shutdown`] the session can still be
//! resumed (within the resume window, where it is kept); after
//! [`Kick::DuplicateLogin`] it has ended; after [`Kick::Game`] it depends on the
//! backend's command (`keep`).

use bytes::Bytes;

use super::protocol::{self, ClientFrame, GATEWAY_MODULE, op};

/// Why a connection was closed by the gateway (the code of a `KICK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kick {
    /// A frame announced more than `max-frame` bytes.
    Oversize,
    /// Bytes that are not a frame (a length shorter than the header, a WebSocket text
    /// message, a message that is not one whole frame, broken WebSocket framing).
    BadFrame,
    /// The session was resumed on another connection (on this gateway or another).
    Takeover,
    /// The account logged in again and `duplicate-login` is `kick-old` (the default):
    /// this session has ended.
    DuplicateLogin,
    /// The gateway drained and its `drain.deadline` passed: resume on another gateway.
    Drain,
    /// Over the message rate limits `limits.kick-after` times in a row.
    Abuse,
    /// The send queue passed `send-queue-hard`: the client does not read fast enough.
    SlowClient,
    /// The game (a backend's `kick` command) ended the connection; the text is its
    /// reason.
    Game,
    /// The gateway is shutting down (without a drain).
    Shutdown,
}

impl Kick {
    /// Every kick, in code order (the table of `docs/gateway-protocol.md`).
    pub const ALL: [Kick; 9] = [
        Kick::Oversize,
        Kick::BadFrame,
        Kick::Takeover,
        Kick::DuplicateLogin,
        Kick::Drain,
        Kick::Abuse,
        Kick::SlowClient,
        Kick::Game,
        Kick::Shutdown,
    ];

    /// The wire code.
    pub fn code(self) -> u16 {
        match self {
            Kick::Oversize => 1,
            Kick::BadFrame => 2,
            Kick::Takeover => 3,
            Kick::DuplicateLogin => 4,
            Kick::Drain => 5,
            Kick::Abuse => 6,
            Kick::SlowClient => 7,
            Kick::Game => 8,
            Kick::Shutdown => 9,
        }
    }

    /// The name the protocol document gives it.
    pub fn name(self) -> &'static str {
        match self {
            Kick::Oversize => "OVERSIZE",
            Kick::BadFrame => "BAD_FRAME",
            Kick::Takeover => "TAKEOVER",
            Kick::DuplicateLogin => "DUPLICATE_LOGIN",
            Kick::Drain => "DRAIN",
            Kick::Abuse => "ABUSE",
            Kick::SlowClient => "SLOW_CLIENT",
            Kick::Game => "GAME",
            Kick::Shutdown => "SHUTDOWN",
        }
    }

    /// The kick of a wire code.
    pub fn from_code(code: u16) -> Option<Kick> {
        Kick::ALL.into_iter().find(|k| k.code() == code)
    }

    /// The `KICK` frame: `<code> <text>`, reliable.
    pub fn frame(self, text: &str) -> ClientFrame {
        ClientFrame::new(
            GATEWAY_MODULE,
            op::KICK,
            0,
            Bytes::from(format!("{} {text}", self.code())),
        )
        .with_flags(protocol::RELIABLE)
    }
}

/// Splits a `KICK` (or `AUTH_FAIL`) payload into its code and text.
pub fn split_coded(payload: &[u8]) -> Option<(u16, String)> {
    let text = std::str::from_utf8(payload).ok()?;
    let (code, rest) = text.split_once(' ').unwrap_or((text, ""));
    Some((code.parse().ok()?, rest.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_frames_carry_them() {
        for k in Kick::ALL {
            assert_eq!(Kick::from_code(k.code()), Some(k));
        }
        assert_eq!(Kick::from_code(0), None);
        let f = Kick::Takeover.frame("session resumed on another connection");
        assert_eq!((f.module, f.opcode), (GATEWAY_MODULE, op::KICK));
        assert_eq!(
            split_coded(&f.payload),
            Some((3, "session resumed on another connection".into()))
        );
        assert_eq!(split_coded(b"x y"), None);
        assert_eq!(split_coded(b"\xff"), None);
    }
}
