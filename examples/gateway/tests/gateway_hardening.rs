//! 5,000 unauthenticated idle connections plus slowloris
//! senders while bots play. The authenticated bots' p99 stays within 2× of the quiet
//! baseline (plus a small absolute floor), no bot is refused or disconnected, and the
//! attackers are cut off by the auth deadline. In-process on loopback: one gateway, two
//! game backends, the bots and the attackers share the test's 2-worker runtime.
//!
//! What the gateway is configured with, and why:
//! - `max-unauthenticated` 5,000 (the default), `auth-deadline` 10 s, `max-frame` 4 KiB:
//!   the cap, the deadline and the transport bounds are what is under test. The attack
//!   is 5,000 idle connections plus 96 slowloris senders, so it goes past the cap: the
//!   connections over it are refused at once (`Busy`), the rest are held until the
//!   deadline cuts them (`Late`). The deadline is long enough for the attack to be opened
//!   and measured while every connection is held, short enough for a bounded test.
//! - Rate limits at their defaults (per IP 20/s burst 40, 100 messages/s per account),
//!   but for the gateway-wide connection rate, off: it would refuse most of a flood of
//!   5,096 connections in a second at accept, and the point here is what happens when
//!   the attack does reach the gateway. The attackers come from 127.10-14.x.7 (all
//!   loopback on Linux), at most 4 connections per address, so the per-IP limiter lets
//!   all of them in too (asserted: it refused nothing). The bots play from 127.0.0.1.
//! - The bots send one request every 20 ms each (a paced game client, not a flat-out
//!   benchmark: the latency of a gateway below saturation is what the players feel),
//!   staggered, 32 of them: about 1,600 requests a second, some 4,800 samples in each
//!   3 s measurement.
//!
//! The shape: a warm-up attack, then quiet, attack, quiet, attack, quiet, attack, quiet.
//! Each attack opens the 5,096 connections, measures while all of them are held, then
//! waits for the deadline to cut them; each quiet spell measures with none held. The
//! latency bound: p99 under attack ≤ 2 × quiet p99 + 1 ms, each side the median of the
//! p99s of its 1 s windows (nine under attack, twelve quiet). Medians, so a burst of
//! another process on the shared machine spoils one window, not the verdict, while a
//! cost of the held connections shows in every attack window. Alternating, because on
//! this machine the bots' p99 drifts by up to 2× within a minute with no attack at all
//! (with the process using less CPU, not more: the machine, not the gateway), and quiet
//! spells before, between and after the attacks weigh that drift on both sides alike.
//! The warm-up round is not measured: the quiet spell of a process that has never held
//! an attack was the fastest of almost every run, so a first quiet spell compares the
//! attack with the run's best minute (one attack against the higher of one quiet spell
//! before and one after failed 1 hand run in 13; two measured rounds without the
//! warm-up, 1 in 8; with it, 18 of 18: 10 with two measured rounds, the worst at
//! 1.9× the quiet p99, and 8 with the three here, the worst at 1.3×).
//! The 1 ms floor keeps a sub-millisecond baseline from turning scheduler noise into a
//! failure; it is small next to what an attack that did cost the players adds (a
//! gateway waking each unauthenticated connection every 50 ms fails the bound by far).
//!
//! Not measured: the latency while the deadline cuts the 5,000 at once (they were opened
//! within a few seconds, so they expire within about as long; the attackers' own client
//! tasks run in this process too). A login while the cap is full is refused `Busy`
//! (asserted): the cap's price, paid by new players only while it is full, never by the
//! ones already in; after each round a new player gets in again (asserted).
//!
//! Who was cut when is counted on the gateway's side too: every refusal
//! (`GatewayStats::refused`) and every WebSocket connection cut in its handshake, where
//! no refusal can be sent (`GatewayStats::handshake_timeouts`). Just before the deadline
//! neither may have moved past the refusals made at once; after it, the WebSocket
//! slowloris connections must be exactly the handshake cuts and every other held
//! connection a `Late` refusal.
//!
//! Cost: about 55 s (debug build, 2-core machine), most of it the four deadlines; up to
//! ~10,300 descriptors (the soft `RLIMIT_NOFILE` is raised to the hard one if needed).
//!
//! runs one at a time: it measures the playing bots' p99 under the attack against quiet
//! spells, medians of alternating windows that weigh whatever else the machine does
//! on both sides alike, and leaves four fifths of the CPU idle.
mod gateway_world;

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;

