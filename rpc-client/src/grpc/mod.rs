//! Seata's gRPC transport (`transport.protocol = grpc`): the same frames as v1, carried
//! as `GrpcMessageProto`s on one long-lived HTTP/2 stream.
//!
//! # What Seata's gRPC is
//!
//! Read from Seata's source (`core/.../rpc/netty/grpc/GrpcEncoder`, `GrpcDecoder`,
//! `Http2Detector`, `NettyClientBootstrap`):
//! - the TC serves it on its v1 port and tells the two apart per TCP connection by the
//!   first bytes (the HTTP/2 preface, or v1's `0xdada`); plaintext HTTP/2 (h2c);
//! - each client channel (TM, RM) is one TCP connection with one bidirectional stream
//!   of `SeataService.sendRequest`, and requests, answers, one-way sends and heartbeats
//!   travel both ways on it, matched by `id` exactly as v1 frames are;
//! - each message is one gRPC message (a zero byte, a four-byte length, the
//!   `GrpcMessageProto`) in **one DATA frame**: Java's decoder reads every DATA frame as
//!   whole messages, so a message split across two frames breaks it, and a message can
//!   be at most the peer's frame size less five bytes (16 379 with HTTP/2's default);
//! - both of Java's ends open their side with the same HEADERS (`:status 200`,
//!   `grpc-status 0`, `content-type application/grpc`), never send trailers and never
//!   end the stream; a Java client's HEADERS therefore have no `:method` or `:path`,
//!   which a standard HTTP/2 server (tonic's `h2`) refuses.
//!
//! # Why it is written here rather than on `h2`
//!
//! The transport uses a narrow slice of HTTP/2 (one stream, no priorities, no push),
//! and two of its rules are not what a general HTTP/2 library does: a server must take
//! Java's request-less HEADERS, and a sender must never split a message across DATA
//! frames. Writing that slice here also keeps the connection's machinery as it is for
//! v1: the same reader and writer tasks, lanes, delivery guarantees (not written /
//! may have been delivered), budgets, heartbeats and liveness probe. HPACK, the part
//! worth a library, comes from `loona-hpack` (decoding; our own header blocks use no
//! compression state: each block starts by setting the table to size 0).
//!
//! What it speaks: the client side (our request HEADERS are a standard gRPC call's, so
//! a standard gRPC server can take them too), the server side (one stream per
//! connection, as every Seata client opens; a second stream is refused with
//! REFUSED_STREAM), SETTINGS, PING, flow control in both directions (our windows are
//! replenished as the reader consumes; we never write past the peer's), GOAWAY and
//! RST_STREAM (both close the connection with the peer's reason).

pub(crate) mod frame;
mod headers;
pub mod message;
pub(crate) mod reader;
#[cfg(test)]
mod tests;
pub(crate) mod writer;

use std::sync::{Mutex, MutexGuard};

use bytes::BytesMut;
use tokio::sync::Notify;

pub use message::{CODEC_GRPC, GrpcMessageProto};

/// The method Seata's clients call.
pub const PATH: &str = "/org.apache.seata.protocol.protobuf.SeataService/sendRequest";

/// The stream and connection window we grant the peer: large enough that a busy
/// stream is not held back by round trips of WINDOW_UPDATEs; the reader's inbound cap
/// and TCP still push back on a peer that sends faster than we handle.
pub(crate) const RECV_WINDOW: u32 = 4 * 1024 * 1024;

/// Most bytes of control frames (acknowledgements, refusals) queued and unwritten.
pub(crate) const MAX_CONTROL: usize = 64 * 1024;

/// Which end of the stream this connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// We opened the connection and the stream (stream 1).
    Client,
    /// The peer opened both; we answer on its stream.
    Server,
}

/// What went wrong on a gRPC connection; it closes the connection with this reason.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GrpcError {
    /// The peer broke an HTTP/2 rule.
    #[error("HTTP/2 protocol error: {0}")]
    Http2(String),
    /// A message that cannot be read or written (a bad `GrpcMessageProto`, body or
    /// head map).
    #[error("bad gRPC message: {0}")]
    Message(String),
    /// A message longer than the limit in force.
    #[error("gRPC message of {len} bytes over the {max}-byte limit ({why})")]
    TooLarge {
        /// The message's length with its five-byte prefix.
        len: usize,
        /// The limit.
        max: usize,
        /// Which limit.
        why: &'static str,
    },
    /// The peer ended the call: trailers, END_STREAM, RST_STREAM, GOAWAY or a
    /// non-200 / non-zero status.
    #[error("the peer ended the gRPC stream: {0}")]
    Ended(String),
}

