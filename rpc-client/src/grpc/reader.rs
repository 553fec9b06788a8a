//! The reading half: HTTP/2 frames in, v1 [`Frame`]s out.
//!
//! It answers what HTTP/2 asks of a reader (SETTINGS and PING acknowledgements,
//! WINDOW_UPDATEs as data is consumed) by queueing control frames on the [`Link`] for
//! the writer, and hands the peer's window updates and settings to the writer the same
//! way. Messages may arrive split across DATA frames or several in one (a standard
//! gRPC sender does both); each is bounded by the connection's frame limit.

use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};

use super::frame::{self, Head};
use super::headers;
use super::message::{GrpcMessageProto, from_message};
use super::{GrpcError, Link, Role};
use crate::codec::Frame;

/// Largest frame we accept: we never raise SETTINGS_MAX_FRAME_SIZE from its default.
const MAX_FRAME_IN: usize = frame::DEFAULT_MAX_FRAME;

/// A header block being gathered from HEADERS and CONTINUATION frames.
struct Block {
    stream: u32,
    end_stream: bool,
    bytes: BytesMut,
}

pub(crate) struct Reader {
    link: Arc<Link>,
    hpack: headers::Reader,
    /// A server still expects the client's preface.
    preface: bool,
    block: Option<Block>,
    /// Our stream's bytes not yet a whole gRPC message.
    messages: BytesMut,
    /// Set when the peer ended the stream; reported once the messages before it are.
    ended: Option<String>,
    max_message: usize,
}

impl Reader {
    /// A reader for `link`; `max_message` bounds one message (the transport's frame
    /// limit).
    pub fn new(link: Arc<Link>, max_message: usize) -> Reader {
        let preface = link.role == Role::Server;
        Reader {
            link,
            hpack: headers::Reader::new(),
            preface,
            block: None,
            messages: BytesMut::new(),
            ended: None,
            max_message,
        }
    }

