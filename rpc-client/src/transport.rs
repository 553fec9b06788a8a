//! The limits of one connection, shared by [`RpcClient`](crate::RpcClient) and
//! [`Server`](crate::Server): frame size, queue budgets in bytes, the write deadline and
//! the inbound concurrency cap.
//!
//! # Why these four limits
//!
//! A connection that carries heavy traffic both ways must neither stall nor grow
//! without bound. Each limit closes one way it could:
//!
//! - **`max_frame_len`**: a frame longer than this is refused from the 7 header bytes
//!   that announce it, before any buffer grows (Seata's own limit is 8 MiB).
//! - **`request_queue_bytes`**: requests and one-way sends wait for room in a queue
//!   bounded in *bytes*, not frames (256 frames of 8 MiB would be 2 GiB). A caller that
//!   finds it full waits (`call`) or is told at once (`try_call`); a request that never
//!   got into the queue was never written and is safe to send elsewhere.
//! - **`response_queue_bytes`**: answers to the peer's requests and PONGs go through a
//!   separate lane that the reader fills *without ever waiting* on the writer. If the
//!   peer pushes requests faster than it reads our answers, that lane exceeds its budget
//!   and the connection is closed with a reason naming the budget: a peer that does not
//!   read cannot make us buffer without bound, and two peers that both push can never
//!   deadlock waiting on each other's writer.
//! - **`write_timeout`**: a peer that stops reading leaves our writer with a full
//!   socket. When the socket accepts no byte for this long, the connection is closed
//!   with a reason and the endpoint leaves the alive set, instead of every call routed
//!   there timing out one by one.
//! - **`max_inbound_requests`**: requests the peer sends us run in the
//!   [`InboundHandler`](crate::InboundHandler); at most this many at once per connection.
//!   At the cap the reader stops reading, so TCP pushes back on the peer instead of
//!   us spawning a task per request without limit. (Responses to *our* requests are
//!   only read while the reader runs, so a handler that waits for an answer on the same
//!   connection should be counted in the cap's sizing.)
//!
//! From a config file these are `transport.maxFrameLength`,
//! `transport.requestQueueBytes`, `transport.responseQueueBytes`,
//! `transport.writeTimeout` and `transport.maxInboundRequests` (meshline's own keys;
//! Seata's `transport.*` keys keep their Seata meaning).
//!
//! # What the writer does to Seata requests
//!
//! Three more options change what goes on the wire, as Seata's client does it, and only
//! for requests whose body is a Seata-codec message (codec byte 1, not compressed yet):
//!
//! - **[`codec`](TransportOptions::codec)** (`transport.serialization`): with
//!   `protobuf`, every such request (a merged one as a whole) is written in Seata's
//!   protobuf codec ([`crate::message::protobuf`]); a body the protobuf messages cannot
//!   carry (a v1-only constant) goes in the seata codec, with a warning. Answers in
//!   either codec are read; a merged answer in protobuf is split as a seata one.
//! - **[`compressor`](TransportOptions::compressor)** (`transport.compressor`): every
//!   such request and one-way body is compressed when it is written. Answers are not:
//!   Seata answers with the request's own compressor, which is the handler's to echo
//!   ([`Payload::seata_compressed`](crate::Payload::seata_compressed)). Bodies are
//!   decompressed where they are decoded ([`Payload::decode_seata`](crate::Payload::decode_seata)).
//! - **[`batch`](TransportOptions::batch)** (Seata's client batching,
//!   `transport.enableTmClientBatchSendRequest` / `enableRmClientBatchSendRequest`,
//!   `transport.maxMergeSendMills`): transaction requests queued together are sent as
//!   one `MergedWarpMessage` (one-way, a frame id of its own, each request's id inside),
//!   and the TC's `MergeResultMessage` or `BatchResultMessage` is split so that each
//!   caller still gets its own answer, error or timeout. Registrations and heartbeats
//!   are never merged, and a request alone in the queue goes as it is.

use std::sync::Arc;
use std::time::Duration;

