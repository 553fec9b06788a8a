//! The meshline side: an `RpcClient` and a `Server` on one connection, calls one way
//! and pushes the other.

use super::*;

pub(crate) struct Mesh {
    pub(crate) client: RpcClient,
    /// The server's end of the one connection.
    pub(crate) conn: Connection,
    pub(crate) _server: Server,
    pub(crate) _hub: Arc<WatchHub>,
}

pub(crate) fn start_meshline(servers: &Runtime, clients: &Runtime) -> Mesh {
    let server = servers.block_on(async {
        Server::bind(
            "127.0.0.1:0".parse().expect("addr"),
            |req: InboundRequest| std::future::ready(Some(req.payload)),
        )
        .await
        .expect("bind meshline server")
    });
    let addr = server.local_addr();
    let hub = Arc::new(WatchHub::new("twoway", EmptyProtection::Protect));
    hub.publish(
        "echo",
        vec![Instance::new("127.0.0.1", addr.port()).expect("instance")],
    );
    let client = clients.block_on(async {
        let client = RpcClient::builder()
            .watch(hub.subscribe("echo"), "echo")
            .load_balance_name("RoundRobinLoadBalance")
            // The client answers the server's requests with an echo.
            .inbound(|req: InboundRequest| std::future::ready(Some(req.payload)))
            .build()
            .await
            .expect("meshline client");
        client
            .wait_alive(1, Duration::from_secs(5))
            .await
            .expect("meshline client connected");
        client
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    let conn = loop {
        if let Some(c) = server.connections().into_iter().next() {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "the meshline server saw no connection within 5 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    Mesh {
        client,
        conn,
        _server: server,
        _hub: hub,
    }
}

impl Mesh {
    /// client -> server: echo calls of `body` through the `RpcClient`.
    fn calls(&self, body: &Bytes) -> EchoCall {
        EchoCall {
            way: Way::Call(self.client.clone()),
            body: body.clone(),
        }
    }

    /// server -> client: echo pushes of `body` on the server's `Connection`.
    fn pushes(&self, body: &Bytes) -> EchoCall {
        EchoCall {
            way: Way::Push(self.conn.clone()),
            body: body.clone(),
        }
    }
}

/// One echo call of `body`, one way or the other.
#[derive(Clone)]
pub(crate) struct EchoCall {
    pub(crate) way: Way,
    pub(crate) body: Bytes,
}

/// Which way an [`EchoCall`] goes.
#[derive(Clone)]
pub(crate) enum Way {
    /// client -> server: a call through the `RpcClient`.
    Call(RpcClient),
    /// server -> client: a push on the server's `Connection`.
    Push(Connection),
}

impl Op for EchoCall {
    async fn call(&self) -> Result<(), String> {
        let payload = Payload::new(self.body.clone());
        let echo = match &self.way {
            Way::Call(client) => client
                .call(payload, CallOptions::new())
                .await
                .map(|r| r.payload),
            Way::Push(conn) => conn.call(payload, PUSH_TIMEOUT).await,
        };
        if echo.map_err(|e| e.to_string())?.body.len() != self.body.len() {
            return Err("short echo".into());
        }
        Ok(())
    }
}

pub(crate) fn run_meshline_closed(
    mesh: &Mesh,
    servers: &Runtime,
    clients: &Runtime,
    args: &Args,
    body: &Bytes,
) -> (Row, Row) {
    let up = Dir::new("meshline client->server");
    let down = Dir::new("meshline server->client");
    let w = Window::starting_now(args.secs);
    spawn_closed(clients.handle(), &up, args.inflight, w, mesh.calls(body));
    spawn_closed(servers.handle(), &down, args.inflight, w, mesh.pushes(body));
    watch_until_finished(&up, &down);
    (
        Row::closed("meshline", "client->server", args.inflight, &up, args.secs),
        Row::closed(
            "meshline",
            "server->client",
            args.inflight,
            &down,
            args.secs,
        ),
    )
}

pub(crate) fn run_meshline_open(
    mesh: &Mesh,
    servers: &Runtime,
    clients: &Runtime,
    args: &Args,
    body: &Bytes,
    rates: (f64, f64),
) -> (Row, Row) {
    let up = Dir::new("meshline client->server (half of peak)");
    let down = Dir::new("meshline server->client (half of peak)");
    let secs = args.secs.max(2.0);
    let start = Instant::now() + Duration::from_millis(50);
    spawn_open(
        clients.handle(),
        &up,
        args.inflight,
        rates.0,
        secs,
        start,
        mesh.calls(body),
    );
    spawn_open(
        servers.handle(),
        &down,
        args.inflight,
        rates.1,
        secs,
        start,
        mesh.pushes(body),
    );
    watch_until_finished(&up, &down);
    let elapsed = start.elapsed().as_secs_f64();
    (
        Row::open("client->server", rates.0, &up, elapsed),
        Row::open("server->client", rates.1, &down, elapsed),
    )
}
