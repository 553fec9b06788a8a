//! gRPC services written by hand: prost messages derived in Rust and a tonic server
//! without tonic-build, so nothing needs `protoc`. The methods a service has are the
//! only part each service writes; [`GrpcService`] is the rest of what tonic-build would
//! generate (the tower service tonic's server routes `/<NAME>/*` to). The bank serves
//! its `Try` this way, and the benches and tests that talk to a tonic peer serve theirs.

use std::convert::Infallible;
use std::future::Future;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::{BoxFuture, http};
use tonic::server::{StreamingService, UnaryService};
use tonic_prost::prost::Message;

/// One request, as tonic's server hands it over.
pub type HttpRequest = http::Request<Body>;

/// The answer to one request, as tonic's server takes it.
pub type Reply = BoxFuture<http::Response<Body>, Infallible>;

/// A gRPC service's methods: its name, and which method serves a request's path.
pub trait GrpcMethods: Clone + Send + Sync + 'static {
    /// The service's full name (`package.Service`): tonic's server sends every request
    /// under `/<NAME>/` here.
    const NAME: &'static str;

    /// Serves `req` with the method its path names ([`unary`], [`unary_fn`] or
    /// [`streaming`]), or `None` when the path names none of them (answered
    /// `Unimplemented`).
    fn serve(&mut self, req: HttpRequest) -> Option<Reply>;
}

/// A [`GrpcMethods`] as the service `tonic::transport::Server::add_service` takes:
/// always ready, each request to the method its path names, any other path answered
/// `Unimplemented` ("no such method").
#[derive(Clone)]
pub struct GrpcService<M>(pub M);

impl<M: GrpcMethods> tonic::server::NamedService for GrpcService<M> {
    const NAME: &'static str = M::NAME;
}

impl<M: GrpcMethods> tonic::codegen::Service<HttpRequest> for GrpcService<M> {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Reply;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: HttpRequest) -> Reply {
        self.0.serve(req).unwrap_or_else(|| {
            Box::pin(std::future::ready(Ok(tonic::Status::unimplemented(
                "no such method",
            )
            .into_http())))
        })
    }
}

/// Serves `req` with the unary `method`, prost-encoded both ways.
pub fn unary<S, T>(method: S, req: HttpRequest) -> Reply
where
    S: UnaryService<T> + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Message + Send + 'static,
    T: Message + Default + Send + 'static,
{
    Box::pin(async move {
        let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
        Ok(grpc.unary(method, req).await)
    })
}

/// Serves `req` with a unary method written as an async function from the request
/// message to the reply (the request's metadata is not looked at), prost-encoded both
/// ways.
pub fn unary_fn<T, F, Fut>(method: F, req: HttpRequest) -> Reply
where
    F: FnOnce(T) -> Fut + Send + 'static,
    Fut: Future<Output: Message + Send + 'static> + Send + 'static,
    T: Message + Default + Send + 'static,
{
    unary(AsyncFn(Some(method)), req)
}

/// An async function of a request message, as tonic's unary service of one request.
struct AsyncFn<F>(Option<F>);

impl<T, F, Fut> UnaryService<T> for AsyncFn<F>
where
    F: FnOnce(T) -> Fut,
    Fut: Future + Send + 'static,
{
    type Response = Fut::Output;
    type Future = BoxFuture<tonic::Response<Fut::Output>, tonic::Status>;

    fn call(&mut self, request: tonic::Request<T>) -> Self::Future {
        let method = self.0.take().expect("tonic calls a unary method once");
        let reply = method(request.into_inner());
        Box::pin(async move { Ok(tonic::Response::new(reply.await)) })
    }
}

/// Serves `req` with the bidirectional streaming `method`, prost-encoded both ways.
pub fn streaming<S, T>(method: S, req: HttpRequest) -> Reply
where
    S: StreamingService<T> + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Message + Send + 'static,
    S::ResponseStream: Send + 'static,
    T: Message + Default + Send + 'static,
{
    Box::pin(async move {
        let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
        Ok(grpc.streaming(method, req).await)
    })
}

/// Serves `methods` with tonic on a new loopback port, with `TCP_NODELAY` (as the peers
/// the benches measure against), until the runtime ends; an error of the server goes to
/// stderr. Returns the port's address.
pub async fn serve_on_loopback<M: GrpcMethods>(methods: M) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind tonic server");
    let addr = listener.local_addr().expect("addr");
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tokio::spawn(async move {
        if let Err(e) = tonic::transport::Server::builder()
            .add_service(GrpcService(methods))
            .serve_with_incoming(incoming)
            .await
        {
            tracing::warn!(error = %e, "tonic server ended");
        }
    });
    addr
}
