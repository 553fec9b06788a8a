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
//!   backend's push); PING on write-idle (5 s), close on read-idle (15 s).
//! - **The client** ([`RpcClient`]): follows a registry [`Watch`](meshline_registry_core::Watch)
//!   (or a tx-service-group through [`Discovery`](meshline_registry_core::Discovery)),
//!   keeps one connection per endpoint (or a stable random subset), reconnects with
//!   jittered backoff, runs a [`Handshake`] per connection, and offers only connected,
//!   handshaken endpoints (the [`AliveSet`]) to the `meshline-loadbalance` balancer.
//! - **A server** ([`Server`]): the same machinery on the accepting side, used by the
//!   `tc-server` program, the tests and the bench.
//!
//! ## Delivery rules
//!
//! | What happened | What you get |
//! |---|---|
//! | the endpoint failed before the request was written | retried on another endpoint (up to [`ClientOptions::max_attempts`], excluding failed ones) |
//! | the request was written, then the connection failed | [`RpcError::MaybeDelivered`] |
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
//! [`CallOptions::with_key`] / [`CallOptions::with_hash`] route by it, and
//! [`RpcClient::call_to`] addresses one backend directly for state bound to it (a
//! room, a battle). Backends can push to the gateway at any time through the
//! [`InboundHandler`].
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
mod connection;
mod error;
mod handshake;
pub mod message;
mod payload;
pub mod server;
mod subset;

pub use client::{
    AliveEndpoint, AliveSet, CallOptions, ClientOptions, ClientStats, EndpointState,
    EndpointStatus, Response, RpcClient, RpcClientBuilder,
};
pub use codec::{Frame, FrameCodec, FrameError, HeadMap, MessageType};
pub use connection::{BoxFuture, Connection, InboundHandler, InboundRequest};
pub use error::RpcError;
pub use handshake::{Handshake, SeataRegistration};
pub use message::{RegisterResponse, RegisterRmRequest, RegisterTmRequest, SeataMessage};
pub use payload::Payload;
pub use server::{Server, ServerConfig};
