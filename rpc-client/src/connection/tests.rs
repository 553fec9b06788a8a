//! Unit tests of the connection machinery: two-way load, stalled peers, delivery
//! status at every point a frame can be when a connection dies, and memory bounds.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::net::{TcpListener, TcpStream};

use super::writer::{BATCH_BYTES, BATCH_FRAMES, Batch};
use super::*;
use crate::codec::CODEC_SEATA;

fn config(transport: TransportOptions) -> ConnConfig {
    ConnConfig {
        transport,
        write_idle: None,
        read_idle: None,
        heartbeat_codec: CODEC_SEATA,
        probe: None,
        on_close: None,
    }
}

fn echo() -> Arc<dyn InboundHandler> {
    Arc::new(|req: InboundRequest| async move {
        meshline_testkit::delay_as_asked(req.payload.head.get("delay_ms")).await;
        Some(req.payload)
    })
}

/// Two connected `Connection`s, each with its own settings and handler.
async fn pair(
    a: ConnConfig,
    a_handler: Option<Arc<dyn InboundHandler>>,
    b: ConnConfig,
    b_handler: Option<Arc<dyn InboundHandler>>,
) -> (Connection, Connection) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (s1, s2) = tokio::join!(TcpStream::connect(addr), listener.accept());
    let (ca, _) = Connection::start(s1.unwrap(), a, "a".into(), a_handler).unwrap();
    let (cb, _) = Connection::start(s2.unwrap().0, b, "b".into(), b_handler).unwrap();
    (ca, cb)
}

/// A client connection (default settings, no handler of its own) to a server
/// connection with `server` settings that answers with `handler`.
async fn to_server(
    server: TransportOptions,
    handler: Arc<dyn InboundHandler>,
) -> (Connection, Connection) {
    pair(
        config(TransportOptions::default()),
        None,
        config(server),
        Some(handler),
    )
    .await
}

/// A connection whose peer is a raw socket that never reads.
async fn to_deaf_peer(c: ConnConfig) -> (Connection, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (s1, s2) = tokio::join!(TcpStream::connect(addr), listener.accept());
    let (conn, _) = Connection::start(s1.unwrap(), c, "deaf".into(), None).unwrap();
    (conn, s2.unwrap().0)
}

/// A connection to a deaf peer with the default transport options as `configure`
/// changes them, and no write deadline: a write that fills the socket's buffers stays
/// stuck while the test looks at the queues.
async fn to_deaf_peer_without_deadline(
    configure: impl FnOnce(&mut TransportOptions),
) -> (Connection, TcpStream) {
    let mut t = TransportOptions {
        write_timeout: None,
        ..TransportOptions::default()
    };
    configure(&mut t);
    to_deaf_peer(config(t)).await
}

async fn until(limit: Duration, f: impl FnMut() -> bool) -> bool {
    meshline_testkit::until(limit, f).await.is_some()
}

/// Two echoing peers calling each other at once, each side's calls spread over callers.
struct Push {
    /// Each peer's write-queue budget.
    request_queue_bytes: usize,
    /// The calls each peer makes.
    per_side: usize,
    /// The callers of each peer.
    callers: usize,
    /// Each call's timeout.
    timeout: Duration,
    /// The body of call number `i` (the echo must bring it back).
    body: fn(usize) -> Bytes,
}

