//! The gateway's rate limits and login queue, in-process on loopback: connection floods
//! from one address refused with code 10 while other addresses (127.x.y.z: all
//! loopback on Linux) get in, the allow-list's higher limit, per-account and per-opcode
//! message limits answered `rate limited` on a connection that stays, sustained abuse
//! cut; the login queue's positions, ETAs, FIFO order, leavers and overflow.

use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use crate::gateway_world::*;
use meshline_example_gateway::client::{Connector, QueueStatus};
use tokio::sync::watch;
use tokio::task::JoinHandle;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

impl World {
    /// Authenticates `account` from local address `from`.
    async fn login_from(&self, from: &str, account: &str) -> Result<GatewayClient, ClientError> {
        Connector::tcp(self.gateway.local_addr())
            .bind(ip(from))
            .auth(&self.token(account))
            .await
    }
}

/// The text of a refusal (after its code).
fn refusal_text(e: &ClientError) -> String {
    match e {
        ClientError::Refused(t) => t
            .split_once(' ')
            .map(|(_, t)| t.to_string())
            .unwrap_or_default(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// `n` logins from `from`, one after another: (admitted clients, refusal texts).
async fn logins(w: &World, from: &str, n: usize) -> (Vec<GatewayClient>, Vec<String>) {
    let mut ok = Vec::new();
    let mut refused = Vec::new();
    for i in 0..n {
        match w
            .login_from(from, &format!("p{}x{i}", from.replace('.', "")))
            .await
        {
            Ok(c) => ok.push(c),
            Err(e) => {
                let text = refusal_text(&e);
                assert_eq!(refusal(e), Refusal::RateLimited, "{text}");
                refused.push(text);
            }
        }
    }
    (ok, refused)
}

/// [`logins`] from `from` where a limit of one a second with a burst of `burst` holds:
/// the burst is admitted, plus what one a second refilled meanwhile, no more.
async fn logins_at_one_a_second(
    w: &World,
    from: &str,
    n: usize,
    burst: usize,
) -> (Vec<GatewayClient>, Vec<String>) {
    let t0 = Instant::now();
    let (ok, refused) = logins(w, from, n).await;
    let refill = t0.elapsed().as_secs() as usize + 1;
    assert!(
        ok.len() >= burst && ok.len() <= burst + refill,
        "{} admitted in {:?}",
        ok.len(),
        t0.elapsed()
    );
    (ok, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_from_one_ip_is_refused_while_another_ip_gets_in() {
    let w = world(1, |s| {
        s.limits.ip_connects = Rate::per_sec(1).burst(5);
    })
    .await;
    let (ok, refused) = logins_at_one_a_second(&w, "127.0.0.1", 15, 5).await;
    assert_eq!(ok.len() + refused.len(), 15);
    for text in &refused {
        assert_eq!(text, "rate limited: per-IP connection limit (1/s, burst 5)");
    }
    assert_eq!(
        w.gateway.limits().refused(LimitKind::Ip),
        refused.len() as u64
    );
    // Another address is not touched by that flood.
    let other = w.login_from("127.0.0.2", "bob").await.unwrap();
    assert_eq!(&who(&other).await[..], b"bob@be-0");
    // The admitted ones play on.
    who(&ok[0]).await;
    assert_eq!(w.gateway.limits().tracked_ips(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_listed_address_gets_the_higher_limit() {
    let w = world(1, |s| {
        s.limits.ip_connects = Rate::per_sec(1).burst(2);
        s.limits.allow = "127.0.0.3/32, 10.0.0.0/8".parse().unwrap();
        s.limits.allowed_ip_connects = Rate::per_sec(1).burst(12);
    })
    .await;
    // An internet café: 12 players behind one address all get in.
    let (cafe, refused) = logins(&w, "127.0.0.3", 12).await;
    assert_eq!((cafe.len(), refused.len()), (12, 0));
    // Its own limit still holds.
    let (_, refused) = logins(&w, "127.0.0.3", 3).await;
    assert!(!refused.is_empty());
    assert!(
        refused[0].contains("allow-listed IP connection limit"),
        "{}",
        refused[0]
    );
    // An address not on the list has the ordinary limit.
    let (_ok, refused) = logins_at_one_a_second(&w, "127.0.0.4", 6, 2).await;
    assert!(
        refused[0].contains("per-IP connection limit"),
        "{}",
        refused[0]
    );
    assert!(w.gateway.limits().refused(LimitKind::AllowedIp) >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_wide_limit_counts_every_address() {
    let w = world(1, |s| {
        s.limits.global_connects = Rate::per_sec(1).burst(3);
    })
    .await;
    let mut ok = Vec::new();
    for i in 5..8 {
        ok.push(
            w.login_from(&format!("127.0.0.{i}"), &format!("g{i}"))
                .await
                .unwrap(),
        );
    }
    let e = w.login_from("127.0.0.8", "g8").await.unwrap_err();
    assert_eq!(
        refusal_text(&e),
        "rate limited: gateway connection limit (1/s, burst 3)"
    );
    assert_eq!(refusal(e), Refusal::RateLimited);
    assert_eq!(w.gateway.limits().refused(LimitKind::Global), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_client_over_the_limit_is_refused_after_its_handshake() {
    let w = world(1, |s| {
        with_ws(s);
        s.limits.ip_connects = Rate::per_sec(1).burst(1);
    })
    .await;
    let url = w.ws_url();
    let first = Connector::ws(&url).auth(&w.token("ws1")).await.unwrap();
    let e = Connector::ws(&url).auth(&w.token("ws2")).await.unwrap_err();
    assert!(refusal_text(&e).contains("per-IP connection limit"));
    assert_eq!(refusal(e), Refusal::RateLimited);
    // From another address, over WebSocket too.
    Connector::ws(&url)
        .bind(ip("127.0.0.9"))
        .auth(&w.token("ws3"))
        .await
        .unwrap();
    who(&first).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_tcp_client_over_the_limit_reads_auth_fail_code_10() {
    let w = world(1, |s| s.limits.ip_connects = Rate::per_sec(1).burst(1)).await;
    let addr = w.gateway.local_addr();
    let _first = w.player("first").await;
    // Say nothing: the refusal comes anyway, then the close.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let f = ClientFrame::from_message(&buf, 4096).unwrap();
    assert_eq!((f.module, f.opcode), (GATEWAY_MODULE, op::AUTH_FAIL));
    assert!(
        String::from_utf8_lossy(&f.payload).starts_with("10 rate limited: per-IP"),
        "{f:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_account_message_limit_answers_rate_limited_and_the_connection_stays() {
    let w = world(1, account_limit(Rate::per_sec(5).burst(5), 0)).await;
    let alice = w.player("alice").await;
    let bob = w.player("bob").await;
    let mut ok = 0;
    let mut limited = Vec::new();
    for _ in 0..12 {
        match alice.request(modules::LOBBY, 1, Bytes::new()).await {
            Ok(_) => ok += 1,
            Err(ClientError::Reply(text)) => limited.push(text),
            Err(e) => panic!("{e}"),
        }
    }
    assert!((5..=6).contains(&ok), "{ok} answered");
    assert_eq!(
        limited[0],
        "rate limited: per-account message limit (5/s, burst 5)"
    );
    // Another account has its own bucket.
    who(&bob).await;
    assert_eq!(
        w.gateway.limits().refused(LimitKind::Account),
        limited.len() as u64
    );
    // The connection stayed: once the bucket refilled (two in 400 ms), alice is served
    // again.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(&who(&alice).await[..], b"alice@be-0");
    // Pings are the gateway's own and not counted: the last message in the bucket is
    // still there after twenty of them.
    for seq in 0..20 {
        alice
            .send(ClientFrame::new(
                GATEWAY_MODULE,
                op::PING,
                1000 + seq,
                Bytes::new(),
            ))
            .await
            .unwrap();
    }
    who(&alice).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opcode_limit_touches_only_its_opcode() {
    let w = world(1, |s| {
        s.limits
            .opcodes
            .insert("1.1".parse().unwrap(), Rate::per_sec(1).burst(2));
    })
    .await;
    let alice = w.player("alice").await;
    who(&alice).await;
    who(&alice).await;
    assert_eq!(
        error_text(alice.request(modules::LOBBY, 1, Bytes::new()).await),
        "rate limited: opcode 1.1 limit per account (1/s, burst 2)"
    );
    // Another opcode of the same module (lobby echoes it) is not limited.
    for _ in 0..5 {
        let echo = alice
            .request(modules::LOBBY, 2, Bytes::from_static(b"hi"))
            .await
            .unwrap();
        assert_eq!(&echo[..], b"hi");
    }
    assert_eq!(w.gateway.limits().refused(LimitKind::Opcode), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_keeps_going_over_its_limit_is_disconnected() {
    let w = world(1, account_limit(Rate::per_sec(1).burst(2), 5)).await;
    let mallory = w.player("mallory").await;
    let mut limited = 0;
    let mut closed = false;
    for _ in 0..20 {
        match mallory.request(modules::LOBBY, 1, Bytes::new()).await {
            Ok(_) => {}
            Err(ClientError::Reply(t)) if t.starts_with("rate limited") => limited += 1,
            Err(_) => {
                closed = true;
                break;
            }
        }
    }
    assert!(closed, "still connected after {limited} refusals");
    // Five refusals are tolerated; the sixth is answered, then the client is cut (a
    // seventh if the 10 s window refilled one meanwhile on a slow machine).
    assert!((6..=7).contains(&limited), "{limited} refusals");
    let kick = mallory
        .next_push(Duration::from_secs(1))
        .await
        .expect("a KICK");
    assert_eq!((kick.module, kick.opcode), (GATEWAY_MODULE, op::KICK));
    assert_eq!(&kick.payload[..], b"6 rate limited: sustained abuse");
    // Others are not affected.
    who(&w.player("alice").await).await;
}

// --- the login queue ------------------------------------------------------------------

/// A login in flight: its task, and every queue status it was shown.
struct Queued {
    task: JoinHandle<Result<GatewayClient, ClientError>>,
    /// The status at entry.
    first: QueueStatus,
    seen: Arc<Mutex<Vec<QueueStatus>>>,
    status: watch::Receiver<Option<QueueStatus>>,
}

impl Queued {
    /// Starts a login and waits until the gateway has queued it (its first QUEUE frame).
    async fn start(w: &World, account: &str) -> Queued {
        let connector = Connector::tcp(w.gateway.local_addr());
        let mut status = connector.queue_status();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut watcher = connector.queue_status();
        let s2 = seen.clone();
        tokio::spawn(async move {
            while watcher.changed().await.is_ok() {
                if let Some(q) = *watcher.borrow_and_update() {
                    s2.lock().unwrap().push(q);
                }
            }
        });
        let token = w.token(account);
        let task = tokio::spawn(async move { connector.auth(&token).await });
        let first = tokio::time::timeout(Duration::from_secs(5), status.wait_for(Option::is_some))
            .await
            .expect("queued within 5 s")
            .expect("the connector lives")
            .expect("a status");
        Queued {
            task,
            first,
            seen,
            status,
        }
    }

    /// Waits (up to 3 s) until the gateway told this login it is at `position`; panics
    /// saying `what` was expected.
    async fn until_position(&mut self, position: u64, what: &str) {
        tokio::time::timeout(
            Duration::from_secs(3),
            self.status
                .wait_for(|s| s.is_some_and(|s| s.position == position)),
        )
        .await
        .expect(what)
        .unwrap();
    }

    async fn admitted(self) -> GatewayClient {
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("admitted within 10 s")
            .unwrap()
            .unwrap()
    }
}

/// A world whose login queue lets one player online at a time (no admission rate) and
/// holds `max_length` waiting: "a" is online, then "b" and "c" are queued, in that order.
async fn one_online(max_length: usize) -> (World, GatewayClient, Queued, Queued) {
    let w = world(1, |s| {
        s.queue = QueueSettings {
            admit_per_sec: 0,
            admit_burst: 0,
            max_online: 1,
            max_length,
        };
    })
    .await;
    let a = w.player("a").await;
    let b = Queued::start(&w, "b").await;
    let c = Queued::start(&w, "c").await;
    (w, a, b, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_queue_admits_in_order_with_positions_and_etas() {
    let w = world(1, |s| {
        s.queue = QueueSettings {
            admit_per_sec: 2,
            admit_burst: 1,
            max_online: 0,
            max_length: 100,
        };
    })
    .await;
    // Nobody waiting, within the rate: in at once, no QUEUE frame.
    let first = w.player("first").await;
    assert_eq!(first.queued, None);
    let mut waiting = Vec::new();
    for i in 1..=5u64 {
        let q = Queued::start(&w, &format!("q{i}")).await;
        let s = q.first;
        assert_eq!(s.position, i, "arrival order is the position");
        // 2 a second: 500 ms a place. The estimate uses the measured rate when lower:
        // two admissions (first, then q1 after 500 ms) over at least 1 s, so no faster
        // than 2/s, and no slower than 2 in 1.2 s while the five enter.
        let eta = s.eta.expect("an estimate");
        assert!(
            eta >= Duration::from_millis(500 * i) && eta <= Duration::from_millis(600 * i),
            "position {i}: eta {eta:?}"
        );
        waiting.push(q);
    }
    assert_eq!(w.gateway.login_queue().len(), 5);
    // Admitted strictly in arrival order.
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut done = Vec::new();
    for (i, q) in waiting.into_iter().enumerate() {
        let order = order.clone();
        let seen = q.seen.clone();
        let status = q.status.clone();
        done.push(tokio::spawn(async move {
            let c = q.admitted().await;
            order.lock().unwrap().push(i + 1);
            (c, seen, status)
        }));
    }
    for d in done {
        let (c, seen, status) = d.await.unwrap();
        let seen = seen.lock().unwrap().clone();
        // Positions only go down while waiting (the recorder may skip a status, as a
        // watch does, and may not have run after the last one yet).
        assert!(
            seen.windows(2).all(|p| p[1].position <= p[0].position),
            "{seen:?}"
        );
        // What the client reports at admission is the last status it was sent.
        let last = *status.borrow();
        assert_eq!(c.queued, last);
        assert!(
            seen.iter()
                .all(|s| s.position >= last.map_or(0, |l| l.position)),
            "{seen:?} then {last:?}"
        );
        who(&c).await;
    }
    assert_eq!(*order.lock().unwrap(), vec![1, 2, 3, 4, 5]);
    assert_eq!(w.gateway.login_queue().len(), 0);
    assert_eq!(w.gateway.login_queue().admitted(), 5);
    drop(first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_client_that_leaves_does_not_block_the_others() {
    let (w, a, b, c) = one_online(10).await;
    let mut d = Queued::start(&w, "d").await;
    assert_eq!(
        [b.first.position, c.first.position, d.first.position],
        [1, 2, 3]
    );
    // c gives up: its connection closes, it leaves the queue.
    c.task.abort();
    let t0 = Instant::now();
    while w.gateway.login_queue().len() != 2 {
        assert!(t0.elapsed() < Duration::from_secs(3), "c is still queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // d is told it moved up.
    d.until_position(2, "d's position update").await;
    // a goes offline: b, then (b gone) d.
    drop(a);
    let b = b.admitted().await;
    d.until_position(1, "d is next").await;
    drop(b);
    let d = d.admitted().await;
    who(&d).await;
    assert_eq!(w.gateway.login_queue().admitted(), 2);
    assert_eq!(w.gateway.login_queue().online(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_refuses_busy_and_a_resume_bypasses_it() {
    let (w, a, b, _c) = one_online(2).await;
    let e = GatewayClient::auth(w.gateway.local_addr(), &w.token("d"))
        .await
        .unwrap_err();
    assert_eq!(
        refusal_text(&e),
        "login queue full (2 waiting): try again later"
    );
    assert_eq!(refusal(e), Refusal::Busy);
    // a's connection drops: b takes the place.
    let welcome = a.welcome.clone();
    drop(a);
    let _b = b.admitted().await;
    // a resumes: it was online a moment ago, so it does not queue behind c.
    let a = tokio::time::timeout(
        Duration::from_secs(2),
        GatewayClient::resume(w.gateway.local_addr(), &welcome),
    )
    .await
    .expect("a resume does not wait")
    .unwrap();
    assert_eq!(a.queued, None);
    assert_eq!(a.welcome.session, welcome.session);
    assert_eq!(
        w.gateway.login_queue().online(),
        2,
        "over the cap by the resume"
    );
    assert_eq!(w.gateway.login_queue().len(), 1, "c still waits");
}
