//! The XID across real HTTP and gRPC services (`meshline::tx::http`): a transaction
//! begun here calls an axum service with reqwest and a tonic service with tonic's
//! client; each service registers a branch under the XID its request carried, and the
//! commit reaches both branches at their RM. A request with no transaction, or with a
//! header that is not an XID, is handled outside any.

use crate::tx_world;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::post;
use meshline::rpc::message::BranchType;
use meshline::rpc::rm::ResourceManager;
use meshline::tx;
use meshline::tx::http::{BindXidLayer, PropagateXidLayer, XID_HEADER};
use meshline_bench_support::grpc::{GrpcMethods, GrpcService, HttpRequest, Reply, unary_fn};
use tonic::codegen::http;
use tower::ServiceBuilder;
use tx_world::*;

const RESOURCE: &str = "tcc:account";

/// What a service does with a request: registers a branch under the transaction the
/// request runs in, and answers its id (`none` outside any transaction).
async fn debit(rm: &ResourceManager) -> String {
    match tx::current() {
        None => "none".into(),
        Some(c) => {
            assert_eq!(c.role(), tx::Role::Participant);
            rm.branch_register(c.xid(), BranchType::TCC, RESOURCE, None, None)
                .await
                .map(|b| format!("{} {b}", c.xid()))
                .unwrap_or_else(|e| format!("error {e}"))
        }
    }
}

// ---------------------------------------------------------------- axum + reqwest --

async fn start_axum(rm: ResourceManager) -> SocketAddr {
    async fn handler(State(rm): State<Arc<ResourceManager>>) -> String {
        debit(&rm).await
    }
    let app = axum::Router::new()
        .route("/debit", post(handler))
        .with_state(Arc::new(rm))
        .layer(BindXidLayer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

// ------------------------------------------------------------------------ tonic --

/// The request and answer (hand-written prost message: no protoc).
#[derive(Clone, PartialEq, prost::Message)]
struct Text {
    #[prost(string, tag = "1")]
    text: String,
}

/// `/meshline.test.Account/Debit`, a service written by hand (the RM is cheap to clone).
#[derive(Clone)]
struct Account(ResourceManager);

impl GrpcMethods for Account {
    const NAME: &'static str = "meshline.test.Account";

    fn serve(&mut self, req: HttpRequest) -> Option<Reply> {
        let rm = self.0.clone();
        let call = move |_: Text| async move {
            Text {
                text: debit(&rm).await,
            }
        };
        (req.uri().path() == "/meshline.test.Account/Debit").then(|| unary_fn(call, req))
    }
}

async fn start_tonic(rm: ResourceManager) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let svc = GrpcService(Account(rm));
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .layer(BindXidLayer)
            .add_service(svc)
            .serve_with_incoming(incoming)
            .await
    });
    addr
}

/// One Debit call over tonic, through a channel wrapped in `PropagateXidLayer`.
async fn grpc_debit(addr: SocketAddr) -> String {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let svc = ServiceBuilder::new()
        .layer(PropagateXidLayer)
        .service(channel);
    let mut grpc = tonic::client::Grpc::new(svc);
    grpc.ready().await.unwrap();
    let answer: tonic::Response<Text> = grpc
        .unary(
            tonic::Request::new(Text::default()),
            http::uri::PathAndQuery::from_static("/meshline.test.Account/Debit"),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .unwrap();
    answer.into_inner().text
}

async fn http_debit(addr: SocketAddr, extra: Option<(&str, &str)>) -> String {
    let mut req = reqwest::Client::new()
        .post(format!("http://{addr}/debit"))
        .headers(tx::http::current_headers());
    if let Some((k, v)) = extra {
        req = req.header(k, v);
    }
    let resp = req.send().await.unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    resp.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_xid_travels_over_http_and_grpc_and_both_branches_commit_with_it() {
    let (hub, _tcs) = world(1).await;
    let tm = tm(&hub, 1).await;
    let phase_two = Recorder::default();
    let rm = rm(&hub, "account", RESOURCE, phase_two.clone(), true, 1).await;
    let (web, grpc) = (start_axum(rm.clone()).await, start_tonic(rm).await);

    let (xid, over_http, over_grpc) = tm
        .transactional("transfer")
        .run(|t| async move {
            let xid = t.unwrap().xid().to_string();
            Ok::<_, ()>((xid, http_debit(web, None).await, grpc_debit(grpc).await))
        })
        .await
        .unwrap();
    let branch = |answer: &str| -> i64 {
        let (x, b) = answer
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("a branch, got {answer:?}"));
        assert_eq!(x, xid, "the service ran inside the caller's transaction");
        b.parse().unwrap()
    };
    let (b1, b2) = (branch(&over_http), branch(&over_grpc));
    let mut calls = phase_two.wait_calls(2, Duration::from_secs(5)).await;
    calls.sort_by_key(|c| format!("{c:?}"));
    let mut want = vec![Call::Commit(xid.clone(), b1), Call::Commit(xid.clone(), b2)];
    want.sort_by_key(|c| format!("{c:?}"));
    assert_eq!(calls, want, "the TC committed both branches under the XID");

    // Outside a transaction nothing is carried, and a header that is no XID is not
    // bound.
    assert_eq!(http_debit(web, None).await, "none");
    assert_eq!(grpc_debit(grpc).await, "none");
    assert_eq!(
        http_debit(web, Some((XID_HEADER.as_str(), "not an xid"))).await,
        "none"
    );
}
