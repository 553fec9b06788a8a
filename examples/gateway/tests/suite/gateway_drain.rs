//! Graceful drain and stickiness: clients under load move to another gateway with
//! their sessions, the deadline closes stragglers, a draining gateway leaves the
//! registry and refuses connections, the WebSocket upgrade names the gateway in a
//! cookie, and the `gateway` program drains and exits 0 on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::gateway_world::*;
use meshline::RegistryService;
use meshline_example_gateway::roaming::{Gateways, RoamOptions, RoamingClient, TokenSource};
use meshline_testkit::net::{FaultProxy, Faults};

/// Sessions in the Redis at `url`.
fn use_redis(s: &mut GatewaySettings, url: &str) {
    s.session_store = SessionStoreKind::Redis;
    s.redis_url = url.to_string();
    s.resume_window = Duration::from_secs(30);
    s.redis_timeout = Duration::from_millis(500);
}

async fn registered(w: &World) -> Vec<std::net::SocketAddr> {
    w.registry
        .lookup("gateway")
        .await
        .unwrap()
        .iter()
        .filter_map(|i| i.socket_addr())
        .collect()
}

/// Waits (bounded) until `ok`, an async check.
async fn until_async(what: &str, limit: Duration, mut ok: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !ok().await {
        assert!(tokio::time::Instant::now() < deadline, "never {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the drain-under-load test guarantees, per client: every request it made got
/// exactly one reply, its own (the backend echoes the unique payload), none failed, and
/// the backends saw each request exactly once (counts below).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_under_load_ends_with_every_client_resumed_elsewhere() {
    const CLIENTS: usize = 20;
    let redis = Redis::start().unwrap();
    let url = redis.url();
    let w = world(2, |s| {
        use_redis(s, &url);
        s.drain.deadline = Duration::from_secs(15);
    })
    .await;
    let b = w.another_gateway("gw-b", |s| use_redis(s, &url)).await;
    let a_addr = w.gateway.local_addr();
    let gateways = Gateways::registry(w.registry.clone(), "gateway");
    let stop = tokio_util::sync::CancellationToken::new();
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let account = format!("p{i}");
        let minter = TokenMinter::new(SECRET);
        let tokens: TokenSource = Arc::new(move || minter.mint(&account, Duration::from_secs(60)));
        let c = RoamingClient::connect(a_addr, gateways.clone(), tokens, RoamOptions::default())
            .await
            .unwrap();
        assert_eq!(c.current().welcome.gateway, "gw-a");
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let first = c.current().welcome.clone();
            let (mut sent, mut ok) = (0u64, 0u64);
            while !stop.is_cancelled() {
                sent += 1;
                let body = format!("{i}:{sent}");
                // LOBBY op 2 echoes the body: a reply is this request's and no other's.
                match c.request(modules::LOBBY, 2, body.clone()).await {
                    Ok(r) => {
                        assert_eq!(&r[..], body.as_bytes(), "client {i}: a reply not its own");
                        ok += 1;
                    }
                    Err(e) => panic!("client {i}: request {sent} failed: {e}"),
                }
            }
            (first, c, sent, ok)
        }));
    }
    // Load on A (every client has been answered there), then drain it.
    until("load on A", Duration::from_secs(5), || {
        w.gateway.stats().forwarded.load(Ordering::Relaxed) >= 2 * CLIENTS as u64
    })
    .await;
    let report = w.gateway.drain().await;
    assert!(report.in_time, "{report:?}");
    assert_eq!(report.advised, CLIENTS, "{report:?}");
    assert_eq!(report.closed, 0, "{report:?}");
    assert!(report.flushed, "{report:?}");
    // Traffic goes on through B.
    let on_b = b.stats().forwarded.load(Ordering::Relaxed);
    until("traffic through B", Duration::from_secs(5), || {
        b.stats().forwarded.load(Ordering::Relaxed) > on_b + CLIENTS as u64
    })
    .await;
    stop.cancel();
    let mut total = 0;
    for t in tasks {
        let (first, c, sent, ok) = t.await.unwrap();
        let now = c.current();
        assert_eq!(now.welcome.gateway, "gw-b", "{first:?}");
        assert_eq!(
            now.welcome.session, first.session,
            "same session after the move"
        );
        assert_eq!(c.moves(), 1);
        assert_eq!(sent, ok);
        total += sent;
    }
    // Each request reached a backend once, through exactly one gateway, once.
    let forwarded = w.gateway.stats().forwarded.load(Ordering::Relaxed)
        + b.stats().forwarded.load(Ordering::Relaxed);
    assert_eq!(forwarded, total);
    let at_backends: u64 = w.backends.iter().map(|b| b.requests()).sum();
    assert_eq!(at_backends, total);
    b.shutdown().await;
    w.gateway.shutdown().await;
}

