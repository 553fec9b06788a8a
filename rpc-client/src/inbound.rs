//! Requests the peer sends us, and the handler that answers them.
//!
//! Both ends of a connection can send requests: a TC sends branch commits to an RM, a
//! game backend pushes to a gateway, a client calls a [`Server`](crate::Server). Each
//! such request goes to the connection's [`InboundHandler`].

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

use crate::connection::Connection;
use crate::payload::Payload;

/// A boxed, sendable future (what handlers and handshakes return).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A request the peer sent us: a TC's branch commit, a backend's push, or (on the
/// server side) a client's call.
#[derive(Debug)]
pub struct InboundRequest {
    /// The peer's socket address.
    pub peer: SocketAddr,
    /// True for a one-way request (type 2): any response is ignored.
    pub oneway: bool,
    /// The peer's request id (the response reuses it).
    pub request_id: u32,
    /// Head map and body.
    pub payload: Payload,
    /// The connection it came on (to push more requests back, to identify the peer, or
    /// to reach its [state slot](Connection::state)).
    pub connection: Connection,
}

/// Handles requests the peer sends. The returned payload (if any) is sent back on the
/// same connection as a response with the request's id; for one-way requests it is
/// dropped.
///
/// Implemented for any `Fn(InboundRequest) -> impl Future<Output = Option<Payload>>`.
/// A handler whose future is ready at once is run inline on the reader (no task spawn);
/// one that waits is spawned. At most
/// [`max_inbound_requests`](crate::TransportOptions::max_inbound_requests) run at once
/// per connection; at that cap the connection stops reading until one finishes, so a
/// flood of slow requests is pushed back to the peer instead of piling up tasks.
pub trait InboundHandler: Send + Sync + 'static {
    /// Handles one request.
    fn handle(&self, request: InboundRequest) -> BoxFuture<'static, Option<Payload>>;
}

impl<F, Fut> InboundHandler for F
where
    F: Fn(InboundRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<Payload>> + Send + 'static,
{
    fn handle(&self, request: InboundRequest) -> BoxFuture<'static, Option<Payload>> {
        Box::pin(self(request))
    }
}
