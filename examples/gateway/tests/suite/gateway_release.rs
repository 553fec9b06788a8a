//! The gateway's protection end to end (`gateway::protect`): circuit breakers, bulkheads,
//! holding requests while a backend restarts (and replaying them in order), the hold's
//! bounds, and load shedding; in-process on loopback, with real TCP clients and game
//! backends found through an in-memory registry.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize};

use crate::gateway_world::*;
use futures_util::future::join_all;
use meshline::rpc::limits::BreakerState;
use meshline::rpc::{InboundRequest, Payload, Server};
use meshline::{Instance, RegistryService};
use meshline_example_gateway::gateway::protect::settings::{BreakerSettings, ModuleProtect};
use meshline_example_gateway::gateway::protocol::{self, ClientCodec};
use tokio::time::Instant;

/// Sends `load` (0..=100) from `backend` on every connection the gateway holds to it,
/// and waits until the gateway's `cluster` guard recorded it (the command is one-way).
async fn report_load(w: &World, backend: &GameBackend, load: u32) {
    for c in backend.gateway_connections() {
        c.send_oneway(command("load", load.to_string()))
            .await
            .unwrap();
    }
    let key = meshline::Instance::new("127.0.0.1", backend.local_addr().port())
        .unwrap()
        .key()
        .clone();
    let lobby = w.gateway.protection().cluster("lobby").unwrap();
    until("the load recorded", Duration::from_secs(3), || {
        lobby.reported_load(&key) == Some(load)
    })
    .await;
}

/// A backend restarted in place: same id and address, registered again.
async fn restart(w: &World, id: &str, addr: SocketAddr) -> GameBackend {
    start_backend(id, addr, &w.registry).await
}