/// The advice waits for the store: with A's Redis cut (a proxy that passes nothing), a
/// client that has just logged in on A is not told to move before A has written its
/// session, so once the cut ends B resumes that same session (a client advised at once
/// finds it unknown on B and gets a new one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_advice_waits_until_the_session_is_in_the_store() {
    let redis = Redis::start().unwrap();
    let proxy = FaultProxy::start(redis.addr().parse().unwrap()).unwrap();
    let via_proxy = format!("redis://{}/", proxy.addr());
    let w = world(1, |s| {
        use_redis(s, &via_proxy);
        s.drain.deadline = Duration::from_secs(15);
    })
    .await;
    let b = w
        .another_gateway("gw-b", |s| use_redis(s, &redis.url()))
        .await;
    let a_addr = w.gateway.local_addr();
    proxy.set(Faults {
        blackhole: true,
        ..Faults::default()
    });
    let minter = TokenMinter::new(SECRET);
    let tokens: TokenSource = Arc::new(move || minter.mint("p0", Duration::from_secs(60)));
    let gateways = Gateways::registry(w.registry.clone(), "gateway");
    let c = RoamingClient::connect(a_addr, gateways, tokens, RoamOptions::default())
        .await
        .unwrap();
    let first = c.current().welcome.clone();
    assert_eq!(first.gateway, "gw-a");
    let failures = w.gateway.session_store_failures();
    let script = async {
        until_async("A left the registry", Duration::from_secs(5), async || {
            !registered(&w).await.contains(&a_addr)
        })
        .await;
        until("a failed write on A", Duration::from_secs(5), || {
            w.gateway.session_store_failures() > failures
        })
        .await;
        assert_eq!(
            (c.moves(), c.current().welcome.gateway.as_str()),
            (0, "gw-a"),
            "advised before its session was in the store"
        );
        proxy.set(Faults::default());
        until("the client moved", Duration::from_secs(10), || {
            c.moves() == 1
        })
        .await;
    };
    let (report, ()) = tokio::join!(w.gateway.drain(), script);
    assert!(report.in_time && report.flushed, "{report:?}");
    assert_eq!(report.advised, 1, "{report:?}");
    let now = c.current().welcome.clone();
    assert_eq!(now.gateway, "gw-b");
    assert_eq!(now.session, first.session, "B did not find the session");
    let r = c
        .request(modules::LOBBY, 2, "after the move")
        .await
        .unwrap();
    assert_eq!(&r[..], b"after the move");
    b.shutdown().await;
    w.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_closes_a_client_that_ignores_the_advice() {
    let deadline = Duration::from_millis(800);
    let w = world(1, |s| s.drain.deadline = deadline).await;
    let stubborn = w.player("stubborn").await;
    stubborn
        .request(modules::LOBBY, 1, Bytes::new())
        .await
        .unwrap();
    let t0 = std::time::Instant::now();
    let report = w.gateway.drain().await;
    let took = t0.elapsed();
    assert_eq!(
        stubborn.reconnect_advice().as_deref(),
        Some("gateway draining")
    );
    assert!(!report.in_time && report.closed == 1, "{report:?}");
    // The deadline, then the KICK written and the connection gone (the client reads:
    // milliseconds), polled every 25 ms: well under 400 ms past the deadline.
    assert!(
        took >= deadline && took < deadline + Duration::from_millis(400),
        "the drain took {took:?} for an {deadline:?} deadline"
    );
    // Told why, then closed.
    let kick = stubborn
        .next_push(Duration::from_secs(2))
        .await
        .expect("a KICK");
    assert_eq!(kick_code(&kick), 5, "DRAIN: {kick:?}");
    assert!(String::from_utf8_lossy(&kick.payload).contains("drain deadline passed"));
    until_async("closed", Duration::from_secs(2), async || {
        stubborn.is_closed()
    })
    .await;

    // With a threshold of 1, one stubborn client does not hold the drain up.
    let w = world(1, |s| {
        s.drain.deadline = Duration::from_secs(20);
        s.drain.threshold = 1;
    })
    .await;
    let p = w.player("one").await;
    let report = w.gateway.drain().await;
    assert!(report.in_time && report.remaining == 1, "{report:?}");
    assert!(report.elapsed < Duration::from_secs(5), "{report:?}");
    // Advised all the same (the frame is on its way when the drain returns).
    let advice = tokio::time::timeout(Duration::from_secs(2), p.advised()).await;
    assert_eq!(advice.unwrap().as_deref(), Some("gateway draining"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_gateway_leaves_the_registry_and_refuses_connections() {
    let w = world(1, |s| {
        s.drain.deadline = Duration::from_secs(3);
        s.ws_listen = Some("127.0.0.1:0".parse().unwrap());
        s.admin_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let (tcp, ws) = (w.gateway.local_addr(), w.gateway.ws_addr().unwrap());
    assert!(registered(&w).await.contains(&tcp));
    // A client that stays keeps the drain running while we look.
    let holdout = w.player("holdout").await;
    // The admin port asks for the drain; the owner runs it.
    let mut admin = TcpStream::connect(w.gateway.admin_addr().unwrap())
        .await
        .unwrap();
    admin
        .write_all(b"POST /drain HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    admin.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    tokio::time::timeout(Duration::from_secs(1), w.gateway.drain_requested())
        .await
        .expect("POST /drain did not ask for a drain");
    assert!(!w.gateway.is_draining(), "asking is not draining");
    let drain = async { w.gateway.drain().await };
    let check = async {
        until_async("draining", Duration::from_secs(2), async || {
            w.gateway.is_draining()
        })
        .await;
        assert!(!registered(&w).await.contains(&tcp), "still registered");
        until_async("refusing connections", Duration::from_secs(2), async || {
            TcpStream::connect(tcp).await.is_err() && TcpStream::connect(ws).await.is_err()
        })
        .await;
        let e = GatewayClient::auth(tcp, &w.minter.mint("late", Duration::from_secs(60)))
            .await
            .unwrap_err();
        assert!(matches!(e, ClientError::Io(_)), "{e:?}");
        // The holdout is still served while the drain waits for it.
        holdout
            .request(modules::LOBBY, 1, Bytes::new())
            .await
            .unwrap();
        assert!(holdout.reconnect_advice().is_some());
    };
    let (report, ()) = tokio::join!(drain, check);
    assert_eq!(report.closed, 1, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_websocket_upgrade_sets_the_gateway_cookie() {
    let w = world(1, |s| s.ws_listen = Some("127.0.0.1:0".parse().unwrap())).await;
    let ws = w.gateway.ws_addr().unwrap();
    let mut s = TcpStream::connect(ws).await.unwrap();
    s.write_all(
        format!(
            "GET / HTTP/1.1\r\nHost: {ws}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 4096 {
        tokio::time::timeout(Duration::from_secs(3), s.read_exact(&mut byte))
            .await
            .expect("upgrade response in time")
            .unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let cookie = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("set-cookie")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no Set-Cookie in {head}"));
    assert_eq!(cookie, "MESHLINE_GW=gw-a; Path=/; HttpOnly; SameSite=Lax");
    // The auth reply names the gateway too.
    let p = GatewayClient::auth_ws(
        &format!("ws://{ws}/"),
        &w.minter.mint("browser", Duration::from_secs(60)),
    )
    .await
    .unwrap();
    assert_eq!(p.gateway_id(), "gw-a");
}

#[test]
fn the_gateway_program_drains_and_exits_0_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.properties");
    std::fs::write(
        &config,
        format!(
            "registry.type=file\ngateway.id=gw-p\ngateway.listen=127.0.0.1:0\n\
             gateway.secret={SECRET}\ngateway.register-cluster=\ngateway.drain.deadline=20s\n"
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_gateway"))
        .arg("--config")
        .arg(&config)
        .env("MESHLINE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr: std::net::SocketAddr = line
        .trim()
        .strip_prefix("gateway gw-p listening on ")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("banner `{line}`"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pid = child.id().to_string();
    let left_at = rt.block_on(async {
        let p = GatewayClient::auth(
            addr,
            &TokenMinter::new(SECRET).mint("x", Duration::from_secs(60)),
        )
        .await
        .unwrap();
        let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(status.success());
        // The client is advised, then leaves on its own: the drain ends before its
        // 20 s deadline.
        let advice = tokio::time::timeout(Duration::from_secs(5), p.advised())
            .await
            .expect("advice after SIGTERM");
        assert_eq!(advice.as_deref(), Some("gateway draining"));
        drop(p);
        std::time::Instant::now()
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the gateway did not exit within 10 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    assert!(left_at.elapsed() < Duration::from_secs(10));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(
        rest.contains("gateway gw-p drained: 1 advised, 0 closed at the deadline"),
        "{rest}"
    );
}