use gateway_world::*;
use meshline_example_gateway::client::Connector;
use meshline_example_gateway::gateway::protocol::HEADER_AFTER_LEN;
use tokio::net::TcpSocket;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, MissedTickBehavior};

/// Idle unauthenticated connections: connect, send nothing.
const IDLE: usize = 5_000;
/// Slowloris over TCP: an AUTH frame's header and payload (a 512-byte token, under the
/// 1 KiB pre-auth cap), a byte at a time.
const SLOW_TCP: usize = 64;
/// Slowloris over WebSocket: the upgrade request, a byte at a time.
const SLOW_WS: usize = 32;
/// Frames announcing 4 GiB: refused before anything is allocated.
const OVERSIZE: usize = 8;
/// The gateway's unauthenticated cap (`max-unauthenticated`, its default).
const CAP: usize = 5_000;
const AUTH_DEADLINE: Duration = Duration::from_secs(10);
/// A slowloris sends one byte this often.
const DRIBBLE: Duration = Duration::from_millis(200);
const BOTS: usize = 32;
/// Each bot sends one request this often.
const BOT_EVERY: Duration = Duration::from_millis(20);
/// A measurement is this many consecutive windows of [`SUB_WINDOW`]: its p99 is the
/// median of theirs, so one window that another process's burst hit does not decide.
const SUBS: u32 = 3;
const SUB_WINDOW: Duration = Duration::from_secs(1);
const WINDOW: Duration = Duration::from_secs(SUBS as u64);
/// How late an attacker's task may see what the gateway did at once (see
/// `check_cuts`); well under [`AUTH_DEADLINE`].
const AT_ONCE: Duration = Duration::from_secs(3);
/// Attack rounds before the measured ones (see the module docs).
const WARMUP_ROUNDS: usize = 1;
/// Measured attack rounds, each between two quiet measurements.
const ROUNDS: usize = 3;
/// The absolute floor of the latency bound.
const FLOOR: Duration = Duration::from_millis(1);

/// Raises the soft `RLIMIT_NOFILE` to the hard limit when it is below `need` (both ends
/// of every connection live in this process), with `prlimit` on ourselves.
fn ensure_nofile(need: u64) {
    let read = || {
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .unwrap_or_default()
            .to_string();
        let mut f = line.split_whitespace().skip(3);
        let mut n = || match f.next() {
            Some("unlimited") => u64::MAX,
            Some(v) => v.parse().unwrap_or(0),
            None => 0,
        };
        (n(), n())
    };
    let (soft, hard) = read();
    if soft >= need {
        return;
    }
    let _ = Command::new("prlimit")
        .args([
            "--pid",
            &std::process::id().to_string(),
            &format!("--nofile={hard}:{hard}"),
        ])
        .status();
    let (soft, hard) = read();
    assert!(
        soft >= need,
        "RLIMIT_NOFILE soft {soft} (hard {hard}): this test holds {need} descriptors; \
         raise it (ulimit -n {need})"
    );
}

/// The `i`-th attacker's source address: 4 connections per address, all loopback.
fn attacker_ip(i: usize) -> Ipv4Addr {
    let n = i / 4;
    Ipv4Addr::new(127, 10 + (n / 256) as u8, (n % 256) as u8, 7)
}

async fn connect_from(ip: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::new(ip.into(), 0)).unwrap();
    s.connect(to).await.unwrap()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Idle,
    SlowTcp,
    SlowWs,
    Oversize,
}

/// How an attacker's connection ended.
#[derive(Debug)]
struct Cut {
    kind: Kind,
    opened: Instant,
    closed: Instant,
    /// The code of the AUTH_FAIL read before the close, if one came.
    code: Option<u16>,
}

impl Cut {
    fn lasted(&self) -> Duration {
        self.closed - self.opened
    }
}

/// The refusal code of an AUTH_FAIL frame at the start of `got`.
fn refusal_code(got: &[u8]) -> Option<u16> {
    if got.len() < 4 + HEADER_AFTER_LEN {
        return None;
    }
    let len = u32::from_be_bytes(got[0..4].try_into().unwrap()) as usize;
    let module = u16::from_be_bytes([got[4], got[5]]);
    let opcode = u16::from_be_bytes([got[6], got[7]]);
    if module != GATEWAY_MODULE || opcode != op::AUTH_FAIL || got.len() < 4 + len {
        return None;
    }
    let text = std::str::from_utf8(&got[4 + HEADER_AFTER_LEN..4 + len]).ok()?;
    text.split(' ').next()?.parse().ok()
}

