//! The tonic peer: two bidirectional streaming RPCs on one HTTP/2 connection, the
//! service written by hand (no protoc needed).

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

/// The `bench.TwoWay` service's paths: one bidi streaming method each.
const FORWARD: &str = "/bench.TwoWay/Forward";
const REVERSE: &str = "/bench.TwoWay/Reverse";

/// The service, written by hand (as in echo_bench), with two bidi streaming methods.
#[derive(Clone)]
pub(crate) struct TwoWayService {
    pub(crate) plan: Arc<Mutex<Option<ReversePlan>>>,
}

impl GrpcMethods for TwoWayService {
    const NAME: &'static str = "bench.TwoWay";

    fn serve(&mut self, req: HttpRequest) -> Option<Reply> {
        match req.uri().path() {
            FORWARD => Some(streaming(ForwardSvc, req)),
            REVERSE => Some(streaming(ReverseSvc(lock(&self.plan).take()), req)),
            _ => None,
        }
    }
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
    let addr = servers.block_on(serve_on_loopback(service));
    Tonic { addr, plan }
}

/// Opens the bidi stream at `path` on `channel`: the sender of our side's messages (room
/// for `inflight * 2`), and the peer's side.
async fn open_stream(
    channel: &tonic::transport::Channel,
    path: &'static str,
    inflight: usize,
) -> (mpsc::Sender<Msg>, tonic::Streaming<Msg>) {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.expect("tonic ready");
    let (tx, rx) = mpsc::channel::<Msg>(inflight * 2);
    let answers = grpc
        .streaming(
            tonic::Request::new(ReceiverStream::new(rx)),
            http::uri::PathAndQuery::from_static(path),
            tonic_prost::ProstCodec::<Msg, Msg>::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("open {path} stream: {e:?}"))
        .into_inner();
    (tx, answers)
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
        // client -> server: our requests on the request stream, echoes come back.
        let (req_tx, echoes) = open_stream(&channel, FORWARD, inflight).await;
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
        let (ans_tx, mut requests) = open_stream(&channel, REVERSE, inflight).await;
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
    watch_until_finished(&up, &down);
    (
        Row::closed("tonic", "client->server", args.inflight, &up, args.secs),
        Row::closed("tonic", "server->client", args.inflight, &down, args.secs),
    )
}
