//! HTTP/2 frames (RFC 9113 §4, §6): the nine-byte header, the types and flags this
//! transport reads and writes, and the few control frames it sends.
//!
//! Only what one long-lived stream needs: DATA, HEADERS and CONTINUATION carry the
//! stream; SETTINGS, PING, WINDOW_UPDATE, RST_STREAM and GOAWAY keep the connection
//! (PRIORITY and unknown types are read and ignored).

use bytes::{BufMut, BytesMut};

/// The client connection preface (RFC 9113 §3.4), also what Seata's TC looks for to
/// tell a gRPC connection from a v1 one (`Http2Detector`).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Length of a frame header.
pub const HEADER_LEN: usize = 9;
/// The frame size every peer accepts until it says otherwise (SETTINGS_MAX_FRAME_SIZE).
pub const DEFAULT_MAX_FRAME: usize = 16_384;
/// The stream and connection window every peer starts with.
pub const DEFAULT_WINDOW: i64 = 65_535;
/// Largest window RFC 9113 allows.
pub const MAX_WINDOW: i64 = (1 << 31) - 1;

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY_FLAG: u8 = 0x20;

pub const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;

/// The RST_STREAM code this transport sends (a second stream).
pub const REFUSED_STREAM: u32 = 0x7;

/// A frame header as read off the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub len: usize,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

impl Head {
    /// Reads the header at the start of `b` (at least [`HEADER_LEN`] bytes).
    pub fn parse(b: &[u8]) -> Head {
        Head {
            len: (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2]),
            kind: b[3],
            flags: b[4],
            // The reserved bit is ignored on receipt (§4.1).
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }

    /// Appends this header to `dst`.
    pub fn put(self, dst: &mut BytesMut) {
        let len = self.len as u32;
        dst.put_slice(&[
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            self.kind,
            self.flags,
        ]);
        dst.put_u32(self.stream & 0x7fff_ffff);
    }
}

/// Appends a SETTINGS frame with `pairs`.
pub fn settings(dst: &mut BytesMut, pairs: &[(u16, u32)]) {
    Head {
        len: pairs.len() * 6,
        kind: SETTINGS,
        flags: 0,
        stream: 0,
    }
    .put(dst);
    for (id, value) in pairs {
        dst.put_u16(*id);
        dst.put_u32(*value);
    }
}

/// Appends a SETTINGS acknowledgement.
pub fn settings_ack(dst: &mut BytesMut) {
    Head {
        len: 0,
        kind: SETTINGS,
        flags: ACK,
        stream: 0,
    }
    .put(dst);
}

/// Appends a WINDOW_UPDATE of `increment` for `stream` (0: the connection).
pub fn window_update(dst: &mut BytesMut, stream: u32, increment: u32) {
    Head {
        len: 4,
        kind: WINDOW_UPDATE,
        flags: 0,
        stream,
    }
    .put(dst);
    dst.put_u32(increment & 0x7fff_ffff);
}

/// Appends a PING acknowledgement carrying `payload`.
pub fn ping_ack(dst: &mut BytesMut, payload: &[u8]) {
    Head {
        len: 8,
        kind: PING,
        flags: ACK,
        stream: 0,
    }
    .put(dst);
    dst.put_slice(payload);
}

/// Appends an RST_STREAM for `stream` with `code`.
pub fn rst_stream(dst: &mut BytesMut, stream: u32, code: u32) {
    Head {
        len: 4,
        kind: RST_STREAM,
        flags: 0,
        stream,
    }
    .put(dst);
    dst.put_u32(code);
}

/// Appends a HEADERS frame (END_HEADERS set) holding `block`, split into
/// CONTINUATION frames when it is longer than `max_frame`.
pub fn headers(dst: &mut BytesMut, stream: u32, block: &[u8], max_frame: usize) {
    let mut chunks = block.chunks(max_frame.max(1)).peekable();
    let first = chunks.next().unwrap_or(&[]);
    let mut kind = HEADERS;
    let mut chunk = first;
    loop {
        let last = chunks.peek().is_none();
        Head {
            len: chunk.len(),
            kind,
            flags: if last { END_HEADERS } else { 0 },
            stream,
        }
        .put(dst);
        dst.put_slice(chunk);
        match chunks.next() {
            Some(next) => {
                chunk = next;
                kind = CONTINUATION;
            }
            None => break,
        }
    }
}

/// The name of an error code, for close reasons.
pub fn error_name(code: u32) -> &'static str {
    match code {
        0x0 => "NO_ERROR",
        0x1 => "PROTOCOL_ERROR",
        0x2 => "INTERNAL_ERROR",
        0x3 => "FLOW_CONTROL_ERROR",
        0x4 => "SETTINGS_TIMEOUT",
        0x5 => "STREAM_CLOSED",
        0x6 => "FRAME_SIZE_ERROR",
        0x7 => "REFUSED_STREAM",
        0x8 => "CANCEL",
        0x9 => "COMPRESSION_ERROR",
        0xa => "CONNECT_ERROR",
        0xb => "ENHANCE_YOUR_CALM",
        0xc => "INADEQUATE_SECURITY",
        0xd => "HTTP_1_1_REQUIRED",
        _ => "unknown error code",
    }
}
