//! # meshline-rpc-client
//!
//! Long connections to every server a registry lists, Seata RPC v1 frames on them,
//! and load-balanced calls that survive servers coming and going.
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
