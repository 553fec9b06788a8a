//! What a connection's bytes are: Seata v1 frames, or Seata's gRPC (HTTP/2) carrying
//! the same frames ([`crate::grpc`]). A client knows from `transport.protocol`; a
//! server tells from the first bytes the peer sends, as Seata's TC does (the HTTP/2
//! preface, else v1).

use std::sync::Arc;

use bytes::BytesMut;

use super::Shared;
use crate::codec::{Frame, FrameCodec, FrameError};
use crate::grpc::reader::Reader as GrpcReader;
use crate::grpc::{GrpcError, Link, frame::PREFACE};

/// Which wire a new connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireMode {
    /// Seata RPC v1.
    V1,
    /// Seata's gRPC, as the client.
    GrpcClient,
    /// Whichever the peer opens with (a server).
    Detect,
}

/// Why bytes could not be read or written on the wire.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WireError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error(transparent)]
    Grpc(#[from] GrpcError),
}

/// The reader's decoder for the connection's wire.
pub(super) enum Decoder {
    /// Waiting for the first bytes to tell.
    Detect(FrameCodec),
    V1(FrameCodec),
    Grpc(GrpcReader),
}

impl Decoder {
    pub fn new(mode: WireMode, shared: &Shared, max_frame_len: usize) -> Decoder {
        let codec = FrameCodec::new(max_frame_len);
        match (mode, shared.grpc.get()) {
            (WireMode::GrpcClient, Some(link)) => {
                Decoder::Grpc(GrpcReader::new(link.clone(), max_frame_len))
            }
            (WireMode::Detect, _) => Decoder::Detect(codec),
            _ => Decoder::V1(codec),
        }
    }

    /// The next frame, `Ok(None)` when more bytes are needed.
    pub fn decode(
        &mut self,
        shared: &Shared,
        buf: &mut BytesMut,
    ) -> Result<Option<Frame>, WireError> {
        use tokio_util::codec::Decoder as _;
        if let Decoder::Detect(codec) = self {
            let n = buf.len().min(PREFACE.len());
            if n == 0 || (buf[..n] == PREFACE[..n] && n < PREFACE.len()) {
                return Ok(None);
            }
            if buf[..n] == PREFACE[..] {
                tracing::debug!("the peer speaks Seata's gRPC");
                let link = Arc::new(Link::server());
                let _ = shared.grpc.set(link.clone());
                // The writer, idle since the start, waits on the link from now on;
                // this wakes it to send the server's SETTINGS.
                shared.lanes.wake.notify_one();
                *self = Decoder::Grpc(GrpcReader::new(link, shared.max_frame_len));
            } else {
                *self = Decoder::V1(*codec);
            }
        }
        match self {
            Decoder::V1(codec) | Decoder::Detect(codec) => Ok(codec.decode(buf)?),
            Decoder::Grpc(reader) => Ok(reader.decode(buf)?),
        }
    }
}

impl WireError {
    /// True when the frame was refused for its size alone (a smaller one would go).
    pub fn is_too_large(&self) -> bool {
        matches!(
            self,
            WireError::Frame(FrameError::TooLong { .. })
                | WireError::Grpc(GrpcError::TooLarge { .. })
        )
    }
}

impl Shared {
    /// How many bytes of request bodies one MergedWarpMessage may gather, and what to
    /// count per entry besides its body: on gRPC the whole message must fit one DATA
    /// frame of the peer's size, and each entry grows by an `Any`'s type URL (about
    /// 90 bytes) and its protobuf wrapping when rewritten.
    pub(super) fn merge_bound(&self) -> (usize, usize) {
        match self.grpc.get() {
            Some(link) => (link.peer_max_frame().saturating_sub(256), 160),
            None => (self.max_frame_len, 4),
        }
    }

    /// Appends `f` to the write buffer as the wire carries it.
    pub(super) fn put(&self, f: &Frame, buf: &mut BytesMut) -> Result<(), WireError> {
        match self.grpc.get() {
            Some(link) => Ok(crate::grpc::writer::put(link, f, buf, self.max_frame_len)?),
            None => Ok(f.encode_into(buf, self.max_frame_len)?),
        }
    }
}
