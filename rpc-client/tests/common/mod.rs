//! Shared helpers for the integration tests: in-process servers and a client over a
//! `WatchHub` (the in-memory registry every backend publishes into).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use meshline_registry_core::{EmptyProtection, Instance, WatchHub};
use meshline_rpc_client::message::register_reply;
use meshline_rpc_client::{
    InboundRequest, Payload, RegisterTmRequest, RpcClient, RpcClientBuilder, SeataRegistration,
    Server, ServerConfig,
};

/// How a test server behaves.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// Answer registration with identified=1 and echo everything else.
    Echo,
    /// Refuse registration (identified=0).
    Refuse,
    /// Never answer requests (registration is still accepted).
    Silent,
}

pub struct TestServer {
    pub server: Server,
    pub id: String,
    pub requests: Arc<AtomicUsize>,
}

impl TestServer {
    pub fn addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    pub fn instance(&self) -> Instance {
        Instance::new("127.0.0.1", self.addr().port()).unwrap()
    }
}

pub async fn start(id: &str, mode: Mode) -> TestServer {
    start_on("127.0.0.1:0".parse().unwrap(), id, mode).await
}

pub async fn start_on(addr: SocketAddr, id: &str, mode: Mode) -> TestServer {
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    let tag = id.to_string();
    let handler = move |req: InboundRequest| {
        let counter = counter.clone();
        let tag = tag.clone();
        async move {
            if let Ok(msg) = req.payload.decode_seata()
                && let Some(reply) = register_reply(&msg, !matches!(mode, Mode::Refuse), "test")
            {
                return Some(Payload::seata(&reply).unwrap());
            }
            counter.fetch_add(1, Ordering::SeqCst);
            if let Some(ms) = req
                .payload
                .head
                .get("delay_ms")
                .and_then(|v| v.parse().ok())
            {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            match mode {
                Mode::Silent => std::future::pending().await,
                _ => Some(req.payload.with_head("server", tag)),
            }
        }
    };
    let server = Server::bind_with(addr, ServerConfig::default(), handler)
        .await
        .expect("bind test server");
    TestServer {
        server,
        id: id.to_string(),
        requests,
    }
}

pub fn hub() -> Arc<WatchHub> {
    Arc::new(WatchHub::new("test", EmptyProtection::Apply))
}

pub fn publish(hub: &WatchHub, servers: &[&TestServer]) {
    hub.publish("c", servers.iter().map(|s| s.instance()).collect());
}

/// A client over the hub's cluster `c`, with quick reconnects.
pub fn builder(hub: &WatchHub, lb: &str) -> RpcClientBuilder {
    RpcClient::builder()
        .watch(hub.subscribe("c"), "c")
        .load_balance_name(lb)
        .configure(|o| {
            o.backoff_initial = Duration::from_millis(50);
            o.backoff_max = Duration::from_millis(400);
            o.connect_timeout = Duration::from_millis(500);
            o.request_timeout = Duration::from_secs(5);
        })
}

pub fn seata_tm() -> SeataRegistration {
    SeataRegistration::tm(RegisterTmRequest {
        version: "2.3.0".into(),
        application_id: "test-app".into(),
        transaction_service_group: "default_tx_group".into(),
        extra_data: None,
    })
    .with_timeout(Duration::from_secs(2))
}

#[allow(unused_imports)] // each test binary uses its own subset
pub use meshline_testkit::until;

pub fn alive_ports(client: &RpcClient) -> Vec<u16> {
    let mut v: Vec<u16> = client
        .alive()
        .endpoints()
        .iter()
        .map(|e| e.instance.port())
        .collect();
    v.sort_unstable();
    v
}

/// Answers the first PING a new connection sends (a client puts an endpoint without a
/// handshake in its alive set only once it has answered something), then hands the
/// socket back for the test's peer to misbehave on; `None` when the connection ended
/// before its PING was answered (the client gave up on it: nothing left to misbehave
/// on). Bytes that came after the PING are dropped.
pub async fn answer_first_ping(sock: tokio::net::TcpStream) -> Option<tokio::net::TcpStream> {
    use futures_util::{SinkExt, StreamExt};
    use meshline_rpc_client::{Frame, FrameCodec, MessageType};
    let mut framed = tokio_util::codec::Framed::new(sock, FrameCodec::default());
    loop {
        let f = framed.next().await?.ok()?;
        if f.msg_type == MessageType::HeartbeatRequest {
            framed.send(Frame::pong_for(&f)).await.ok()?;
            return Some(framed.into_inner());
        }
    }
}

/// A listener that answers each connection's first PING, then never reads again (but
/// keeps the sockets open): a peer whose writes stall.
pub async fn deaf_listener() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let keep = Arc::new(std::sync::Mutex::new(Vec::new()));
        while let Ok((sock, _)) = listener.accept().await {
            let keep = keep.clone();
            tokio::spawn(async move {
                if let Some(sock) = answer_first_ping(sock).await {
                    keep.lock().unwrap().push(sock);
                }
            });
        }
    });
    (addr, task)
}