/// Holds `stream`, writing `dribble` a byte every [`DRIBBLE`] (nothing for an idle
/// connection), until the gateway closes it.
async fn attack(kind: Kind, stream: TcpStream, opened: Instant, dribble: Vec<u8>) -> Cut {
    let (mut rd, mut wr) = stream.into_split();
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    let mut tick = tokio::time::interval(DRIBBLE);
    let mut sent = 0;
    loop {
        tokio::select! {
            r = rd.read(&mut buf) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) if got.len() < 4096 => got.extend_from_slice(&buf[..n]),
                Ok(_) => {}
            },
            _ = tick.tick(), if sent < dribble.len() => {
                if wr.write_all(&dribble[sent..sent + 1]).await.is_err() {
                    break;
                }
                sent += 1;
            }
        }
    }
    Cut {
        kind,
        opened,
        closed: Instant::now(),
        code: refusal_code(&got),
    }
}

/// An AUTH frame announcing a 512-byte token (under `auth-max-frame`), header and
/// payload: dribbled at one byte per 200 ms it takes 105 s, ten times the deadline.
fn slow_auth_frame() -> Vec<u8> {
    let payload = 512;
    let mut f = Vec::new();
    f.extend_from_slice(&((HEADER_AFTER_LEN + payload) as u32).to_be_bytes());
    f.extend_from_slice(&GATEWAY_MODULE.to_be_bytes());
    f.extend_from_slice(&op::AUTH.to_be_bytes());
    f.extend_from_slice(&0u32.to_be_bytes());
    f.push(0);
    f.resize(4 + HEADER_AFTER_LEN + payload, b'x');
    f
}

fn slow_upgrade(to: SocketAddr) -> Vec<u8> {
    format!(
        "GET / HTTP/1.1\r\nHost: {to}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .into_bytes()
}

/// What a bot did: its requests (when sent, how long the reply took) and failures.
struct Played {
    client: GatewayClient,
    samples: Vec<(Instant, Duration)>,
    failures: Vec<String>,
}

fn play(i: usize, client: GatewayClient, mut stop: watch::Receiver<bool>) -> JoinHandle<Played> {
    tokio::spawn(async move {
        // Staggered: the bots' requests spread over the period instead of arriving
        // together.
        tokio::time::sleep(BOT_EVERY * i as u32 / BOTS as u32).await;
        let mut tick = tokio::time::interval(BOT_EVERY);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut samples = Vec::new();
        let mut failures = Vec::new();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => break,
            }
            let t = Instant::now();
            match client.request(modules::LOBBY, 1, Bytes::new()).await {
                Ok(_) => samples.push((t, t.elapsed())),
                Err(e) => failures.push(e.to_string()),
            }
        }
        Played {
            client,
            samples,
            failures,
        }
    })
}

/// (count, p50, p99) of the latencies of requests sent within `from..to`.
fn percentiles(played: &[Played], from: Instant, to: Instant) -> (usize, Duration, Duration) {
    let mut v: Vec<Duration> = played
        .iter()
        .flat_map(|p| p.samples.iter())
        .filter(|(t, _)| *t >= from && *t < to)
        .map(|(_, d)| *d)
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no request in the window");
    let at = |q: usize| v[(v.len() * q / 100).min(v.len() - 1)];
    (v.len(), at(50), at(99))
}