use meshline_registry_core::{Config, RegistryError};

use crate::TransportConfig;
use crate::codec::{DEFAULT_MAX_FRAME_LEN, HEADER_LEN};
use crate::compress::Compressor;
use crate::settings::set_present;

/// Per-connection limits (see the [module docs](self) for why each exists).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportOptions {
    /// Largest frame written or accepted, header included (default 8 MiB, as Seata).
    pub max_frame_len: usize,
    /// Bytes of requests and one-way sends queued and being written (default 16 MiB).
    /// One frame larger than the budget is admitted when the queue is empty.
    pub request_queue_bytes: usize,
    /// Bytes of responses and PONGs queued for the peer (default 16 MiB). Exceeding it
    /// closes the connection: the peer sends requests but does not read the answers.
    pub response_queue_bytes: usize,
    /// Close the connection when the socket accepts no byte for this long while we have
    /// something to write (default 10 s; `None` waits forever, not recommended).
    pub write_timeout: Option<Duration>,
    /// Requests from the peer handled at once on one connection (default 1024). At the
    /// cap the reader stops reading until a handler finishes.
    pub max_inbound_requests: usize,
    /// Compress the Seata request bodies this connection writes (default none;
    /// `transport.compressor`). See the [module docs](self).
    pub compressor: Compressor,
    /// The codec Seata request bodies go out in: [`CODEC_SEATA`](crate::codec::CODEC_SEATA)
    /// (default) or [`CODEC_PROTOBUF`](crate::codec::CODEC_PROTOBUF)
    /// (`transport.serialization = protobuf`). See the [module docs](self).
    pub codec: u8,
    /// The wire a client's connections speak: Seata RPC v1 (default) or Seata's gRPC
    /// (`transport.protocol = grpc`, [`crate::grpc`]; its bodies are always protobuf).
    /// A [`Server`](crate::Server) takes both on one port, whatever this says.
    pub protocol: Protocol,
    /// Merge queued Seata transaction requests into `MergedWarpMessage`s (default off;
    /// the TM and RM layers turn it on per Seata's keys). See the [module docs](self).
    pub batch: Option<BatchOptions>,
}

/// The wire protocol of a client's connections (`transport.protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// Seata RPC v1 frames (`seata`, Seata's default).
    #[default]
    Seata,
    /// Seata's gRPC: v1's messages as protobuf bodies on one HTTP/2 stream (`grpc`).
    Grpc,
}

/// How a client finds a silent peer while it waits for answers (see
/// [`ClientOptions::probe`](crate::ClientOptions::probe)): the two delays of the busy
/// rule.
///
/// A peer whose host vanished or whose link was cut answers nothing, not even a reset:
/// with answers outstanding and no byte from the peer for `after`, a PING goes out (a
/// live peer answers it at once, ahead of its request handlers); with nothing back
/// within `timeout` either, the connection is closed as silent, its calls fail as "may
/// have been delivered" and the endpoint leaves the alive set. A peer frozen for longer
/// than `after + timeout` (a long GC pause) is closed the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// With an answer outstanding, PING the peer after this long without a byte from it
    /// (`transport.probeAfter`, default 250 ms).
    pub after: Duration,
    /// Close the connection when nothing arrives within this long after that PING
    /// (`transport.probeTimeout`, default 500 ms).
    pub timeout: Duration,
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            after: Duration::from_millis(250),
            timeout: Duration::from_millis(500),
        }
    }
}

/// How a connection merges Seata requests ([`TransportOptions::batch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOptions {
    /// How long the writer may hold transaction requests back to merge more
    /// (`transport.maxMergeSendMills`). Default zero: merge what is queued when the
    /// writer runs (requests pile up while the previous write is under way, so a busy
    /// connection merges many and an idle one delays none). Seata's Java client waits a
    /// fixed 1 ms before every merged send; at 256 transactions in flight that wait
    /// measured at about half the throughput of zero (examples/tc/BENCHMARKS.md). With a
    /// wait set, the writer waits only while other requests of the connection are in
    /// flight; a lone request is never delayed.
    pub max_wait: Duration,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            max_wait: Duration::ZERO,
        }
    }
}