    /// The next frame the peer sent, consuming whole HTTP/2 frames from `buf`;
    /// `Ok(None)` when more bytes are needed.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, GrpcError> {
        loop {
            if let Some(f) = self.next_message()? {
                return Ok(Some(f));
            }
            if let Some(why) = self.ended.take() {
                return Err(GrpcError::Ended(why));
            }
            if self.preface {
                let n = buf.len().min(frame::PREFACE.len());
                if buf[..n] != frame::PREFACE[..n] {
                    return Err(GrpcError::Http2("bad client preface".into()));
                }
                if n < frame::PREFACE.len() {
                    return Ok(None);
                }
                buf.advance(n);
                self.preface = false;
            }
            if buf.len() < frame::HEADER_LEN {
                return Ok(None);
            }
            let head = Head::parse(buf);
            if head.len > MAX_FRAME_IN {
                return Err(GrpcError::Http2(format!(
                    "a frame of {} bytes over the {MAX_FRAME_IN}-byte SETTINGS_MAX_FRAME_SIZE",
                    head.len
                )));
            }
            if buf.len() < frame::HEADER_LEN + head.len {
                buf.reserve(frame::HEADER_LEN + head.len - buf.len());
                return Ok(None);
            }
            buf.advance(frame::HEADER_LEN);
            let payload = buf.split_to(head.len).freeze();
            self.on_frame(head, payload)?;
        }
    }

    /// A whole message from our stream's bytes, if one is there.
    fn next_message(&mut self) -> Result<Option<Frame>, GrpcError> {
        if self.messages.len() < 5 {
            return Ok(None);
        }
        if self.messages[0] != 0 {
            return Err(GrpcError::Message(format!(
                "compressed-flag {} (Seata's gRPC never compresses at this level)",
                self.messages[0]
            )));
        }
        let len = u32::from_be_bytes([
            self.messages[1],
            self.messages[2],
            self.messages[3],
            self.messages[4],
        ]) as usize;
        if len > self.max_message {
            return Err(GrpcError::TooLarge {
                len: len + 5,
                max: self.max_message,
                why: "transport.maxFrameLength",
            });
        }
        if self.messages.len() < 5 + len {
            return Ok(None);
        }
        self.messages.advance(5);
        let bytes = self.messages.split_to(len).freeze();
        if self.messages.is_empty() {
            // Hold no buffer between messages.
            self.messages = BytesMut::new();
        }
        let msg: GrpcMessageProto = prost::Message::decode(bytes)
            .map_err(|e| GrpcError::Message(format!("not a GrpcMessageProto: {e}")))?;
        from_message(msg, self.max_message).map(Some)
    }

    fn on_frame(&mut self, head: Head, payload: Bytes) -> Result<(), GrpcError> {
        if let Some(block) = &mut self.block {
            if head.kind != frame::CONTINUATION || head.stream != block.stream {
                return Err(GrpcError::Http2(format!(
                    "frame type {} inside a header block (CONTINUATION expected)",
                    head.kind
                )));
            }
            block.bytes.extend_from_slice(&payload);
            if block.bytes.len() > 256 * 1024 {
                return Err(GrpcError::Http2("a header block over 256 KiB".into()));
            }
            if head.flags & frame::END_HEADERS != 0 {
                let block = self.block.take().expect("checked above");
                self.on_headers(block.stream, block.end_stream, &block.bytes)?;
            }
            return Ok(());
        }
        match head.kind {
            frame::DATA => self.on_data(head, payload),
            frame::HEADERS => {
                let fragment = strip(head, payload, true)?;
                let end_stream = head.flags & frame::END_STREAM != 0;
                if head.stream == 0 {
                    return Err(GrpcError::Http2("HEADERS on stream 0".into()));
                }
                if head.flags & frame::END_HEADERS != 0 {
                    self.on_headers(head.stream, end_stream, &fragment)
                } else {
                    self.block = Some(Block {
                        stream: head.stream,
                        end_stream,
                        bytes: BytesMut::from(&fragment[..]),
                    });
                    Ok(())
                }
            }
            frame::CONTINUATION => {
                Err(GrpcError::Http2("CONTINUATION with no header block".into()))
            }
            frame::RST_STREAM => {
                if payload.len() != 4 {
                    return Err(GrpcError::Http2("RST_STREAM of a wrong length".into()));
                }
                let code = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
                if self.link.stream() == Some(head.stream) {
                    return Err(GrpcError::Ended(format!(
                        "RST_STREAM {} ({code})",
                        frame::error_name(code)
                    )));
                }
                Ok(())
            }
            frame::SETTINGS => self.on_settings(head, &payload),
            frame::PUSH_PROMISE => Err(GrpcError::Http2("PUSH_PROMISE (push is off)".into())),
            frame::PING => {
                if payload.len() != 8 || head.stream != 0 {
                    return Err(GrpcError::Http2("a malformed PING".into()));
                }
                if head.flags & frame::ACK == 0 {
                    self.link.control(|c| frame::ping_ack(c, &payload))?;
                }
                Ok(())
            }
            frame::GOAWAY => {
                if payload.len() < 8 {
                    return Err(GrpcError::Http2("GOAWAY of a wrong length".into()));
                }
                let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
                let debug = String::from_utf8_lossy(&payload[8..]);
                Err(GrpcError::Ended(format!(
                    "GOAWAY {} ({code}){}{debug}",
                    frame::error_name(code),
                    if debug.is_empty() { "" } else { ": " }
                )))
            }
            frame::WINDOW_UPDATE => {
                if payload.len() != 4 {
                    return Err(GrpcError::Http2("WINDOW_UPDATE of a wrong length".into()));
                }
                let inc = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                    & 0x7fff_ffff;
                if inc == 0 {
                    return Err(GrpcError::Http2("a WINDOW_UPDATE of 0".into()));
                }
                self.link.window_update(head.stream, inc)
            }
            // PRIORITY and frame types this side does not know: ignored (§4.1, §5.5).
            _ => Ok(()),
        }
    }

    fn on_data(&mut self, head: Head, payload: Bytes) -> Result<(), GrpcError> {
        if head.stream == 0 {
            return Err(GrpcError::Http2("DATA on stream 0".into()));
        }
        let ours = self.link.stream() == Some(head.stream);
        // The whole frame counts against the windows, padding included (§6.9.1).
        self.link.consumed(head.len, ours);
        let data = strip(head, payload, false)?;
        if !ours {
            return Ok(());
        }
        if self.messages.len() + data.len() > self.max_message + 5 + MAX_FRAME_IN {
            return Err(GrpcError::TooLarge {
                len: self.messages.len() + data.len(),
                max: self.max_message,
                why: "transport.maxFrameLength",
            });
        }
        self.messages.extend_from_slice(&data);
        if head.flags & frame::END_STREAM != 0 {
            self.ended = Some("END_STREAM".into());
        }
        Ok(())
    }

    fn on_headers(&mut self, stream: u32, end_stream: bool, block: &[u8]) -> Result<(), GrpcError> {
        // Decoded even when unwanted: the HPACK table must follow every block.
        let fields = self.hpack.read(block)?;
        let get = |name: &str| {
            fields
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        if self.link.role == Role::Server && !self.link.adopt(stream) {
            tracing::debug!(stream, "the peer opened a second stream; refused");
            self.link
                .control(|c| frame::rst_stream(c, stream, frame::REFUSED_STREAM))?;
            return Ok(());
        }
        if self.link.stream() != Some(stream) {
            return Ok(());
        }
        if let Some(status) = get(":status")
            && status != "200"
        {
            return Err(GrpcError::Ended(format!("HTTP status {status}")));
        }
        if let Some(status) = get("grpc-status")
            && status != "0"
        {
            return Err(GrpcError::Ended(format!(
                "grpc-status {status}{}{}",
                if get("grpc-message").is_some() {
                    ": "
                } else {
                    ""
                },
                get("grpc-message").unwrap_or("")
            )));
        }
        if end_stream {
            self.ended = Some(format!(
                "trailers (grpc-status {})",
                get("grpc-status").unwrap_or("none")
            ));
        }
        Ok(())
    }

    fn on_settings(&mut self, head: Head, payload: &[u8]) -> Result<(), GrpcError> {
        if head.stream != 0 || !payload.len().is_multiple_of(6) {
            return Err(GrpcError::Http2("a malformed SETTINGS".into()));
        }
        if head.flags & frame::ACK != 0 {
            return Ok(());
        }
        for pair in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([pair[0], pair[1]]);
            let value = u32::from_be_bytes([pair[2], pair[3], pair[4], pair[5]]);
            match id {
                frame::SETTINGS_INITIAL_WINDOW_SIZE => self.link.set_initial_window(value)?,
                frame::SETTINGS_MAX_FRAME_SIZE => self.link.set_max_frame(value)?,
                frame::SETTINGS_ENABLE_PUSH if value > 1 => {
                    return Err(GrpcError::Http2(format!("SETTINGS_ENABLE_PUSH {value}")));
                }
                // Header table size: our blocks use no table. The rest bind nothing we
                // send on one stream.
                _ => {}
            }
        }
        self.link.control(frame::settings_ack)
    }
}

/// A DATA or HEADERS payload without its padding (and a HEADERS' priority fields).
fn strip(head: Head, mut payload: Bytes, headers: bool) -> Result<Bytes, GrpcError> {
    let mut pad = 0;
    if head.flags & frame::PADDED != 0 {
        if payload.is_empty() {
            return Err(GrpcError::Http2("a padded frame with no pad length".into()));
        }
        pad = usize::from(payload[0]);
        payload.advance(1);
    }
    if headers && head.flags & frame::PRIORITY_FLAG != 0 {
        if payload.len() < 5 {
            return Err(GrpcError::Http2(
                "HEADERS too short for its priority".into(),
            ));
        }
        payload.advance(5);
    }
    if pad > payload.len() {
        return Err(GrpcError::Http2("padding longer than the frame".into()));
    }
    payload.truncate(payload.len() - pad);
    Ok(payload)
}