/// The p99 of each [`SUB_WINDOW`] of the [`SUBS`] windows from each of `starts`.
fn window_p99s(played: &[Played], starts: &[Instant]) -> Vec<Duration> {
    starts
        .iter()
        .flat_map(|&from| {
            (0..SUBS).map(move |k| {
                let (n, _, p99) =
                    percentiles(played, from + SUB_WINDOW * k, from + SUB_WINDOW * (k + 1));
                assert!(n >= 500, "too few samples in a window: {n}");
                p99
            })
        })
        .collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// What one attack round did.
struct Round {
    /// When its measurement (every attacker held) started.
    attacked: Instant,
    /// How long the attack took to open.
    opened_in: Duration,
    /// How every held or refused attacker ended.
    cuts: Vec<Cut>,
    /// How many were over the cap (refused `Busy` at once).
    over_cap: usize,
    /// A login while the cap was full.
    newcomer: Result<(), String>,
    /// Refusals and handshake cuts by the gateway after the deadline, this round.
    late_refused: usize,
    handshake_cuts: usize,
}

/// One attack: slowloris senders, oversized frames, then the idle flood past the cap;
/// measured for [`WINDOW`] while every attacker is held; then waits for the deadline to
/// cut them all. `next_ip` numbers the attackers' source addresses across rounds.
async fn attack_round(w: &World, next_ip: &mut usize) -> Round {
    let addr = w.gateway.local_addr();
    let ws_addr = w.gateway.ws_addr().unwrap();
    let stats = w.gateway.stats();
    // Slowloris first: they take their place under the cap before the idle flood (so
    // which connections the cap refuses is known: idle ones).
    let refused0 = stats.refused.load(Ordering::Relaxed);
    let late0 = stats.refused_for(Refusal::Late);
    let handshakes0 = stats.handshake_timeouts.load(Ordering::Relaxed);
    let mut attackers = JoinSet::new();
    let mut ip = || {
        *next_ip += 1;
        attacker_ip(*next_ip)
    };
    let first_opened = Instant::now();
    for _ in 0..SLOW_WS {
        let s = connect_from(ip(), ws_addr).await;
        let opened = Instant::now();
        attackers.spawn(attack(Kind::SlowWs, s, opened, slow_upgrade(ws_addr)));
    }
    for _ in 0..SLOW_TCP {
        let s = connect_from(ip(), addr).await;
        let opened = Instant::now();
        attackers.spawn(attack(Kind::SlowTcp, s, opened, slow_auth_frame()));
    }
    // Accepted and counted under the cap within this (they need one task step each).
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The frame cap: 4 GiB announced, refused at once (TooLarge), before any buffer.
    let mut oversize = JoinSet::new();
    for _ in 0..OVERSIZE {
        let mut s = connect_from(ip(), addr).await;
        let opened = Instant::now();
        s.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
        oversize.spawn(attack(Kind::Oversize, s, opened, Vec::new()));
    }
    let oversize = tokio::time::timeout(Duration::from_secs(5), oversize.join_all())
        .await
        .expect("oversized frames are refused at once");
    for c in &oversize {
        assert_eq!(c.code, Some(Refusal::TooLarge.code()), "{c:?}");
        assert!(c.lasted() < Duration::from_secs(1), "{c:?}");
    }
    // The idle flood, 128 connects in flight at a time.
    let connecting = Arc::new(Semaphore::new(128));
    let (opened_tx, mut opened_rx) = mpsc::unbounded_channel();
    for _ in 0..IDLE {
        let from = ip();
        let (connecting, opened_tx) = (connecting.clone(), opened_tx.clone());
        attackers.spawn(async move {
            let permit = connecting.acquire_owned().await.unwrap();
            let s = connect_from(from, addr).await;
            let opened = Instant::now();
            drop(permit);
            let _ = opened_tx.send(());
            attack(Kind::Idle, s, opened, Vec::new()).await
        });
    }
    for _ in 0..IDLE {
        opened_rx.recv().await.unwrap();
    }
    let all_opened = Instant::now();
    // Past the cap: refused at once with Busy (the idle connections last in).
    let over_cap = IDLE + SLOW_TCP + SLOW_WS - CAP;
    let refused_now = || (stats.refused.load(Ordering::Relaxed) - refused0) as usize;
    let handshake_cuts =
        || (stats.handshake_timeouts.load(Ordering::Relaxed) - handshakes0) as usize;
    let t = Instant::now();
    while refused_now() < OVERSIZE + over_cap && t.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(refused_now(), OVERSIZE + over_cap, "refused over the cap");

    // Under attack: 5,000 connections held unauthenticated, 96 of them dribbling.
    let attacked = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let attacked_end = Instant::now();
    assert!(
        attacked_end + Duration::from_millis(250) < first_opened + AUTH_DEADLINE,
        "the attack took {:?} to open: the window was not within the auth deadline",
        all_opened - first_opened
    );
    assert_eq!(
        (refused_now(), handshake_cuts()),
        (OVERSIZE + over_cap, 0),
        "an attacker was cut before the deadline"
    );
    // A new login now finds the cap full: refused Busy, at once.
    let newcomer = Connector::tcp(addr)
        .auth(&w.minter.mint("newcomer", Duration::from_secs(60)))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string());
    assert!(
        newcomer
            .as_ref()
            .is_err_and(|e| e.starts_with(&format!("refused: {} ", Refusal::Busy.code()))),
        "a login while the cap is full: {newcomer:?}"
    );
    // Nobody cut before the deadline, on the gateway's clock: every held connection was
    // accepted after `first_opened`, so none may be cut before this, over TCP (a
    // refusal) or WebSocket (a handshake cut).
    tokio::time::sleep_until(first_opened + AUTH_DEADLINE - Duration::from_millis(200)).await;
    assert_eq!(
        (refused_now(), handshake_cuts()),
        (OVERSIZE + over_cap + 1, 0),
        "an attacker was cut before the deadline (the gateway's count of refusals and \
         handshake cuts)"
    );

    // The deadline cuts the rest.
    let cuts = tokio::time::timeout(
        AUTH_DEADLINE + Duration::from_secs(10),
        attackers.join_all(),
    )
    .await
    .expect("every attacker is cut off by the auth deadline");
    Round {
        attacked,
        opened_in: all_opened - first_opened,
        cuts,
        over_cap,
        newcomer,
        late_refused: (stats.refused_for(Refusal::Late) - late0) as usize,
        handshake_cuts: handshake_cuts(),
    }
}