fn module(s: &mut GatewaySettings, id: u16) -> &mut ModuleProtect {
    s.protect.modules.entry(id).or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_opens_on_timeouts_answers_busy_at_once_and_a_probe_closes_it() {
    let w = world(1, |s| {
        s.backend_timeout = Duration::from_millis(200);
        s.protect.breaker = BreakerSettings {
            window: Duration::from_secs(10),
            min_requests: 4,
            failure_ratio: 0.5,
            cool_down: Duration::from_millis(500),
            probes: 2,
        };
        // Opcode 2 is sheddable: half-open keeps its probes for opcode 1.
        module(s, modules::LOBBY).shed = vec![2];
    })
    .await;
    let p = w.player("t").await;
    let lobby = w.gateway.protection().cluster("lobby").unwrap();
    // Four requests that take 1 s against a 200 ms backend timeout.
    let slow = join_all((0..4).map(|_| p.request(modules::LOBBY, 3, &b"1000"[..]))).await;
    for r in slow {
        let text = error_text(r);
        assert!(
            text.starts_with("timeout: lobby did not answer in time"),
            "{text}"
        );
    }
    assert_eq!(lobby.breaker_state(), BreakerState::Open);
    // Open: answered at once, and the backend never sees them.
    let before = w.backends[0].requests();
    let t0 = Instant::now();
    for _ in 0..20 {
        let text = error_text(p.request(modules::LOBBY, 1, Bytes::new()).await);
        assert_eq!(text, "busy: lobby circuit open");
    }
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    assert_eq!(w.backends[0].requests(), before);
    // Another cluster is not affected.
    p.request(modules::BIND, 2, Bytes::new()).await.unwrap();
    // After the cool-down (500 ms): half-open. A probe that fails opens it again at once.
    let t0 = Instant::now();
    until("half-open", Duration::from_secs(2), || {
        lobby.breaker_state() == BreakerState::HalfOpen
    })
    .await;
    assert!(
        t0.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t0.elapsed()
    );
    let text = error_text(p.request(modules::LOBBY, 3, &b"1000"[..]).await);
    assert!(
        text.starts_with("timeout: lobby did not answer in time"),
        "{text}"
    );
    assert_eq!(lobby.breaker_state(), BreakerState::Open);
    let text = error_text(p.request(modules::LOBBY, 1, Bytes::new()).await);
    assert_eq!(text, "busy: lobby circuit open");
    // After another cool-down the backend answers in time: the sheddable opcode is
    // shed while half-open, and two successful probes close the breaker.
    until("half-open again", Duration::from_secs(2), || {
        lobby.breaker_state() == BreakerState::HalfOpen
    })
    .await;
    let text = error_text(p.request(modules::LOBBY, 2, &b"x"[..]).await);
    assert_eq!(text, "busy: shed");
    for _ in 0..2 {
        assert_eq!(
            ok_text(p.request(modules::LOBBY, 1, Bytes::new()).await),
            "t@be-0"
        );
    }
    assert_eq!(lobby.breaker_state(), BreakerState::Closed);
    assert_eq!(
        ok_text(p.request(modules::LOBBY, 2, &b"x"[..]).await),
        "x",
        "closed: nothing is shed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_down_past_hold_for_answers_busy_then_the_breaker_opens_and_a_probe_closes_it() {
    let mut w = world(1, |s| {
        s.protect.hold_for = Duration::from_millis(300);
        s.protect.hold_max = 3;
        s.protect.breaker = BreakerSettings {
            window: Duration::from_secs(10),
            min_requests: 8,
            failure_ratio: 0.5,
            cool_down: Duration::from_millis(500),
            probes: 1,
        };
    })
    .await;
    let p = w.player("h").await;
    assert_eq!(
        ok_text(p.request(modules::LOBBY, 1, Bytes::new()).await),
        "h@be-0"
    );
    let addr = w.backends[0].local_addr();
    w.backends.pop().unwrap().kill();
    w.until_alive_count("lobby", 0).await;
    let lobby = w.gateway.protection().cluster("lobby").unwrap();
    // Held for hold-for, then busy.
    let t0 = Instant::now();
    let text = error_text(p.request(modules::LOBBY, 1, Bytes::new()).await);
    assert_eq!(text, "busy: lobby unavailable");
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(290) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    // Five at once against hold-max 3: two are answered at once, three after hold-for
    // (held ones cannot answer before 300 ms).
    let timed = join_all((0..5).map(|_| async {
        let t0 = Instant::now();
        let r = p.request(modules::LOBBY, 1, Bytes::new()).await;
        (error_text(r), t0.elapsed())
    }))
    .await;
    let at_once = timed
        .iter()
        .filter(|(_, t)| *t < Duration::from_millis(290))
        .count();
    assert_eq!(at_once, 2, "{timed:?}");
    for (text, _) in &timed {
        assert_eq!(text, "busy: lobby unavailable");
    }
    assert_eq!(lobby.held(), 0);
    // 1 success and 6 failures so far (7 < min-requests 8); the 8th opens the breaker,
    // and from then on the answer is immediate.
    assert_eq!(lobby.breaker_state(), BreakerState::Closed);
    error_text(p.request(modules::LOBBY, 1, Bytes::new()).await);
    assert_eq!(lobby.breaker_state(), BreakerState::Open);
    assert_eq!(lobby.expired_total(), 7);
    let t0 = Instant::now();
    let text = error_text(p.request(modules::LOBBY, 1, Bytes::new()).await);
    assert_eq!(text, "busy: lobby circuit open");
    assert!(t0.elapsed() < Duration::from_millis(250));
    // The backend comes back: after the cool-down one probe closes the breaker.
    let back = restart(&w, "be-0", addr).await;
    wait_alive(&w.gateway, "lobby", 1, Duration::from_secs(5)).await;
    until("half-open", Duration::from_secs(2), || {
        lobby.breaker_state() == BreakerState::HalfOpen
    })
    .await;
    assert_eq!(
        ok_text(p.request(modules::LOBBY, 1, Bytes::new()).await),
        "h@be-0"
    );
    assert_eq!(lobby.breaker_state(), BreakerState::Closed);
    drop(back);
}

/// `n` slow lobby requests (`ms` each) in flight from `p` at once, then the time a
/// request to another module takes; and the slow ones' answers.
async fn storm_then_other_module(p: &GatewayClient, n: usize, ms: u64) -> (Duration, Vec<String>) {
    let body = Bytes::from(ms.to_string());
    let storm = join_all((0..n).map(|_| p.request(modules::LOBBY, 3, body.clone())));
    let other = async {
        // Sent after the storm's frames.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let t0 = Instant::now();
        p.request(modules::BIND, 2, Bytes::new()).await.unwrap();
        t0.elapsed()
    };
    let (answers, took) = tokio::join!(storm, other);
    let answers = answers
        .into_iter()
        .map(|r| match r {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(ClientError::Reply(text)) => text,
            Err(e) => panic!("{e}"),
        })
        .collect();
    (took, answers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_module_at_its_cap_does_not_delay_another_modules_requests() {
    // Without a cap: 40 slow lobby requests take all 32 of the client's in-flight
    // slots, and its next message (another module) waits behind them.
    let w = world(1, |_| {}).await;
    let p = w.player("storm").await;
    let (took, _) = storm_then_other_module(&p, 40, 800).await;
    assert!(took >= Duration::from_millis(500), "{took:?}");
    drop((p, w));
    // With the lobby capped at 4: four are served, the rest answered busy at once, and
    // the other module's request is not delayed.
    let w = world(1, |s| module(s, modules::LOBBY).max_in_flight = Some(4)).await;
    let p = w.player("storm").await;
    let q = w.player("bystander").await;
    let other_player = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let busy = error_text(q.request(modules::LOBBY, 1, Bytes::new()).await);
        let t0 = Instant::now();
        q.request(modules::BIND, 2, Bytes::new()).await.unwrap();
        (busy, t0.elapsed())
    };
    let ((took, answers), (busy, q_took)) =
        tokio::join!(storm_then_other_module(&p, 40, 800), other_player);
    assert!(took < Duration::from_millis(500), "{took:?}");
    assert!(q_took < Duration::from_millis(500), "{q_took:?}");
    assert_eq!(busy, "busy: lobby at capacity");
    let served = answers.iter().filter(|a| *a == "slept 800").count();
    let refused = answers
        .iter()
        .filter(|a| *a == "busy: lobby at capacity")
        .count();
    assert_eq!((served, refused), (4, 36), "{answers:?}");
    let lobby = w.gateway.protection().module(modules::LOBBY).unwrap();
    assert_eq!(lobby.in_flight(), 0);
}

/// One player sending lobby echo requests back to back until `stop`: every answer must
/// be its own request's text, in order. Returns how many it sent.
async fn echo_loop(p: GatewayClient, name: String, stop: Arc<AtomicBool>) -> u64 {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let text = format!("{name} {n}");
        match p.request(modules::LOBBY, 2, text.clone()).await {
            Ok(answer) => assert_eq!(String::from_utf8_lossy(&answer), text),
            Err(e) => panic!("{name}: request {n} failed: {e}"),
        }
        n += 1;
    }
    n
}

/// Runs 20 players in `echo_loop` while `release` happens, then 500 ms more.
async fn under_load<F: std::future::Future<Output = ()>>(w: &World, release: F) -> u64 {
    let stop = Arc::new(AtomicBool::new(false));
    let mut players = Vec::new();
    for i in 0..20 {
        let name = format!("p{i}");
        let p = w.player(&name).await;
        players.push(tokio::spawn(echo_loop(p, name, stop.clone())));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    release.await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for p in players {
        let sent = p.await.expect("a player saw a lost, busy or wrong reply");
        assert!(sent > 5, "every player kept going: {sent}");
        total += sent;
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_release_under_load_loses_no_stateless_request() {
    let mut w = world(1, |_| {}).await;
    let addr = w.backends[0].local_addr();
    let victim = w.backends.pop().unwrap();
    let lobby = w.gateway.protection().cluster("lobby").unwrap();
    // A crash mid-traffic (requests in flight on the dying connection are sent again),
    // and the same backend back 1.5 s later.
    let mut back = None;
    let slow = w.player("slow").await;
    let mut in_flight = None;
    let sent = under_load(&w, async {
        // Certainly in flight when the backend dies: written, never answered.
        let written =
            tokio::spawn(async move { slow.request(modules::LOBBY, 3, &b"300"[..]).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        in_flight = Some(written);
        victim.kill();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        back = Some(restart(&w, "be-0", addr).await);
        wait_alive(&w.gateway, "lobby", 1, Duration::from_secs(2)).await;
    })
    .await;
    let written = in_flight.unwrap().await.unwrap();
    assert_eq!(
        &written.unwrap()[..],
        b"slept 300",
        "sent again to the restarted backend"
    );
    assert!(lobby.resent_total() >= 1);
    assert!(lobby.replayed_total() > 0, "the outage held requests");
    assert_eq!(lobby.expired_total(), 0);
    assert_eq!(lobby.breaker_state(), BreakerState::Closed);
    println!(
        "crash and restart: {sent} requests, {} held and replayed",
        lobby.replayed_total()
    );
    // A release by the book: the old instance unregisters and drains, a new one (new
    // address) registers 1 s later.
    let old = back.take().unwrap();
    let replayed = lobby.replayed_total();
    let mut new = None;
    let sent = under_load(&w, async {
        old.stop(Duration::from_secs(1)).await;
        tokio::time::sleep(Duration::from_millis(1000)).await;
        new = Some(w.add_backend("be-1").await);
    })
    .await;
    assert!(
        lobby.replayed_total() > replayed,
        "the release held requests"
    );
    assert_eq!(lobby.expired_total(), 0);
    println!(
        "stop and replace: {sent} requests, {} held and replayed",
        lobby.replayed_total() - replayed
    );
    drop(new);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_requests_are_replayed_in_the_order_they_came() {
    use futures_util::StreamExt;
    use tokio_util::codec::FramedRead;
    // No backend at all yet.
    let w = world(0, |_| {}).await;
    let mut sock = TcpStream::connect(w.gateway.local_addr()).await.unwrap();
    sock.write_all(&w.auth_frame("ordered")).await.unwrap();
    let (rd, mut wr) = sock.into_split();
    let mut frames = FramedRead::new(rd, ClientCodec::new(4096));
    let welcome = frames.next().await.unwrap().unwrap();
    assert_eq!(welcome.opcode, op::AUTH_OK);
    // 30 requests in one write, without waiting for answers.
    let mut burst = Vec::new();
    for seq in 1..=30u32 {
        burst.extend_from_slice(
            &ClientFrame::new(modules::LOBBY, 2, seq, seq.to_string())
                .with_flags(protocol::RELIABLE)
                .to_bytes(),
        );
    }
    wr.write_all(&burst).await.unwrap();
    let lobby = w.gateway.protection().cluster("lobby").unwrap();
    let t0 = Instant::now();
    while lobby.held() < 30 {
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "held: {}",
            lobby.held()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // An echo backend that records the order requests reach it (its handler is ready at
    // once, so it runs on the connection's reader, in arrival order).
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let _server = lobby_backend(&w, move |req: InboundRequest| {
        s2.lock()
            .unwrap()
            .push(String::from_utf8_lossy(&req.payload.body).into_owned());
        std::future::ready(Some(Payload::new(req.payload.body.clone())))
    })
    .await;
    let mut answered = Vec::new();
    for _ in 0..30 {
        let f = tokio::time::timeout(Duration::from_secs(5), frames.next())
            .await
            .expect("every held request is answered")
            .unwrap()
            .unwrap();
        assert_eq!(f.flags & protocol::ERROR, 0, "{f:?}");
        assert_eq!(f.payload, f.seq.to_string(), "its own answer");
        answered.push(f.seq);
    }
    answered.sort_unstable();
    assert_eq!(answered, (1..=30).collect::<Vec<u32>>());
    let want: Vec<String> = (1..=30).map(|s: u32| s.to_string()).collect();
    assert_eq!(*seen.lock().unwrap(), want, "replayed in arrival order");
    assert_eq!(lobby.expired_total(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shedding_drops_the_sheddable_opcode_and_passes_the_other() {
    let w = world(2, |s| {
        s.protect.shed_load = 80;
        module(s, modules::LOBBY).shed = vec![2];
    })
    .await;
    let p = w.player("s").await;
    assert_eq!(ok_text(p.request(modules::LOBBY, 2, &b"e"[..]).await), "e");
    // One of two backends overloaded: the cluster is not.
    report_load(&w, &w.backends[0], 85).await;
    for _ in 0..4 {
        assert_eq!(ok_text(p.request(modules::LOBBY, 2, &b"e"[..]).await), "e");
    }
    // Both: opcode 2 is shed, opcode 1 still goes through.
    report_load(&w, &w.backends[1], 95).await;
    for _ in 0..4 {
        assert_eq!(
            error_text(p.request(modules::LOBBY, 2, &b"e"[..]).await),
            "busy: shed"
        );
        let who = ok_text(p.request(modules::LOBBY, 1, Bytes::new()).await);
        assert!(who.starts_with("s@be-"), "{who}");
    }
    // Other modules of the same backends are not shed (they shed nothing).
    p.request(modules::BIND, 2, Bytes::new()).await.unwrap();
    let lobby = w.gateway.protection().module(modules::LOBBY).unwrap();
    assert_eq!(lobby.shed_total(), 4);
    // The load falls on one: nothing is shed.
    report_load(&w, &w.backends[1], 40).await;
    assert_eq!(ok_text(p.request(modules::LOBBY, 2, &b"e"[..]).await), "e");
}

/// A lobby backend of the test's own (`handler` answers), registered under `lobby`.
async fn lobby_backend(w: &World, handler: impl meshline::rpc::InboundHandler) -> Server {
    let server = Server::builder(handler)
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = server.local_addr();
    let inst = Instance::new(&addr.ip().to_string(), addr.port()).unwrap();
    w.registry.register("lobby", &inst).await.unwrap();
    server
}

/// A request as a backend saw it: its trace id, and its re-send mark.
type Attempt = (String, Option<String>);

/// A lobby backend of the test's own, registered under `lobby`, that drops its
/// connection on each of the first `drops` requests it reads (written, never answered)
/// and echoes every one after; `seen` records each request's trace id and re-send mark.
async fn dropping_lobby(w: &World, drops: usize, seen: Arc<Mutex<Vec<Attempt>>>) -> Server {
    let dropped = Arc::new(AtomicUsize::new(0));
    lobby_backend(w, move |req: InboundRequest| {
        let head = &req.payload.head;
        seen.lock().unwrap().push((
            head.get(wire::TRACE).unwrap_or_default().to_string(),
            head.get(wire::RESENT).map(str::to_string),
        ));
        if dropped.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < drops {
            req.connection.close_with("dying mid-request");
            return std::future::ready(None);
        }
        std::future::ready(Some(Payload::new(req.payload.body.clone())))
    })
    .await
}

/// One lobby request, answered `hello` by a [`dropping_lobby`] after `drops` attempts
/// that died: every attempt the backend saw, and the lobby's `resent_total` after.
async fn sent_after_drops(drops: usize) -> (Vec<Attempt>, u64) {
    let w = world(0, |_| {}).await;
    let seen: Arc<Mutex<Vec<Attempt>>> = Arc::default();
    let _server = dropping_lobby(&w, drops, seen.clone()).await;
    wait_alive(&w.gateway, "lobby", 1, Duration::from_secs(5)).await;
    let p = w.player("resent").await;
    let answer = p.request(modules::LOBBY, 2, &b"hello"[..]).await.unwrap();
    assert_eq!(&answer[..], b"hello", "answered once, by the last attempt");
    let seen = seen.lock().unwrap().clone();
    let lobby = w.gateway.protection().cluster("lobby").unwrap();
    (seen, lobby.resent_total())
}

/// A stateless request written to a backend whose connection then dies is sent again
/// (at least once, on purpose): the re-send carries the first attempt's trace id and
/// `rs=1`, so a backend that must apply it once can tell it is the same request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_sent_again_keeps_its_trace_id_and_says_so() {
    let (seen, resent) = sent_after_drops(1).await;
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].1, None, "the first attempt is not marked: {seen:?}");
    assert_eq!(seen[1].1.as_deref(), Some("1"), "the re-send is: {seen:?}");
    assert_eq!(seen[0].0, seen[1].0, "one trace id for both: {seen:?}");
    assert_eq!(seen[0].0.len(), 16, "{seen:?}");
    assert_eq!(resent, 1);
}

/// `resent_total` counts requests, not attempts: a request whose re-send dies too, and
/// whose third attempt is answered, is one request sent again. (A re-send can also meet
/// the dying connection before the pool has noticed, not written: the same count.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_sent_again_twice_counts_once() {
    let (seen, resent) = sent_after_drops(2).await;
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(seen[0].1, None, "the first attempt is not marked: {seen:?}");
    assert!(
        seen[1..]
            .iter()
            .all(|(trace, mark)| *trace == seen[0].0 && mark.as_deref() == Some("1")),
        "both re-sends carry the first attempt's trace id and rs=1: {seen:?}"
    );
    assert_eq!(resent, 1, "one request, sent again (twice)");
}