/// The state the reader and writer of one gRPC connection share: the peer's windows
/// and settings, the stream, and control frames waiting to be written.
pub(crate) struct Link {
    pub role: Role,
    state: Mutex<LinkState>,
    /// The writer waits on this for window or for control frames to write.
    pub changed: Notify,
}

struct LinkState {
    /// Frames the writer sends before anything else (not flow controlled).
    control: BytesMut,
    conn_send: i64,
    stream_send: i64,
    peer_initial: i64,
    peer_max_frame: usize,
    /// Our stream: 1 for a client; the peer's first stream for a server.
    stream: Option<u32>,
    /// A server sends its HEADERS before its first DATA frame.
    headers_sent: bool,
    /// Bytes consumed and not yet given back with WINDOW_UPDATE.
    recv_conn: u32,
    recv_stream: u32,
}

impl Link {
    /// A client's link, its preface, SETTINGS and request HEADERS already queued.
    pub fn client(authority: &str) -> Link {
        let link = Link::new(Role::Client, Some(1));
        {
            let mut st = link.state();
            st.control.extend_from_slice(frame::PREFACE);
            open(&mut st.control, true);
            let block = headers::request(authority);
            frame::headers(&mut st.control, 1, &block, frame::DEFAULT_MAX_FRAME);
            st.headers_sent = true;
        }
        link
    }

    /// A server's link (the client's preface has been read), its SETTINGS queued.
    pub fn server() -> Link {
        let link = Link::new(Role::Server, None);
        open(&mut link.state().control, false);
        link
    }

