//! The bank over gRPC (tonic, a hand-written service: no protoc): `meshline.bank.Bank/Try`
//! runs a leg's try inside the transaction the call's metadata carries (`tx_xid`).

use std::net::SocketAddr;
use std::sync::Arc;

use meshline::tx::http::BindXidLayer;
use tonic::codegen::http;

use super::Bank;

/// One leg.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TryRequest {
    /// The account.
    #[prost(string, tag = "1")]
    pub account: String,
    /// Negative debits, positive credits.
    #[prost(sint64, tag = "2")]
    pub amount: i64,
}

/// The try's outcome.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TryReply {
    /// Whether the try succeeded.
    #[prost(bool, tag = "1")]
    pub ok: bool,
    /// `branch N`, or why not.
    #[prost(string, tag = "2")]
    pub text: String,
}

/// The method's path.
pub const TRY_PATH: &str = "/meshline.bank.Bank/Try";

#[derive(Clone)]
struct Service(Arc<Bank>);

impl tonic::server::NamedService for Service {
    const NAME: &'static str = "meshline.bank.Bank";
}

struct TryCall(Arc<Bank>);

impl tonic::server::UnaryService<TryRequest> for TryCall {
    type Response = TryReply;
    type Future = tonic::codegen::BoxFuture<tonic::Response<TryReply>, tonic::Status>;

    fn call(&mut self, request: tonic::Request<TryRequest>) -> Self::Future {
        let bank = self.0.clone();
        Box::pin(async move {
            let r = request.into_inner();
            let reply = match bank.try_leg(r.account, r.amount).await {
                Ok(branch) => TryReply {
                    ok: true,
                    text: format!("branch {branch}"),
                },
                Err(e) => TryReply { ok: false, text: e },
            };
            Ok(tonic::Response::new(reply))
        })
    }
}

impl<B> tonic::codegen::Service<http::Request<B>> for Service
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = tonic::codegen::BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let bank = self.0.clone();
        Box::pin(async move {
            if req.uri().path() == TRY_PATH {
                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
                Ok(grpc.unary(TryCall(bank), req).await)
            } else {
                Ok(tonic::Status::unimplemented("no such method").into_http())
            }
        })
    }
}

/// Serves until the process stops; returns the bound address once listening.
pub async fn serve(bank: Arc<Bank>, listen: SocketAddr) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .layer(BindXidLayer)
            .add_service(Service(bank))
            .serve_with_incoming(incoming)
            .await
    });
    Ok(addr)
}
