//! # meshline-rpc-client
//!
//! Long connections to every server a registry lists, Seata RPC v1 frames on them, and
//! load-balanced calls that survive servers coming and going.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use meshline_registry_core::RegistryService;
//! // `registry`: any backend (file, etcd3, nacos, ...), e.g. from the `meshline` facade.
//! # async fn run(registry: Arc<dyn RegistryService>) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use meshline_registry_core::{Config, Discovery};
//! use meshline_rpc_client::{CallOptions, Payload, RegisterTmRequest, RpcClient, SeataRegistration};
//!
//! let config = Config::load(None)?; // Seata defaults: default_tx_group -> default -> 127.0.0.1:8091
//! let discovery = Discovery::from_config(registry, &config);
//! let client = RpcClient::builder()
//!     .config(&config) // client.loadBalance.type (XID), transport.* timeouts and heartbeat
//!     .discovery(discovery, "default_tx_group")
//!     .handshake(SeataRegistration::tm(RegisterTmRequest {
//!         version: "2.3.0".into(),
//!         application_id: "my-app".into(),
//!         transaction_service_group: "default_tx_group".into(),
//!         extra_data: None,
//!     }))
//!     .build()
//!     .await?;
//! client.wait_alive(1, Duration::from_secs(5)).await?;
//! let resp = client
//!     .call(Payload::new(&b"..."[..]), CallOptions::xid("10.0.0.7:8091:2612341069705662465"))
//!     .await?;
//! println!("answered by {}", resp.endpoint);
//! # Ok(()) }
//! ```
//!
//! ## What it does
//!
//! - **Frames** ([`codec`]): Seata RPC protocol v1 as a `tokio_util` codec, with a
//!   frame-length limit checked before any allocation and errors that name the fault.
//! - **Messages** ([`message`]): heartbeat, RegisterTM / RegisterRM and their responses
//!   in the Seata codec; every other body is opaque bytes with a type code.
//! - **Connections** ([`Connection`]): one writer task that batches writes, one reader
//!   that matches responses to requests by id, answers PINGs and runs an
//!   [`InboundHandler`] for requests the peer sends (a TC's branch commit, a game
//!   backend's push); PING on write-idle (5 s), close on read-idle (15 s). Queues and
//!   batches are bounded in bytes, the reader never waits on the writer, a stalled
//!   write closes the connection, and inbound handlers are capped per connection:
//!   [`transport`] explains each limit.
//! - **The client** ([`RpcClient`]): follows a registry [`Watch`](meshline_registry_core::Watch)
//!   (or a tx-service-group through [`Discovery`](meshline_registry_core::Discovery)),
//!   keeps one connection per endpoint (or a stable random subset), reconnects with
//!   jittered backoff, runs a [`Handshake`] per connection, and offers only connected,
//!   handshaken endpoints (the [`AliveSet`]) to the `meshline-loadbalance` balancer.
//! - **A server** ([`Server`]): the same machinery on the accepting side, with a
//!   connection limit, an accept hook, connection ids, a per-connection state slot and
//!   connect / close hooks: what a TC stand-in or a game backend is built on.
//!
//! ## Delivery rules
//!
//! | What happened | What you get |
//! |---|---|
//! | the endpoint failed before the request was written | retried on another endpoint (up to [`ClientOptions::max_attempts`], excluding failed ones) |
//! | the request (or a one-way send) was handed to a write, then the connection failed | [`RpcError::MaybeDelivered`] |
//! | the write queue was full (every candidate's, or for the whole timeout) | [`RpcError::Overloaded`] (not delivered; `try_call` says so at once) |
//! | no answer within the timeout | [`RpcError::Timeout`] (may have been delivered) |
//! | nothing alive | [`RpcError::NoEndpoint`] |
//! | the client is shutting down | [`RpcError::Shutdown`] |
//!
//! Timeouts and cancelled calls (a dropped future) release their in-flight count and
//! their pending entry; a request whose caller gave up before it reached the socket is
//! not sent at all.
//!
//! ## For gateways
//!
//! Bodies are [`bytes::Bytes`] end to end: a response body is a slice of the read
//! buffer, and a forwarded payload is never decoded. The frame's head map
//! ([`HeadMap`]) carries routing identity (player, session, trace id) beside the body;
//! [`CallOptions::route`] takes a `PickRequest` (key, hash, source address, zone,
//! exclusions) so every game balancer gets its routing facts, and
//! [`RpcClient::call_to`] addresses one backend directly for state bound to it (a
//! room, a battle); [`RpcClient::send_oneway_to`] and [`RpcClient::send_oneway_to_all`]
//! push without waiting for answers. Backends can push to the gateway at any time
//! through the [`InboundHandler`].
//!
//! ## Observability
//!
//! `tracing` spans `rpc_call`, `endpoint`, `connection`; `metrics` counters
//! `meshline_rpc_{connects,reconnects,connect_failures,handshake_failures,timeouts,retries,maybe_delivered}_total`
//! and the gauge `meshline_rpc_alive_endpoints`, all labelled `target`; the same totals
//! from [`RpcClient::stats`].
#![warn(missing_docs)]

mod client;
pub mod codec;
pub mod compress;
mod connection;
mod deadline_write;
mod error;
mod exchange;
pub mod grpc;
mod handshake;
mod inbound;
pub mod limits;
pub mod message;
mod outcome;
mod payload;
pub mod probe;
pub mod rm;
pub(crate) mod role_builder;
pub mod server;
mod settings;
pub mod tcc;
pub mod tm;
pub mod transport;
pub mod tx;
mod tx_error;

pub use client::{
    AliveEndpoint, AliveEndpoints, AliveIter, AliveSet, CallOptions, ClientOptions, ClientStats,
    DEFAULT_MAX_CONNECTED_MEMBERS, EndpointState, EndpointStatus, Response, RpcClient,
    RpcClientBuilder,
};
pub use client::{ApertureCoordinate, Hedging, OutlierDetection, RetryBudget, SlowStart};
pub use codec::{Frame, FrameCodec, FrameError, HeadMap, HeadMapWriter, MessageType};
pub use compress::Compressor;
pub use connection::{Connection, ConnectionId};
pub use error::RpcError;
pub use handshake::{Handshake, SeataRegistration, TcVersion};
pub use inbound::{BoxFuture, InboundHandler, InboundRequest};
pub use limits::{Breaker, BreakerSettings, CallLimits, ConcurrencyLimit, LimitScope};
pub use message::{RegisterResponse, RegisterRmRequest, RegisterTmRequest, SeataMessage};
pub use outcome::{Classifier, Classify, Outcome};
pub use payload::{BodyFormat, Payload};
pub use role_builder::SEATA_VERSION;
pub use server::{Server, ServerBuilder, ServerConfig, ServerStats};
pub use settings::{
    HedgeConfig, LimitsConfig, OutlierConfig, RmConfig, SlowStartConfig, TmConfig, TransportConfig,
};
pub use transport::{BatchOptions, CloseReason, Probe, Protocol, TransportOptions};
pub use tx_error::TransactionError;

/// `now + after`, or a far-off instant when that would overflow (`Duration::MAX` means
/// "no deadline" and must not panic).
pub(crate) fn deadline_after(after: std::time::Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(after)
        .unwrap_or_else(|| now + std::time::Duration::from_secs(86_400 * 365 * 30))
}
