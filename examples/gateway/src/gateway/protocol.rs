//! The client protocol: one binary frame, the same over TCP and as a WebSocket binary
//! message.
//!
//! ```text
//! offset size field
//!  0      4   length (u32, big-endian): bytes after this field = 9 + payload
//!  4      2   module id (u16): 0 is the gateway itself (auth, resume, errors, kicks)
//!  6      2   opcode (u16), meaning is the module's
//!  8      4   sequence (u32): chosen by the sender; a reply carries its request's
//! 12      1   flags: bit 0 RELIABLE (never dropped under backpressure),
//!                    bit 1 REPLY (answers `sequence`), bit 2 ERROR (payload = error text)
//! 13      -   payload, opaque to the gateway
//! ```
//!
//! The whole protocol, module 0 and the example game's modules, every code and limit,
//! is written for client developers in `docs/gateway-protocol.md`; a test
//! (`examples/gateway/tests/suite/gateway_protocol_doc.rs`) checks that document's tables against
//! the constants here ([`op::ALL`], [`FLAGS`], [`Refusal`](super::admission::Refusal),
//! [`Kick`](super::kick::Kick)).
//!
//! Why a length first and a cap on it: the gateway reads the 4-byte length, compares it
//! with the configured cap and closes the connection *before* allocating anything when
//! it is larger, so a client announcing 4 GiB costs nothing. The first frame of a
//! connection (AUTH or RESUME) has a cap of its own, `auth-max-frame` (1 KiB by
//! default): a connection that has not authenticated cannot make the gateway buffer a
//! `max-frame` worth of bytes. The payload is never decoded by the gateway: it is
//! forwarded to a backend as the body of an RPC frame.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

/// Bytes of the header after the length field.
pub const HEADER_AFTER_LEN: usize = 9;
/// Module id of the gateway itself.
pub const GATEWAY_MODULE: u16 = 0;

/// Frame flag: must not be dropped when the client's send queue is over its soft limit.
pub const RELIABLE: u8 = 0b001;
/// Frame flag: a reply to the request with the same sequence.
pub const REPLY: u8 = 0b010;
/// Frame flag: the payload is an error text (with [`REPLY`], the request failed).
pub const ERROR: u8 = 0b100;

/// Every flag by its name in `docs/gateway-protocol.md`.
pub const FLAGS: &[(&str, u8)] = &[("RELIABLE", RELIABLE), ("REPLY", REPLY), ("ERROR", ERROR)];

/// Opcodes of module 0 (the gateway).
pub mod op {
    /// Client -> gateway: authenticate with a token (payload: the token text).
    pub const AUTH: u16 = 1;
    /// Gateway -> client: authenticated (payload: `session_id resume_secret gateway_id`).
    pub const AUTH_OK: u16 = 2;
    /// Gateway -> client: refused (payload: `reason_code text`, see
    /// [`Refusal`](crate::gateway::admission::Refusal)), then closed.
    pub const AUTH_FAIL: u16 = 3;
    /// Client -> gateway: resume a session (payload: `session_id resume_secret
    /// [last_push_seq]`, the last numbered push the client received, 0 or absent for
    /// none).
    pub const RESUME: u16 = 4;
    /// Gateway -> client: the connection is closed by the server (payload: `kick_code
    /// text`, see [`Kick`](crate::gateway::kick::Kick)).
    pub const KICK: u16 = 5;
    /// Either way: a keep-alive; answered with the same sequence and [`REPLY`](super::REPLY).
    pub const PING: u16 = 6;
    /// Gateway -> client: reconnect advice, the gateway is draining (payload: reason).
    /// The client should, at a quiet moment, resume its session on another gateway;
    /// this connection keeps serving until then (or until the drain deadline).
    pub const RECONNECT: u16 = 8;
    /// Gateway -> client, while a verified login waits in the login queue (instead of
    /// AUTH_OK, which follows when it is admitted): payload `position eta_ms`, position
    /// 1 = next, `eta_ms` 0 = no estimate yet (see [`queue`](super::super::queue)).
    pub const QUEUE: u16 = 7;
    /// Gateway -> client: the backend that held this session's bound state (static or
    /// dynamic binding) is gone; the request with the same sequence was served by
    /// another backend, which holds none of it. Payload: the module ids whose binding
    /// moved, space separated. Sent just before that request's reply.
    pub const REBOUND: u16 = 9;
    /// Gateway -> client: a key of a keyed module (a room) moved to another backend,
    /// its old one being gone (or the key's place changed); the state it had there is
    /// lost and the key starts afresh, with the client still a member. Payload:
    /// `module key`.
    pub const MOVED: u16 = 10;
    /// Gateway -> client, after a resume's AUTH_OK: numbered pushes the gateway can no
    /// longer replay. Payload: `first last` (inclusive), `last` = `?` when this gateway
    /// cannot know (the session was resumed from another gateway).
    pub const GAP: u16 = 11;