impl Push {
    /// Connects the peers and starts the callers: the peers, the callers' tasks, and the
    /// count of calls answered so far.
    async fn start(
        self,
    ) -> (
        Connection,
        Connection,
        Vec<tokio::task::JoinHandle<()>>,
        Arc<AtomicUsize>,
    ) {
        let small = TransportOptions {
            request_queue_bytes: self.request_queue_bytes,
            ..TransportOptions::default()
        };
        let (a, b) = pair(
            config(small.clone()),
            Some(echo()),
            config(small),
            Some(echo()),
        )
        .await;
        let Push {
            per_side,
            callers,
            timeout,
            body,
            ..
        } = self;
        let done = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for from in [a.clone(), b.clone()] {
            for t in 0..callers {
                let from = from.clone();
                let done = done.clone();
                tasks.push(tokio::spawn(async move {
                    for i in (t..per_side).step_by(callers) {
                        let body = body(i);
                        let r = from
                            .call(Payload::new(body.clone()), timeout)
                            .await
                            .expect("call");
                        assert_eq!(r.body, body);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
        }
        (a, b, tasks, done)
    }
}

/// A reader never awaits its own write queue (for PONGs and answers): were it to, with
/// both peers pushing and small queues, both queues would fill with requests, both
/// readers wait on their writers, both writers on the other side's reader: deadlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_peers_pushing_100k_requests_at_each_other_with_small_queues_complete() {
    const PER_SIDE: usize = 100_000;
    let push = Push {
        request_queue_bytes: 256, // about four frames
        per_side: PER_SIDE,
        callers: 64,
        timeout: Duration::from_secs(30),
        body: |i| Bytes::from(i.to_be_bytes().to_vec()),
    };
    let (a, b, tasks, done) = push.start().await;
    let all = futures_util::future::join_all(tasks);
    match tokio::time::timeout(Duration::from_secs(120), all).await {
        Ok(results) => results.into_iter().for_each(|r| r.unwrap()),
        Err(_) => panic!(
            "stalled: {} of {} calls done",
            done.load(Ordering::Relaxed),
            2 * PER_SIDE
        ),
    }
    assert_eq!(done.load(Ordering::Relaxed), 2 * PER_SIDE);
    assert!(!a.is_closed() && !b.is_closed());
}

/// Fault 1 with full sockets: small frames never fill the socket buffers, so the old
/// deadlock needs large ones: both sides' kernel buffers full, both write queues full of
/// requests, both readers waiting to queue an answer. 256 KiB bodies, 32 callers a side
/// (outstanding answers stay within the 16 MiB response budget: 32 x 256 KiB = 8 MiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_peers_pushing_large_frames_at_each_other_with_small_queues_complete() {
    const PER_SIDE: usize = 600;
    let push = Push {
        request_queue_bytes: 1024,
        per_side: PER_SIDE,
        callers: 32,
        timeout: Duration::from_secs(60),
        body: |i| {
            let mut v = vec![0u8; 256 << 10];
            v[..8].copy_from_slice(&i.to_be_bytes());
            Bytes::from(v)
        },
    };
    let (a, b, tasks, done) = push.start().await;
    let all = futures_util::future::join_all(tasks);
    tokio::pin!(all);
    let (mut last, mut still) = (usize::MAX, 0);
    loop {
        tokio::select! {
            results = &mut all => {
                results.into_iter().for_each(|r| r.unwrap());
                break;
            }
            _ = tokio::time::sleep(Duration::from_secs(1)) => {
                let now = done.load(Ordering::Relaxed);
                if now == last { still += 1 } else { (still, last) = (0, now) }
                assert!(
                    still < 5,
                    "stalled (no call completed for 5 s): {now} of {} done",
                    2 * PER_SIDE
                );
            }
        }
    }
    assert!(!a.is_closed() && !b.is_closed());
}

/// A peer that never reads cannot hold the writer in `write_all` forever: the write
/// timeout closes the connection.
#[tokio::test]
async fn a_peer_that_stops_reading_is_cut_by_the_write_deadline() {
    let t = TransportOptions {
        write_timeout: Some(Duration::from_millis(300)),
        ..TransportOptions::default()
    };
    let (conn, _peer) = to_deaf_peer(config(t)).await;
    let body = Bytes::from(vec![7u8; 1 << 20]);
    let start = Instant::now();
    let mut sent = 0;
    let err = loop {
        match tokio::time::timeout(
            Duration::from_secs(10),
            conn.send_oneway(Payload::new(body.clone())),
        )
        .await
        .expect("the write deadline must end the stall")
        {
            Ok(()) => sent += 1,
            Err(e) => break e,
        }
    };
    assert!(sent > 0);
    assert!(start.elapsed() < Duration::from_secs(10));
    let reason = conn.close_reason().expect("closed").to_string();
    assert!(reason.contains("write stalled"), "{reason}");
    assert!(reason.contains("transport.writeTimeout"), "{reason}");
    assert!(err.to_string().contains("write stalled"), "{err}");
}

/// One-way senders whose bytes were in a write that was aborted hear "may have been
/// delivered", not "not written": `RpcClient` must not send the message again
/// elsewhere.
#[tokio::test]
async fn a_oneway_send_in_an_aborted_write_is_maybe_delivered() {
    let (conn, _peer) = to_deaf_peer_without_deadline(|t| t.max_frame_len = 64 << 20).await;
    let big = Payload::new(Bytes::from(vec![1u8; 48 << 20]));
    let c2 = conn.clone();
    let send = tokio::spawn(async move { c2.send_oneway(big).await });
    // Taken by the writer (not queued any more) and stuck in the write.
    assert!(
        until(Duration::from_secs(5), || conn.queued() == 0
            && conn.queued_bytes() > 0)
        .await
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !send.is_finished(),
        "48 MiB cannot fit a deaf peer's buffers"
    );
    conn.close();
    let r = send.await.unwrap();
    assert!(
        matches!(r, Err(RpcError::MaybeDelivered { .. })),
        "must be maybe-delivered, got {r:?}"
    );
}

/// A call that waited for queue room until its deadline, and so was never queued, gets
/// `Overloaded` (not written), not `Timeout` ("may have been delivered").
#[tokio::test]
async fn a_full_queue_is_overloaded_not_a_timeout() {
    let (conn, _peer) = to_deaf_peer_without_deadline(|t| {
        t.max_frame_len = 64 << 20;
        t.request_queue_bytes = 1 << 20;
    })
    .await;
    // One frame larger than the whole budget takes all of it while it is written.
    let c2 = conn.clone();
    let _stuck = tokio::spawn(async move {
        c2.send_oneway(Payload::new(Bytes::from(vec![1u8; 48 << 20])))
            .await
    });
    assert!(until(Duration::from_secs(5), || conn.queued_bytes() == 1 << 20).await);
    let small = || Payload::new(&b"x"[..]);
    let e = conn
        .call(small(), Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            RpcError::Overloaded {
                waited: Some(_),
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.is_not_delivered());
    let start = Instant::now();
    let e = conn
        .try_call(small(), Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(
        matches!(e, RpcError::Overloaded { waited: None, .. }),
        "{e:?}"
    );
    assert!(start.elapsed() < Duration::from_millis(100));
    let e = conn.try_send_oneway(small()).unwrap_err();
    assert!(matches!(e, RpcError::Overloaded { .. }), "{e:?}");
    assert!(e.to_string().contains("write queue is full"), "{e}");
}

/// Slow inbound handlers run under a bound: they do not get a task each without
/// limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_inbound_handlers_are_capped_per_connection() {
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let handled = Arc::new(AtomicUsize::new(0));
    let (r, p, h) = (running.clone(), peak.clone(), handled.clone());
    let slow: Arc<dyn InboundHandler> = Arc::new(move |_req: InboundRequest| {
        let (r, p, h) = (r.clone(), p.clone(), h.clone());
        async move {
            let now = r.fetch_add(1, Ordering::SeqCst) + 1;
            p.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            r.fetch_sub(1, Ordering::SeqCst);
            h.fetch_add(1, Ordering::SeqCst);
            None
        }
    });
    let capped = TransportOptions {
        max_inbound_requests: 4,
        ..TransportOptions::default()
    };
    let (client, _server) = to_server(capped, slow).await;
    for _ in 0..100 {
        client.try_send_oneway(Payload::new(&b"job"[..])).unwrap();
    }
    assert!(
        until(Duration::from_secs(10), || handled.load(Ordering::SeqCst)
            == 100)
        .await
    );
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= 4, "{peak} handlers ran at once with a cap of 4");
    assert_eq!(peak, 4, "the cap should be reached with 100 queued");
}

/// Queues are bounded in bytes, not frames (1,024 frames of 8 MiB would be 8 GiB).
#[tokio::test]
async fn the_request_queue_is_bounded_in_bytes() {
    let (conn, _peer) = to_deaf_peer_without_deadline(|t| t.request_queue_bytes = 1 << 20).await;
    let body = Bytes::from(vec![3u8; 100 << 10]);
    let mut tasks = Vec::new();
    for _ in 0..400 {
        let (c, b) = (conn.clone(), body.clone());
        tasks.push(tokio::spawn(
            async move { c.send_oneway(Payload::new(b)).await },
        ));
    }
    // The deaf peer's socket buffers absorb a few MiB; then the queue fills to its
    // byte budget and the rest of the senders wait.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(conn.queued_bytes() <= 1 << 20, "{}", conn.queued_bytes());
    assert!(conn.queued() <= 10, "{} frames queued", conn.queued());
    let waiting = tasks.iter().filter(|t| !t.is_finished()).count();
    assert!(waiting >= 300, "only {waiting} senders wait for room");
    conn.close();
}

/// Queues `frame` on `lanes` as a request (no one reads its written notice).
fn queue_request(lanes: &Lanes, frame: Frame) {
    let len = frame.encoded_len(64 << 20).unwrap();
    let (tx, _rx) = oneshot::channel();
    let _ = lanes.push_request(Queued {
        frame,
        reply: Reply::Written(tx),
        len,
        charge: 0,
    });
}

/// Fault 7, the batch half: one write took up to 256 frames whatever their size.
#[test]
fn a_write_batch_is_bounded_in_bytes_and_frames() {
    let lanes = Lanes::new(1 << 30, 1 << 20);
    let sized =
        |body: usize| Payload::new(Bytes::from(vec![0u8; body])).into_frame(MessageType::Oneway, 1);
    for _ in 0..10 {
        queue_request(&lanes, sized(100 << 10));
    }
    let mut b = Batch::new();
    b.fill(&lanes);
    assert_eq!(
        b.requests.len(),
        2,
        "two 100 KiB frames fit 256 KiB, three do not"
    );
    assert!(b.bytes <= BATCH_BYTES);
    // A frame larger than the bound goes alone.
    let lanes = Lanes::new(1 << 30, 1 << 20);
    queue_request(&lanes, sized(1 << 20));
    queue_request(
        &lanes,
        Payload::new(&b"s"[..]).into_frame(MessageType::Oneway, 2),
    );
    let mut b = Batch::new();
    b.fill(&lanes);
    assert_eq!(b.requests.len(), 1);
    // Many tiny frames: bounded by count.
    let lanes = Lanes::new(1 << 30, 1 << 20);
    for i in 0..1000 {
        queue_request(
            &lanes,
            Payload::new(&b"t"[..]).into_frame(MessageType::Oneway, i),
        );
    }
    let mut b = Batch::new();
    b.fill(&lanes);
    assert_eq!(b.requests.len(), BATCH_FRAMES);
}

/// A caller giving up between the writer's "still waiting?" check and its insert
/// leaves no entry in the pending table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_that_give_up_leave_no_pending_entry() {
    let never: Arc<dyn InboundHandler> =
        Arc::new(|_req: InboundRequest| async { std::future::pending::<Option<Payload>>().await });
    let (client, _server) = to_server(TransportOptions::default(), never).await;
    let mut tasks = Vec::new();
    for t in 0..32u64 {
        let c = client.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..600u64 {
                let micros = (t * 7919 + i * 104_729) % 400;
                let _ = c
                    .call(Payload::new(&b"x"[..]), Duration::from_micros(micros))
                    .await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(
        until(Duration::from_secs(2), || client.pending_requests() == 0).await,
        "{} pending entries left behind",
        client.pending_requests()
    );
}

/// A request id that wraps onto a request still pending does not replace its entry:
/// the first caller keeps its answer.
#[tokio::test]
async fn a_wrapped_request_id_never_replaces_a_pending_one() {
    let (client, _server) = to_server(TransportOptions::default(), echo()).await;
    client.set_next_id(77);
    let c2 = client.clone();
    let first = tokio::spawn(async move {
        c2.call(
            Payload::new(&b"first"[..]).with_head("delay_ms", "300"),
            Duration::from_secs(5),
        )
        .await
    });
    assert!(until(Duration::from_secs(2), || client.pending_requests() == 1).await);
    client.set_next_id(77);
    let second = client
        .call(Payload::new(&b"second"[..]), Duration::from_secs(5))
        .await;
    assert!(
        matches!(second, Err(RpcError::NotWritten { .. })),
        "{second:?}"
    );
    let first = first
        .await
        .unwrap()
        .expect("the first caller keeps its answer");
    assert_eq!(&first.body[..], b"first");
}

#[tokio::test]
async fn drain_with_no_deadline_does_not_panic() {
    let (client, _server) = to_server(TransportOptions::default(), echo()).await;
    client.drain(Duration::MAX).await;
    assert!(client.is_closed());
    assert_eq!(client.close_reason().unwrap().message(), "drained");
}

#[tokio::test]
async fn an_io_failure_is_kept_as_the_error_source() {
    let (conn, peer) = to_deaf_peer(config(TransportOptions::default())).await;
    // Zero linger makes the close an RST (a reset peer); blocking on drop is moot here.
    #[allow(deprecated)]
    peer.set_linger(Some(Duration::ZERO)).unwrap();
    drop(peer); // RST
    assert!(until(Duration::from_secs(5), || conn.is_closed()).await);
    let e = conn
        .call(Payload::new(&b"x"[..]), Duration::from_secs(1))
        .await
        .unwrap_err();
    let reason = std::error::Error::source(&e).expect("the close reason");
    let io = reason
        .source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .expect("the io::Error behind it");
    assert_eq!(io.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
}

#[tokio::test]
async fn a_peer_that_floods_requests_without_reading_answers_is_cut() {
    let t = TransportOptions {
        response_queue_bytes: 64 << 10,
        write_timeout: None,
        ..TransportOptions::default()
    };
    // The server answers instantly; the flooding peer is a raw socket that writes
    // requests and never reads.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (raw, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
    let (server, _) =
        Connection::start(accepted.unwrap().0, config(t), "srv".into(), Some(echo())).unwrap();
    let mut raw = raw.unwrap();
    let mut frame = bytes::BytesMut::new();
    Payload::new(Bytes::from(vec![9u8; 1000]))
        .into_frame(MessageType::Request, 1)
        .encode_into(&mut frame, 1 << 20)
        .unwrap();
    let flood = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        for _ in 0..200_000 {
            if raw.write_all(&frame).await.is_err() {
                break;
            }
        }
    });
    assert!(until(Duration::from_secs(20), || server.is_closed()).await);
    let reason = server.close_reason().unwrap().to_string();
    assert!(reason.contains("transport.responseQueueBytes"), "{reason}");
    flood.abort();
}
