//! Shared helpers for the integration tests: in-process servers and a client over a
//! `WatchHub` (the in-memory registry every backend publishes into).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use meshline_registry_core::Config;
use meshline_registry_core::config::Format;
use meshline_registry_core::{EmptyProtection, Instance, WatchHub};
use meshline_rpc_client::message::register_reply;
use meshline_rpc_client::{
    CallOptions, ClientOptions, EndpointState, EndpointStatus, InboundRequest, Payload,
    RegisterTmRequest, Response, RpcClient, RpcClientBuilder, RpcError, SeataRegistration, Server,
    ServerConfig,
};
use tokio::io::AsyncReadExt;
use tokio::task::JoinHandle;

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
        instance(self.addr())
    }
}

/// The registry's entry for a peer listening on `addr` (a loopback address).
pub fn instance(addr: SocketAddr) -> Instance {
    Instance::new("127.0.0.1", addr.port()).unwrap()
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
            meshline_testkit::delay_as_asked(req.payload.head.get("delay_ms")).await;
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

/// A hub whose cluster `c` lists `servers`.
pub fn hub_of(servers: &[&TestServer]) -> Arc<WatchHub> {
    hub_with(servers.iter().map(|s| s.instance()).collect())
}

/// A hub whose cluster `c` lists `instances` (peers that are not [`TestServer`]s too).
pub fn hub_with(instances: Vec<Instance>) -> Arc<WatchHub> {
    let hub = hub();
    hub.publish("c", instances);
    hub
}

/// Echo servers named `ids`, started one after the other.
pub async fn echo_servers<const N: usize>(ids: [&str; N]) -> [TestServer; N] {
    let mut servers = Vec::with_capacity(N);
    for id in ids {
        servers.push(start(id, Mode::Echo).await);
    }
    match servers.try_into() {
        Ok(servers) => servers,
        Err(_) => unreachable!("one server per id"),
    }
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

/// Builds `builder`'s client and waits up to `limit` for `alive` of its endpoints to be
/// alive: where most tests start from.
pub async fn build_alive(builder: RpcClientBuilder, alive: usize, limit: Duration) -> RpcClient {
    let client = builder.build().await.unwrap();
    client.wait_alive(alive, limit).await.unwrap();
    client
}

/// Reconnects wait 30 s, longer than any test: an endpoint that went down stays down
/// (for `RpcClientBuilder::configure`).
pub fn no_reconnect(o: &mut ClientOptions) {
    o.backoff_initial = Duration::from_secs(30);
    o.backoff_max = Duration::from_secs(30);
}

/// A configuration read from `text`, a properties file's.
pub fn properties(text: &str) -> Config {
    Config::from_text(text, Format::Properties).expect("valid properties")
}

/// Client options from the `transport.*` keys in `keys` (properties text), every one of
/// them known (a misspelt key would leave the test running on a default).
pub fn options_from(keys: &str) -> ClientOptions {
    let config = properties(keys);
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    ClientOptions::from_config(&config).unwrap()
}

/// Each `(text, key)`: client options from the properties `text` are refused with an
/// error that names `key`.
pub fn assert_each_refused_by_name(cases: &[(&str, &str)]) {
    for (text, key) in cases {
        let e = ClientOptions::from_config(&properties(text))
            .unwrap_err()
            .to_string();
        assert!(e.contains(key), "{text}: {e}");
    }
}

/// A small call with its own deadline, `timeout`.
pub async fn call_within(client: &RpcClient, timeout: Duration) -> Result<Response, RpcError> {
    let opts = CallOptions::new().with_timeout(timeout);
    client.call(Payload::new(&b"x"[..]), opts).await
}

/// A call the test servers hold for `delay_ms` before they answer, made in a task of its
/// own: a call in flight while the test acts.
pub fn spawn_held_call(
    client: &RpcClient,
    delay_ms: &'static str,
    opts: CallOptions<'static>,
) -> JoinHandle<Result<Response, RpcError>> {
    let client = client.clone();
    tokio::spawn(async move {
        client
            .call(
                Payload::new(&b"x"[..]).with_head("delay_ms", delay_ms),
                opts,
            )
            .await
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

/// What the client says of its endpoint on `port`.
pub fn endpoint_on(client: &RpcClient, port: u16) -> EndpointStatus {
    client
        .endpoints()
        .into_iter()
        .find(|e| e.instance.port() == port)
        .expect("followed")
}

/// The state of the client's endpoint on `port`.
pub fn state_of(client: &RpcClient, port: u16) -> EndpointState {
    endpoint_on(client, port).state
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

/// A peer that answers its first PING, then reads everything and never writes a byte
/// again: what a host behind a link cut after it joined looks like from the client (no
/// FIN, no RST, no answer).
pub async fn mute_peer() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Some(mut sock) = answer_first_ping(sock).await else {
                    return;
                };
                let mut buf = [0u8; 4096];
                while let Ok(n) = sock.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
            });
        }
    });
    addr
}