    /// Every module-0 opcode by its name in `docs/gateway-protocol.md`.
    pub const ALL: &[(&str, u16)] = &[
        ("AUTH", AUTH),
        ("AUTH_OK", AUTH_OK),
        ("AUTH_FAIL", AUTH_FAIL),
        ("RESUME", RESUME),
        ("KICK", KICK),
        ("PING", PING),
        ("QUEUE", QUEUE),
        ("RECONNECT", RECONNECT),
        ("REBOUND", REBOUND),
        ("MOVED", MOVED),
        ("GAP", GAP),
    ];
}

/// One client frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFrame {
    /// Module id (0 = gateway).
    pub module: u16,
    /// Opcode within the module.
    pub opcode: u16,
    /// Sequence number.
    pub seq: u32,
    /// [`RELIABLE`], [`REPLY`], [`ERROR`].
    pub flags: u8,
    /// The payload, untouched.
    pub payload: Bytes,
}

impl ClientFrame {
    /// A frame with no flags.
    pub fn new(module: u16, opcode: u16, seq: u32, payload: impl Into<Bytes>) -> Self {
        ClientFrame {
            module,
            opcode,
            seq,
            flags: 0,
            payload: payload.into(),
        }
    }

    /// Sets flags.
    pub fn with_flags(mut self, flags: u8) -> Self {
        self.flags = flags;
        self
    }

    /// True when the frame must not be dropped under backpressure.
    pub fn is_reliable(&self) -> bool {
        self.flags & RELIABLE != 0
    }

    /// Bytes on the wire.
    pub fn wire_len(&self) -> usize {
        4 + HEADER_AFTER_LEN + self.payload.len()
    }

    /// The frame as one buffer (for a WebSocket message).
    pub fn to_bytes(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(self.wire_len());
        self.encode_into(&mut b);
        b.freeze()
    }

    /// Appends the frame's bytes to `dst`.
    pub fn encode_into(&self, dst: &mut BytesMut) {
        dst.reserve(self.wire_len());
        dst.put_u32((HEADER_AFTER_LEN + self.payload.len()) as u32);
        dst.put_u16(self.module);
        dst.put_u16(self.opcode);
        dst.put_u32(self.seq);
        dst.put_u8(self.flags);
        dst.put_slice(&self.payload);
    }

    /// Parses one whole frame (a WebSocket message), checking the cap first.
    pub fn from_message(msg: &[u8], max_len: usize) -> Result<ClientFrame, ProtocolError> {
        let mut codec = ClientCodec::new(max_len);
        let mut buf = BytesMut::from(msg);
        match codec.decode(&mut buf)? {
            Some(f) if buf.is_empty() => Ok(f),
            Some(_) => Err(ProtocolError::Trailing(buf.len())),
            None => Err(ProtocolError::Truncated),
        }
    }
}

/// Why bytes from a client are not a frame (the connection is closed).
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// The announced length is over the cap.
    #[error("frame of {len} bytes is over the {max}-byte limit")]
    TooLong {
        /// Announced length (after the length field).
        len: usize,
        /// The cap.
        max: usize,
    },
    /// The announced length is below the header.
    #[error("frame length {0} is shorter than the 9-byte header")]
    TooShort(usize),
    /// A WebSocket message ended inside its frame.
    #[error("message ends inside its frame")]
    Truncated,
    /// A WebSocket message held more than one frame.
    #[error("{0} bytes after the frame in one message")]
    Trailing(usize),
    /// A WebSocket text message: frames travel as binary messages only.
    #[error("text message: frames are sent as binary WebSocket messages")]
    NotBinary,
    /// The WebSocket layer refused what the client sent (bad framing, bad UTF-8 in a
    /// close reason, unmasked frames, ...).
    #[error("websocket error: {0}")]
    WebSocket(String),
    /// The socket failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// The frame codec, with the length cap checked from the first 4 bytes.
#[derive(Debug, Clone, Copy)]
pub struct ClientCodec {
    max_len: usize,
    /// The cap of the first frame, until it is decoded (the pre-auth cap).
    first_max: Option<usize>,
}

impl ClientCodec {
    /// A codec refusing frames whose length field exceeds `max_len`.
    pub fn new(max_len: usize) -> Self {
        ClientCodec {
            max_len: max_len.max(HEADER_AFTER_LEN),
            first_max: None,
        }
    }

