//! The tonic peer: two bidirectional streaming RPCs on one HTTP/2 connection, written
//! the way tonic-build generates a service (no protoc needed).

use super::*;

/// One message of either stream: an id to match the answer, and the body (hand-written
/// prost message: no protoc needed).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Msg {
    #[prost(uint64, tag = "1")]
    pub(crate) id: u64,
    #[prost(bytes = "bytes", tag = "2")]
    pub(crate) body: Bytes,
}

/// What the server's side of the `Reverse` stream should do when the client opens it.
pub(crate) struct ReversePlan {
    pub(crate) dir: Arc<Dir>,
    pub(crate) window: Window,
    pub(crate) inflight: usize,
    pub(crate) body: Bytes,
    pub(crate) running: Running,
}

/// The service, written the way tonic-build generates one (as in echo_bench), with two
/// bidi streaming methods.
#[derive(Clone)]
pub(crate) struct TwoWayService {
    pub(crate) plan: Arc<Mutex<Option<ReversePlan>>>,
}

impl tonic::server::NamedService for TwoWayService {
    const NAME: &'static str = "bench.TwoWay";
}

/// `Forward`: echoes every message of the request stream on the response stream (the
/// request stream itself is the response stream: decode, encode, nothing else).
pub(crate) struct ForwardSvc;

impl tonic::server::StreamingService<Msg> for ForwardSvc {
    type Response = Msg;
    type ResponseStream = tonic::Streaming<Msg>;
    type Future = std::future::Ready<Result<tonic::Response<Self::ResponseStream>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<tonic::Streaming<Msg>>) -> Self::Future {
        std::future::ready(Ok(tonic::Response::new(request.into_inner())))
    }
}

/// `Reverse`: the server sends requests on its response stream and reads the client's
/// answers from the request stream.
pub(crate) struct ReverseSvc(Option<ReversePlan>);

impl tonic::server::StreamingService<Msg> for ReverseSvc {
    type Response = Msg;
    type ResponseStream = ReceiverStream<Result<Msg, tonic::Status>>;
    type Future = std::future::Ready<Result<tonic::Response<Self::ResponseStream>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<tonic::Streaming<Msg>>) -> Self::Future {
        let Some(plan) = self.0.take() else {
            return std::future::ready(Err(tonic::Status::failed_precondition(
                "no reverse run planned",
            )));
        };
        let (tx, rx) = mpsc::channel(plan.inflight * 2);
        tokio::spawn(drive_stream(
            plan.dir,
            plan.window,
            plan.inflight,
            plan.body,
            tx,
            Ok,
            request.into_inner(),
            plan.running,
        ));
        std::future::ready(Ok(tonic::Response::new(ReceiverStream::new(rx))))
    }
}

impl<B> tonic::codegen::Service<http::Request<B>> for TwoWayService
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = tonic::codegen::BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let plan = if req.uri().path() == "/bench.TwoWay/Reverse" {
            lock(&self.plan).take()
        } else {
            None
        };
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
            match req.uri().path() {
                "/bench.TwoWay/Forward" => Ok(grpc.streaming(ForwardSvc, req).await),
                "/bench.TwoWay/Reverse" => Ok(grpc.streaming(ReverseSvc(plan), req).await),
                _ => Ok(tonic::Status::unimplemented("no such method").into_http()),
            }
        })
    }
}

/// The sending side of one stream direction: keeps `inflight` messages outstanding on
/// `out` (one new message per answer) until the window ends, matches answers read from
/// `answers` by id and records their latency. Dropping `out` at the end half-closes the
/// stream; the driver then reads the remaining answers until the peer ends its side.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn drive_stream<T: Send + 'static>(
    dir: Arc<Dir>,
    w: Window,
    inflight: usize,
    body: Bytes,
    out: mpsc::Sender<T>,
    wrap: fn(Msg) -> T,
    mut answers: tonic::Streaming<Msg>,
    running: Running,
) {
    let _running = running;
    let window = Semaphore::new(inflight);
    let pending: Mutex<HashMap<u64, Instant>> = Mutex::new(HashMap::with_capacity(inflight * 2));
    let sender = async {
        let out = out;
        let mut id = 0u64;
        loop {
            let Ok(permit) = window.acquire().await else {
                break;
            };
            permit.forget();
            let now = Instant::now();
            if now >= w.end {
                break;
            }
            id += 1;
            lock(&pending).insert(id, now);
            let msg = Msg {
                id,
                body: body.clone(),
            };
            if out.send(wrap(msg)).await.is_err() {
                dir.fail("the stream closed");
                break;
            }
        }
    };
    let receiver = async {
        loop {
            match answers.message().await {
                Ok(Some(m)) => {
                    let t1 = Instant::now();
                    let sent = lock(&pending).remove(&m.id);
                    match sent {
                        Some(t0) => {
                            let r = if m.body.len() == body.len() {
                                Ok(())
                            } else {
                                Err("short echo".to_string())
                            };
                            dir.record(&w, t0, t1, r);
                        }
                        None => dir.fail(format!("answer to unknown id {}", m.id)),
                    }
                    window.add_permits(1);
                }
                Ok(None) => break,
                Err(status) => {
                    dir.fail(format!("stream failed: {status}"));
                    break;
                }
            }
        }
        // Stop the sender if the stream ended early.
        window.close();
    };
    tokio::join!(sender, receiver);
}

