//! The bank over gRPC (tonic, a hand-written service: no protoc): `meshline.bank.Bank/Try`
//! runs a leg's try inside the transaction the call's metadata carries (`tx_xid`).

use std::net::SocketAddr;
use std::sync::Arc;

use meshline::tx::http::BindXidLayer;
use meshline_bench_support::grpc::{GrpcMethods, GrpcService, HttpRequest, Reply, unary_fn};

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

/// The `meshline.bank.Bank` service: its one method, `Try`.
#[derive(Clone)]
struct Service(Arc<Bank>);

impl GrpcMethods for Service {
    const NAME: &'static str = "meshline.bank.Bank";

    fn serve(&mut self, req: HttpRequest) -> Option<Reply> {
        let bank = self.0.clone();
        (req.uri().path() == TRY_PATH).then(|| unary_fn(move |r: TryRequest| try_leg(bank, r), req))
    }
}

/// `Try`: the leg's try, and how it went.
async fn try_leg(bank: Arc<Bank>, r: TryRequest) -> TryReply {
    match bank.try_leg(r.account, r.amount).await {
        Ok(branch) => TryReply {
            ok: true,
            text: format!("branch {branch}"),
        },
        Err(e) => TryReply { ok: false, text: e },
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
            .add_service(GrpcService(Service(bank)))
            .serve_with_incoming(incoming)
            .await
    });
    Ok(addr)
}