    /// The same, but the first frame may be at most `first_max` (the gateway's
    /// `auth-max-frame`: the first frame is AUTH or RESUME, before the client is known).
    pub fn with_first_frame_cap(mut self, first_max: usize) -> Self {
        self.first_max = Some(first_max.clamp(HEADER_AFTER_LEN, self.max_len));
        self
    }

    fn cap(&self) -> usize {
        self.first_max.unwrap_or(self.max_len)
    }
}

impl Decoder for ClientCodec {
    type Item = ClientFrame;
    type Error = ProtocolError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<ClientFrame>, ProtocolError> {
        if src.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([src[0], src[1], src[2], src[3]]) as usize;
        if len > self.cap() {
            return Err(ProtocolError::TooLong {
                len,
                max: self.cap(),
            });
        }
        if len < HEADER_AFTER_LEN {
            return Err(ProtocolError::TooShort(len));
        }
        if src.len() < 4 + len {
            // Grow with the bytes that arrive, never to the announced length up front.
            return Ok(None);
        }
        src.advance(4);
        self.first_max = None;
        let mut f = src.split_to(len);
        let module = f.get_u16();
        let opcode = f.get_u16();
        let seq = f.get_u32();
        let flags = f.get_u8();
        Ok(Some(ClientFrame {
            module,
            opcode,
            seq,
            flags,
            payload: f.freeze(),
        }))
    }
}

impl Encoder<&ClientFrame> for ClientCodec {
    type Error = ProtocolError;

    fn encode(&mut self, item: &ClientFrame, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        item.encode_into(dst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let f = ClientFrame::new(7, 3, 42, &b"hi"[..]).with_flags(RELIABLE);
        let b = f.to_bytes();
        assert_eq!(
            &b[..],
            &[0, 0, 0, 11, 0, 7, 0, 3, 0, 0, 0, 42, 1, b'h', b'i'][..]
        );
        assert_eq!(ClientFrame::from_message(&b, 1024).unwrap(), f);
    }

    #[test]
    fn the_cap_is_checked_before_allocating() {
        let mut c = ClientCodec::new(1024);
        let mut b = BytesMut::from(&[0xff, 0xff, 0xff, 0xff][..]);
        let e = c.decode(&mut b).unwrap_err().to_string();
        assert!(e.contains("over the 1024-byte limit"), "{e}");
        assert!(b.capacity() < 64);
        let mut short = BytesMut::from(&[0, 0, 0, 3, 1, 2, 3][..]);
        assert!(matches!(
            c.decode(&mut short),
            Err(ProtocolError::TooShort(3))
        ));
    }

    #[test]
    fn the_first_frame_has_its_own_cap() {
        let big = ClientFrame::new(1, 1, 1, vec![0u8; 100]).to_bytes();
        let mut c = ClientCodec::new(1024).with_first_frame_cap(64);
        let e = c.decode(&mut BytesMut::from(&big[..])).unwrap_err();
        assert!(
            matches!(e, ProtocolError::TooLong { len: 109, max: 64 }),
            "{e}"
        );
        let small = ClientFrame::new(0, 1, 0, &b"token"[..]).to_bytes();
        let mut c = ClientCodec::new(1024).with_first_frame_cap(64);
        assert!(c.decode(&mut BytesMut::from(&small[..])).unwrap().is_some());
        // After the first frame, the connection's cap.
        assert!(c.decode(&mut BytesMut::from(&big[..])).unwrap().is_some());
    }

    #[test]
    fn byte_by_byte_and_messages_that_do_not_fit() {
        let a = ClientFrame::new(1, 1, 1, &b"abc"[..]);
        let b = ClientFrame::new(2, 2, 2, Bytes::new());
        let mut wire = a.to_bytes().to_vec();
        wire.extend_from_slice(&b.to_bytes());
        let mut c = ClientCodec::new(64);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for byte in &wire {
            buf.put_u8(*byte);
            if let Some(f) = c.decode(&mut buf).unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, vec![a.clone(), b]);
        assert!(matches!(
            ClientFrame::from_message(&wire, 64),
            Err(ProtocolError::Trailing(_))
        ));
        assert!(matches!(
            ClientFrame::from_message(&wire[..5], 64),
            Err(ProtocolError::Truncated)
        ));
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..128)) {
            let mut c = ClientCodec::new(64);
            let mut b = BytesMut::from(&bytes[..]);
            while let Ok(Some(_)) = c.decode(&mut b) {}
            let _ = ClientFrame::from_message(&bytes, 64);
        }
    }
}