/// The cap refused a round's excess at once, the deadline cut every other attacker,
/// not before it, each told why where the protocol allows. Returns the shortest and
/// longest time a held attacker lasted.
fn check_cuts(round: &Round) -> (Duration, Duration) {
    let busy: Vec<&Cut> = round
        .cuts
        .iter()
        .filter(|c| c.code == Some(Refusal::Busy.code()))
        .collect();
    assert_eq!(busy.len(), round.over_cap, "refused Busy");
    // "At once" against the attacker's clock: its task reads the refusal while 5,000
    // others connect in the same 2-worker runtime (a debug build), which has delayed
    // that read by just over 1 s; a connection held to the deadline lasts 10 s. The
    // gateway's own count of refusals reached the total before the window began.
    let slow: Vec<&&Cut> = busy
        .iter()
        .filter(|c| c.kind != Kind::Idle || c.lasted() >= AT_ONCE)
        .collect();
    assert!(
        slow.is_empty(),
        "refused Busy, but not idle or not at once: {slow:?}"
    );
    let held: Vec<&Cut> = round
        .cuts
        .iter()
        .filter(|c| c.code != Some(Refusal::Busy.code()))
        .collect();
    assert_eq!(held.len(), CAP);
    // The attacker's clock starts when its task sees the connect done, which the
    // connect storm delays (as above), after the gateway's clock started: a held
    // connection can look up to that delay short of the deadline.
    let early = AUTH_DEADLINE - AT_ONCE;
    let late = AUTH_DEADLINE + Duration::from_secs(3);
    for c in &held {
        assert!(
            c.lasted() >= early && c.lasted() <= late,
            "cut after {:?}, not at the {AUTH_DEADLINE:?} deadline: {c:?}",
            c.lasted()
        );
        match c.kind {
            // Told why (AUTH_FAIL Late), then closed.
            Kind::Idle => assert_eq!(c.code, Some(Refusal::Late.code()), "{c:?}"),
            // The same, unless a byte it dribbled after the deadline arrived unread
            // and the close reset the connection before the refusal was read.
            Kind::SlowTcp => assert!(
                c.code.is_none() || c.code == Some(Refusal::Late.code()),
                "{c:?}"
            ),
            // WebSocket: no handshake, no message to carry a refusal in.
            Kind::SlowWs | Kind::Oversize => assert_eq!(c.code, None, "{c:?}"),
        }
    }
    let count = |k: Kind| held.iter().filter(|c| c.kind == k).count();
    assert_eq!(
        (count(Kind::Idle), count(Kind::SlowTcp), count(Kind::SlowWs)),
        (CAP - SLOW_TCP - SLOW_WS, SLOW_TCP, SLOW_WS)
    );
    // The gateway's own count: every held TCP connection refused Late at the deadline,
    // every WebSocket slowloris cut in its handshake.
    assert_eq!(
        (round.late_refused, round.handshake_cuts),
        (CAP - SLOW_WS, SLOW_WS),
        "the gateway's cuts at the deadline"
    );
    let lasted = held.iter().map(|c| c.lasted());
    (lasted.clone().min().unwrap(), lasted.max().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slowloris_connections_do_not_hurt_playing_bots() {
    let t_test = Instant::now();
    // Both ends of every connection, plus the bots, backends and slack.
    ensure_nofile(2 * (IDLE + SLOW_TCP + SLOW_WS + OVERSIZE + BOTS) as u64 + 1_000);
    let w = world(2, |s| {
        s.ws_listen = Some("127.0.0.1:0".parse().unwrap());
        s.auth_deadline = AUTH_DEADLINE;
        s.max_unauthenticated = CAP;
        s.limits = LimitSettings {
            global_connects: Rate::OFF,
            ..LimitSettings::default()
        };
    })
    .await;
    let stats = w.gateway.stats();

    // The bots log in and play all along.
    let (stop_tx, stop) = watch::channel(false);
    let mut bots = Vec::new();
    for i in 0..BOTS {
        bots.push(play(i, w.player(&format!("bot{i}")).await, stop.clone()));
    }
    let admitted = stats.admitted.load(Ordering::Relaxed);
    assert_eq!(admitted, BOTS as u64);

    // A warm-up attack, not measured; then quiet, attack, quiet, attack, quiet: each
    // measured attack between two quiet spells, all of a process that has already
    // been through one attack, so the comparison is between like states and a drift
    // of the shared machine weighs on both sides alike (see the module docs).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut quiet = Vec::new();
    let mut rounds = Vec::new();
    let mut next_ip = 0;
    for round in 0..WARMUP_ROUNDS + ROUNDS {
        if round >= WARMUP_ROUNDS {
            quiet.push(Instant::now());
            tokio::time::sleep(WINDOW).await;
        }
        rounds.push(attack_round(&w, &mut next_ip).await);
        // After a round a new player gets in again.
        let late_player = w.player(&format!("after-round-{round}")).await;
        let answer = late_player.request(modules::LOBBY, 1, Bytes::new()).await;
        assert!(answer.is_ok(), "{answer:?}");
    }
    quiet.push(Instant::now());
    tokio::time::sleep(WINDOW).await;
    stop_tx.send(true).unwrap();
    let mut played = Vec::new();
    for b in bots {
        played.push(b.await.unwrap());
    }
    drop(stop);

    let cut_ranges: Vec<(Duration, Duration)> = rounds.iter().map(check_cuts).collect();
    // The per-IP limiter let every attacker in: the cap and the deadline did the work.
    assert_eq!(w.gateway.limits().refused(LimitKind::Ip), 0);
    assert_eq!(w.gateway.limits().refused(LimitKind::Global), 0);

    // The bots: never refused, never disconnected, nobody logged in again.
    for (i, p) in played.iter().enumerate() {
        assert!(p.failures.is_empty(), "bot {i}: {:?}", p.failures);
        assert!(!p.client.is_closed(), "bot {i} was disconnected");
    }
    assert_eq!(
        stats.admitted.load(Ordering::Relaxed),
        admitted + (WARMUP_ROUNDS + ROUNDS) as u64,
        "only the players after the rounds logged in"
    );

    // The latencies.
    for (k, q) in quiet.iter().enumerate() {
        let (n, p50, p99) = percentiles(&played, *q, *q + WINDOW);
        eprintln!("quiet {k}: {n} requests, p50 {p50:?}, p99 {p99:?}");
    }
    for (k, (r, (min_cut, max_cut))) in rounds.iter().zip(&cut_ranges).enumerate() {
        let (n, p50, p99) = percentiles(&played, r.attacked, r.attacked + WINDOW);
        let warmup = if k < WARMUP_ROUNDS { " (warm-up)" } else { "" };
        eprintln!(
            "attack {k}{warmup} ({IDLE} idle + {SLOW_TCP} TCP + {SLOW_WS} WS slowloris; {CAP} held, \
             {} refused Busy): {n} requests, p50 {p50:?}, p99 {p99:?}; opened in {:?}; \
             held cut after {min_cut:?}..{max_cut:?}; a login while the cap was full: {:?}",
            r.over_cap, r.opened_in, r.newcomer
        );
    }
    let quiet_p99s = window_p99s(&played, &quiet);
    let attack_starts: Vec<Instant> = rounds[WARMUP_ROUNDS..].iter().map(|r| r.attacked).collect();
    let attack_p99s = window_p99s(&played, &attack_starts);
    eprintln!(
        "p99 of each {SUB_WINDOW:?} window: quiet {quiet_p99s:?}, under attack \
         {attack_p99s:?}; test took {:?}",
        t_test.elapsed()
    );
    let (typical_q, typical_a) = (median(quiet_p99s), median(attack_p99s));
    assert!(
        typical_a <= typical_q * 2 + FLOOR,
        "p99 under attack {typical_a:?} (median of its windows) > 2 × quiet p99 \
         {typical_q:?} + {FLOOR:?}"
    );
}