pub(crate) struct Tonic {
    pub(crate) addr: SocketAddr,
    pub(crate) plan: Arc<Mutex<Option<ReversePlan>>>,
}

pub(crate) fn start_tonic(servers: &Runtime) -> Tonic {
    let plan: Arc<Mutex<Option<ReversePlan>>> = Arc::default();
    let service = TwoWayService { plan: plan.clone() };
    let addr = servers.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind tonic server");
        let addr = listener.local_addr().expect("addr");
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        tokio::spawn(async move {
            if let Err(e) = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await
            {
                eprintln!("tonic server: {e}");
            }
        });
        addr
    });
    Tonic { addr, plan }
}

pub(crate) fn run_tonic(tonic: &Tonic, clients: &Runtime, args: &Args, body: &Bytes) -> (Row, Row) {
    let up = Dir::new("tonic client->server");
    let down = Dir::new("tonic server->client");
    let w = Window::starting_now(args.secs);
    *lock(&tonic.plan) = Some(ReversePlan {
        dir: down.clone(),
        window: w,
        inflight: args.inflight,
        body: body.clone(),
        running: Running::enter(&down),
    });
    let up_running = Running::enter(&up);
    let addr = tonic.addr;
    let inflight = args.inflight;
    let (up2, body2) = (up.clone(), body.clone());
    clients.block_on(async move {
        // One Channel from one Endpoint::connect: one HTTP/2 connection for both streams.
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .tcp_nodelay(true)
            .connect()
            .await
            .expect("connect tonic");
        let codec = tonic_prost::ProstCodec::<Msg, Msg>::default;
        // client -> server: our requests on the request stream, echoes come back.
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        grpc.ready().await.expect("tonic ready");
        let (req_tx, req_rx) = mpsc::channel::<Msg>(inflight * 2);
        let echoes = grpc
            .streaming(
                tonic::Request::new(ReceiverStream::new(req_rx)),
                http::uri::PathAndQuery::from_static("/bench.TwoWay/Forward"),
                codec(),
            )
            .await
            .expect("open Forward stream")
            .into_inner();
        tokio::spawn(drive_stream(
            up2,
            w,
            inflight,
            body2,
            req_tx,
            std::convert::identity,
            echoes,
            up_running,
        ));
        // server -> client: the server's requests arrive on the response stream, our
        // answers go back on the request stream.
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.expect("tonic ready");
        let (ans_tx, ans_rx) = mpsc::channel::<Msg>(inflight * 2);
        let mut requests = grpc
            .streaming(
                tonic::Request::new(ReceiverStream::new(ans_rx)),
                http::uri::PathAndQuery::from_static("/bench.TwoWay/Reverse"),
                codec(),
            )
            .await
            .expect("open Reverse stream")
            .into_inner();
        tokio::spawn(async move {
            loop {
                match requests.message().await {
                    Ok(Some(m)) => {
                        if ans_tx.send(m).await.is_err() {
                            eprintln!("tonic client: answer stream closed");
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(status) => {
                        eprintln!("tonic client: Reverse stream failed: {status}");
                        break;
                    }
                }
            }
        });
    });
    let dirs = [up.clone(), down.clone()];
    watch(&dirs);
    wait_finished(&dirs);
    unwatch();
    (
        Row::closed("tonic", "client->server", args.inflight, &up, args.secs),
        Row::closed("tonic", "server->client", args.inflight, &down, args.secs),
    )
}