impl Default for TransportOptions {
    fn default() -> Self {
        TransportOptions {
            max_frame_len: DEFAULT_MAX_FRAME_LEN,
            request_queue_bytes: 16 * 1024 * 1024,
            response_queue_bytes: 16 * 1024 * 1024,
            write_timeout: Some(Duration::from_secs(10)),
            max_inbound_requests: 1024,
            compressor: Compressor::None,
            codec: crate::codec::CODEC_SEATA,
            protocol: Protocol::Seata,
            batch: None,
        }
    }
}

impl TransportOptions {
    /// Defaults with the `transport.*` limits of `config` applied; an invalid value is
    /// an error naming the key.
    pub fn from_config(config: &Config) -> Result<Self, RegistryError> {
        let mut o = TransportOptions::default();
        o.apply_transport(&TransportConfig::from_config(config)?);
        Ok(o)
    }

    /// Applies the limits `t` sets (every other field is left as it is).
    pub fn apply_transport(&mut self, t: &TransportConfig) {
        set_present(&mut self.max_frame_len, t.max_frame_length);
        set_present(&mut self.request_queue_bytes, t.request_queue_bytes);
        set_present(&mut self.response_queue_bytes, t.response_queue_bytes);
        if let Some(v) = t.write_timeout {
            self.write_timeout = (!v.is_zero()).then_some(v);
        }
        set_present(&mut self.max_inbound_requests, t.max_inbound_requests);
        // Checked when the keys were read: an unknown name (or 7z) is an error there,
        // naming the key.
        self.compressor = Compressor::from_name(&t.compressor).unwrap_or_default();
        self.codec = crate::settings::serialization_codec(&t.serialization);
        self.protocol = if crate::settings::is_grpc(&t.protocol) {
            Protocol::Grpc
        } else {
            Protocol::Seata
        };
    }

    /// The limits as a connection uses them: a frame limit of at least a header, budgets
    /// of at least one byte (and at most `u32::MAX`, the semaphore's unit), a cap of at
    /// least one request.
    pub(crate) fn normalized(&self) -> TransportOptions {
        TransportOptions {
            max_frame_len: self.max_frame_len.clamp(HEADER_LEN, i32::MAX as usize),
            request_queue_bytes: self.request_queue_bytes.clamp(1, u32::MAX as usize),
            response_queue_bytes: self.response_queue_bytes.max(1),
            write_timeout: self.write_timeout,
            max_inbound_requests: self.max_inbound_requests.max(1),
            compressor: self.compressor,
            codec: self.codec,
            protocol: self.protocol,
            batch: self.batch,
        }
    }
}

/// Why a connection closed: a message, and the I/O error behind it when there is one.
///
/// Cheap to clone (every caller failed by one close gets the same reason).
#[derive(Debug, Clone)]
pub struct CloseReason {
    message: Arc<str>,
    source: Option<Arc<std::io::Error>>,
}

impl std::fmt::Display for CloseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CloseReason {
    // By hand: the source is shared (`Arc`), and callers should be able to downcast it
    // to the `io::Error` itself.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl CloseReason {
    /// A reason with no underlying error.
    pub fn new(message: impl Into<String>) -> Self {
        CloseReason {
            message: message.into().into(),
            source: None,
        }
    }

    /// A reason caused by `error`; the message includes the error's text.
    pub fn io(what: &str, error: std::io::Error) -> Self {
        CloseReason {
            message: format!("{what}: {error}").into(),
            source: Some(Arc::new(error)),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The I/O error behind it, if any.
    pub fn io_error(&self) -> Option<&std::io::Error> {
        self.source.as_deref()
    }
}

impl From<&str> for CloseReason {
    fn from(s: &str) -> Self {
        CloseReason::new(s)
    }
}

impl From<String> for CloseReason {
    fn from(s: String) -> Self {
        CloseReason::new(s)
    }
}
