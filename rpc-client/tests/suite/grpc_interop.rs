//! Seata's gRPC transport against an independent HTTP/2 and gRPC implementation
//! (tonic over h2): a standard gRPC client calling `SeataService.sendRequest` on our
//! server, and our client on a standard tonic server of that service (which, unlike
//! Seata's, ends each answer stream with trailers and sends `grpc-status` only there).

use crate::common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use meshline_bench_support::grpc::{GrpcMethods, GrpcService, HttpRequest, Reply, streaming};
use meshline_rpc_client::grpc::{GrpcMessageProto, PATH};
use meshline_rpc_client::{Payload, Protocol};
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::http;

/// A codec byte no layer rewrites.
const RAW: u8 = 0x77;

fn request(id: i32, body: &'static [u8]) -> GrpcMessageProto {
    let mut m = GrpcMessageProto {
        id,
        message_type: 0,
        head_map: Default::default(),
        body: Bytes::from_static(body),
    };
    m.head_map.insert("codec-type".into(), RAW.to_string());
    m.head_map.insert("compress-type".into(), "0".into());
    m
}

#[tokio::test]
async fn a_standard_grpc_client_is_answered_by_our_server() {
    let server = common::start("s1", common::Mode::Echo).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tx.send(request(1, b"one")).await.unwrap();
    let codec = tonic_prost::ProstCodec::<GrpcMessageProto, GrpcMessageProto>::default();
    let response = grpc
        .streaming(
            tonic::Request::new(ReceiverStream::new(rx)),
            http::uri::PathAndQuery::from_static(PATH),
            codec,
        )
        .await
        .unwrap();
    let mut answers = response.into_inner();
    let first = answers.message().await.unwrap().expect("an answer");
    assert_eq!((first.id, first.message_type), (1, 1));
    assert_eq!(&first.body[..], b"one");
    assert_eq!(first.head_map.get("server").map(String::as_str), Some("s1"));
    // More on the same stream, each answered by id.
    for id in 2..50 {
        tx.send(request(id, b"more")).await.unwrap();
        let a = answers.message().await.unwrap().expect("an answer");
        assert_eq!((a.id, &a.body[..]), (id, &b"more"[..]));
    }
    assert_eq!(server.server.connections()[0].protocol(), Protocol::Grpc);
}

/// PINGs the tonic server answered.
static PINGS: AtomicUsize = AtomicUsize::new(0);

/// A tonic server of `SeataService` answering every request with its own body.
async fn start_tonic() -> SocketAddr {
    #[derive(Clone)]
    struct Seata;
    impl GrpcMethods for Seata {
        const NAME: &'static str = "org.apache.seata.protocol.protobuf.SeataService";
        fn serve(&mut self, req: HttpRequest) -> Option<Reply> {
            (req.uri().path() == PATH).then(|| streaming(Echo, req))
        }
    }
    struct Echo;
    impl tonic::server::StreamingService<GrpcMessageProto> for Echo {
        type Response = GrpcMessageProto;
        type ResponseStream = ReceiverStream<Result<GrpcMessageProto, tonic::Status>>;
        type Future =
            std::future::Ready<Result<tonic::Response<Self::ResponseStream>, tonic::Status>>;
        fn call(
            &mut self,
            request: tonic::Request<tonic::Streaming<GrpcMessageProto>>,
        ) -> Self::Future {
            let mut inbound = request.into_inner();
            let (tx, rx) = tokio::sync::mpsc::channel(64);
            tokio::spawn(async move {
                while let Ok(Some(mut m)) = inbound.message().await {
                    if m.message_type == 3 {
                        PINGS.fetch_add(1, Ordering::SeqCst);
                    }
                    m.message_type = match m.message_type {
                        3 => 4,
                        _ => 1,
                    };
                    m.head_map.insert("server".into(), "tonic".into());
                    if tx.send(Ok(m)).await.is_err() {
                        break;
                    }
                }
            });
            std::future::ready(Ok(tonic::Response::new(ReceiverStream::new(rx))))
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(GrpcService(Seata))
            .serve_with_incoming(incoming),
    );
    addr
}

#[tokio::test]
async fn our_client_speaks_to_a_standard_grpc_server() {
    let addr = start_tonic().await;
    let hub = common::hub();
    hub.publish(
        "c",
        vec![meshline_registry_core::Instance::new("127.0.0.1", addr.port()).unwrap()],
    );
    let client = common::builder(&hub, "RoundRobin")
        .configure(|o| {
            o.transport.protocol = Protocol::Grpc;
            o.heartbeat = true;
            o.write_idle = Duration::from_millis(50);
        })
        .build()
        .await
        .unwrap();
    client.wait_alive(1, Duration::from_secs(5)).await.unwrap();
    let calls = (0..100u32).map(|i| {
        let client = client.clone();
        async move {
            let body = vec![i as u8; (i as usize * 131) % 12_000];
            let a = client
                .call(
                    Payload::new(body.clone()).with_codec(RAW),
                    Default::default(),
                )
                .await
                .unwrap();
            assert_eq!(a.payload.body, body);
            assert_eq!(a.payload.head.get("server"), Some("tonic"));
        }
    });
    futures_util::future::join_all(calls).await;
    // Heartbeats (a PING after 50 ms idle) cross as messageType 3 and are answered;
    // the connection stays up through them.
    let before = PINGS.load(Ordering::SeqCst);
    common::until(Duration::from_secs(5), || {
        PINGS.load(Ordering::SeqCst) >= before + 3
    })
    .await
    .expect("three heartbeats answered");
    assert_eq!(client.alive().len(), 1);
}