    fn new(role: Role, stream: Option<u32>) -> Link {
        Link {
            role,
            state: Mutex::new(LinkState {
                control: BytesMut::new(),
                conn_send: frame::DEFAULT_WINDOW,
                stream_send: frame::DEFAULT_WINDOW,
                peer_initial: frame::DEFAULT_WINDOW,
                peer_max_frame: frame::DEFAULT_MAX_FRAME,
                stream,
                headers_sent: false,
                recv_conn: 0,
                recv_stream: 0,
            }),
            changed: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Our stream, once there is one.
    pub fn stream(&self) -> Option<u32> {
        self.state().stream
    }

    /// The largest frame the peer takes.
    pub fn peer_max_frame(&self) -> usize {
        self.state().peer_max_frame
    }

    /// Queues a control frame built by `f` and wakes the writer. A peer whose
    /// acknowledgements pile up past [`MAX_CONTROL`] unwritten (it floods PINGs,
    /// SETTINGS or new streams and does not read: the HTTP/2 "ping flood" and "reset
    /// flood") is an error that closes the connection.
    pub fn control(&self, f: impl FnOnce(&mut BytesMut)) -> Result<(), GrpcError> {
        let mut st = self.state();
        if st.control.len() > MAX_CONTROL {
            return Err(GrpcError::Http2(format!(
                "the peer sends control frames (PING, SETTINGS, new streams) faster than it \
                 reads their answers: over {MAX_CONTROL} bytes of them unsent"
            )));
        }
        f(&mut st.control);
        drop(st);
        self.changed.notify_one();
        Ok(())
    }

    /// True when control frames wait to be written.
    pub fn has_control(&self) -> bool {
        !self.state().control.is_empty()
    }

    /// Takes the control frames waiting to be written.
    pub fn take_control(&self) -> BytesMut {
        std::mem::take(&mut self.state().control)
    }

    /// A server adopts the peer's first stream. False when it already has another
    /// (the new one is refused).
    pub fn adopt(&self, stream: u32) -> bool {
        let mut st = self.state();
        match st.stream {
            None => {
                st.stream = Some(stream);
                true
            }
            Some(s) => s == stream,
        }
    }

    /// The server's HEADERS, the first time it writes on the stream.
    pub fn take_first_headers(&self) -> Option<u32> {
        let mut st = self.state();
        match (st.headers_sent, st.stream) {
            (false, Some(s)) => {
                st.headers_sent = true;
                Some(s)
            }
            _ => None,
        }
    }

    /// The peer's SETTINGS_INITIAL_WINDOW_SIZE: every open stream's window moves by the
    /// difference (RFC 9113 §6.9.2).
    pub fn set_initial_window(&self, v: u32) -> Result<(), GrpcError> {
        if i64::from(v) > frame::MAX_WINDOW {
            return Err(GrpcError::Http2(format!(
                "SETTINGS_INITIAL_WINDOW_SIZE {v} over 2^31-1"
            )));
        }
        let mut st = self.state();
        let delta = i64::from(v) - st.peer_initial;
        st.peer_initial = i64::from(v);
        st.stream_send += delta;
        drop(st);
        self.changed.notify_one();
        Ok(())
    }

    /// The peer's SETTINGS_MAX_FRAME_SIZE.
    pub fn set_max_frame(&self, v: u32) -> Result<(), GrpcError> {
        if !(16_384..=16_777_215).contains(&v) {
            return Err(GrpcError::Http2(format!(
                "SETTINGS_MAX_FRAME_SIZE {v} outside 2^14..2^24-1"
            )));
        }
        self.state().peer_max_frame = v as usize;
        Ok(())
    }

    /// A WINDOW_UPDATE from the peer.
    pub fn window_update(&self, stream: u32, inc: u32) -> Result<(), GrpcError> {
        let mut st = self.state();
        let ours = st.stream == Some(stream);
        let window = match stream {
            0 => &mut st.conn_send,
            _ if ours => &mut st.stream_send,
            _ => return Ok(()),
        };
        *window += i64::from(inc);
        if *window > frame::MAX_WINDOW {
            return Err(GrpcError::Http2(format!(
                "a WINDOW_UPDATE took stream {stream}'s window past 2^31-1"
            )));
        }
        drop(st);
        self.changed.notify_one();
        Ok(())
    }

    /// Counts `n` bytes of DATA consumed (`ours`: on our stream); queues the
    /// WINDOW_UPDATEs that give them back once half a window is due.
    pub fn consumed(&self, n: usize, ours: bool) {
        let n = n as u32;
        let mut st = self.state();
        st.recv_conn += n;
        if ours {
            st.recv_stream += n;
        }
        let mut woke = false;
        if st.recv_conn >= RECV_WINDOW / 2 {
            let inc = std::mem::take(&mut st.recv_conn);
            frame::window_update(&mut st.control, 0, inc);
            woke = true;
        }
        if st.recv_stream >= RECV_WINDOW / 2
            && let Some(s) = st.stream
        {
            let inc = std::mem::take(&mut st.recv_stream);
            frame::window_update(&mut st.control, s, inc);
            woke = true;
        }
        drop(st);
        if woke {
            self.changed.notify_one();
        }
    }

    /// How many bytes from the start of `frames` (whole HTTP/2 frames) may be written
    /// now: every frame up to the first DATA frame the windows cannot take. The DATA
    /// frames counted are charged to the windows.
    pub fn reserve(&self, frames: &[u8]) -> usize {
        let mut st = self.state();
        let mut off = 0;
        while off + frame::HEADER_LEN <= frames.len() {
            let head = frame::Head::parse(&frames[off..]);
            if head.kind == frame::DATA {
                let need = head.len as i64;
                if need > st.conn_send.min(st.stream_send) {
                    break;
                }
                st.conn_send -= need;
                st.stream_send -= need;
            }
            off += frame::HEADER_LEN + head.len;
        }
        off
    }
}

/// Our side of the connection's opening: SETTINGS (no push for a client; our stream
/// window) and the connection window raised to match.
fn open(dst: &mut BytesMut, client: bool) {
    let mut pairs = vec![(frame::SETTINGS_INITIAL_WINDOW_SIZE, RECV_WINDOW)];
    if client {
        pairs.insert(0, (frame::SETTINGS_ENABLE_PUSH, 0));
    }
    frame::settings(dst, &pairs);
    frame::window_update(dst, 0, RECV_WINDOW - frame::DEFAULT_WINDOW as u32);
}
#[cfg(test)]
mod conn_tests;
