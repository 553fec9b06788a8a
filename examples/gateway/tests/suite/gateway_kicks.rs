//! Every way the gateway ends an admitted client's connection says why: a `KICK` frame
//! with its code (docs/gateway-protocol.md), the last frame before the close. One test
//! per code, each read by a client; and the duplicate-login policies.

use crate::gateway_world::*;
use meshline_example_gateway::gateway::kick::Kick;
use meshline_example_gateway::gateway::session::DuplicateLogin;

/// Waits for `p`'s connection to end and returns the KICK it got.
async fn kicked(p: &GatewayClient) -> (u16, String) {
    tokio::time::timeout(Duration::from_secs(5), p.closed())
        .await
        .expect("the connection closed");
    p.kick().expect("a KICK before the close")
}

/// Reads `s` to its end; returns the code of the last frame if it is a KICK.
async fn last_kick(s: &mut TcpStream) -> Option<u16> {
    let mut last = None;
    tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(f) = read_frame(s).await {
            last = Some(f);
        }
    })
    .await
    .expect("the connection closed");
    last.map(|f| kick_code(&f))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_frame_is_kicked_oversize() {
    let w = world(1, |_| {}).await;
    let p = w.player("big").await;
    // 5000 bytes against max-frame 4096.
    p.send(ClientFrame::new(modules::LOBBY, 2, 1, vec![b'x'; 5000]))
        .await
        .unwrap();
    let (code, text) = kicked(&p).await;
    assert_eq!(code, Kick::Oversize.code(), "{text}");
    assert!(text.contains("over the 4096-byte limit"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_after_login_is_kicked_bad_frame() {
    let w = world(1, |_| {}).await;
    let (mut s, _) = w.raw_login("garbage").await;
    // A length shorter than the 9-byte header.
    s.write_all(&[0, 0, 0, 3, 1, 2, 3]).await.unwrap();
    assert_eq!(last_kick(&mut s).await, Some(Kick::BadFrame.code()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_on_another_connection_kicks_the_old_one_takeover() {
    let w = world(1, |_| {}).await;
    let first = w.player("twice").await;
    let second = w.resume(&first.resume_ticket()).await;
    let (code, text) = kicked(&first).await;
    assert_eq!(code, Kick::Takeover.code(), "{text}");
    // The session lives on, on the new connection.
    let who = second
        .request(modules::LOBBY, 1, Bytes::new())
        .await
        .unwrap();
    assert_eq!(&who[..], b"twice@be-0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_login_kicks_the_old_session_by_default() {
    let w = world(1, |_| {}).await;
    let old = w.player("dup").await;
    let ticket = old.resume_ticket();
    let new = w.player("dup").await;
    assert_ne!(new.welcome.session, old.welcome.session);
    let (code, text) = kicked(&old).await;
    assert_eq!(code, Kick::DuplicateLogin.code(), "{text}");
    // The old session has ended: it cannot be resumed.
    let e = GatewayClient::resume(w.gateway.local_addr(), &ticket)
        .await
        .unwrap_err();
    assert_eq!(refusal(e), Refusal::BadResume);
    assert_eq!(w.gateway.sessions(), 1);
    new.request(modules::LOBBY, 1, Bytes::new()).await.unwrap();
    // A detached session is ended the same way (nobody to kick).
    let welcome = w.disconnect(new).await;
    let third = w.player("dup").await;
    let e = GatewayClient::resume(w.gateway.local_addr(), &welcome)
        .await
        .unwrap_err();
    assert_eq!(refusal(e), Refusal::BadResume);
    assert_eq!(w.gateway.sessions(), 1);
    drop(third);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuse_new_refuses_the_second_login_and_allow_keeps_both() {
    let w = world(1, |s| s.duplicate_login = DuplicateLogin::RefuseNew).await;
    let first = w.player("once").await;
    let e = GatewayClient::auth(w.gateway.local_addr(), &w.token("once"))
        .await
        .unwrap_err();
    assert_eq!(refusal(e), Refusal::AlreadyOnline);
    first
        .request(modules::LOBBY, 1, Bytes::new())
        .await
        .unwrap();
    // Its session gone (kicked by the game, not kept), the account logs in again.
    for c in w.backends[0].gateway_connections() {
        c.send_oneway(
            command("kick", Bytes::new())
                .with_head(wire::TO, first.welcome.session.clone())
                .with_head(wire::REASON, "bye"),
        )
        .await
        .unwrap();
    }
    kicked(&first).await;
    w.player("once").await;

    let w = world(1, |s| s.duplicate_login = DuplicateLogin::Allow).await;
    let a = w.player("twin").await;
    let b = w.player("twin").await;
    for p in [&a, &b] {
        p.request(modules::LOBBY, 1, Bytes::new()).await.unwrap();
    }
    assert_eq!(w.gateway.sessions(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_deadline_kicks_drain() {
    let w = world(1, |s| s.drain.deadline = Duration::from_millis(300)).await;
    let p = w.player("stays").await;
    w.gateway.drain().await;
    let (code, text) = kicked(&p).await;
    assert_eq!(code, Kick::Drain.code(), "{text}");
    assert_eq!(text, "gateway draining: drain deadline passed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sustained_abuse_is_kicked_abuse() {
    let w = world(1, account_limit(Rate::per_sec(1).burst(1), 2)).await;
    let p = w.player("mallory").await;
    for _ in 0..10 {
        if p.request(modules::LOBBY, 1, Bytes::new()).await.is_err() && p.is_closed() {
            break;
        }
    }
    let (code, text) = kicked(&p).await;
    assert_eq!(code, Kick::Abuse.code(), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_read_is_kicked_slow_client_when_it_reads_again() {
    let w = world(1, |s| {
        s.send_queue_soft = 64 * 1024;
        s.send_queue_hard = 256 * 1024;
    })
    .await;
    let (mut s, sid) = w.raw_login("sleepy").await;
    // Reliable pushes past the hard limit and what the kernel's buffers hold (6.4 MiB)
    // while the client reads nothing.
    let to_gateway = w.backends[0].gateway_connections().remove(0);
    let body = Bytes::from(vec![7u8; 16 * 1024]);
    for _ in 0..400 {
        to_gateway
            .send_oneway(
                command("send", body.clone())
                    .with_head(wire::TO, sid.clone())
                    .with_head(wire::MODULE, "1")
                    .with_head(wire::OPCODE, "7")
                    .with_head(wire::RELIABLE, "1"),
            )
            .await
            .unwrap();
    }
    let stats = w.gateway.stats();
    until("the client cut", Duration::from_secs(5), || {
        stats.overflowed.load(Ordering::Relaxed) == 1
    })
    .await;
    // It reads again: what the kernel held, then the KICK, then the end.
    assert_eq!(last_kick(&mut s).await, Some(Kick::SlowClient.code()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_kick_is_kicked_game_and_keep_keeps_the_session() {
    let w = world(1, |_| {}).await;
    let to_gateway = w.backends[0].gateway_connections().remove(0);
    // The game kicks session `sid`, keeping the session when `keep`.
    let kick = async |sid: String, keep: bool| {
        let mut cmd = command("kick", Bytes::new())
            .with_head(wire::TO, sid)
            .with_head(wire::REASON, "banned for a day");
        if keep {
            cmd = cmd.with_head(wire::KEEP, "1");
        }
        to_gateway.send_oneway(cmd).await.unwrap();
    };
    // keep=1: only the connection closes; the session can be resumed.
    let kept = w.player("kept").await;
    kick(kept.welcome.session.clone(), true).await;
    let (code, text) = kicked(&kept).await;
    assert_eq!(
        (code, text.as_str()),
        (Kick::Game.code(), "banned for a day")
    );
    w.detached(&kept.welcome.session).await;
    let back = w.resume(&kept.resume_ticket()).await;
    back.request(modules::LOBBY, 1, Bytes::new()).await.unwrap();
    // Without keep: the session ends with the connection.
    let gone = w.player("gone").await;
    kick(gone.welcome.session.clone(), false).await;
    let (code, _) = kicked(&gone).await;
    assert_eq!(code, Kick::Game.code());
    let e = GatewayClient::resume(w.gateway.local_addr(), &gone.resume_ticket())
        .await
        .unwrap_err();
    assert_eq!(refusal(e), Refusal::BadResume);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_kicks_shutdown() {
    let w = world(1, |_| {}).await;
    let p = w.player("late").await;
    w.gateway.shutdown().await;
    let (code, text) = kicked(&p).await;
    assert_eq!(code, Kick::Shutdown.code(), "{text}");
}

/// A request made once the connection has ended fails at once as closed: it is never
/// written, and no reply can come (the client once registered it after the reader had
/// let every waiting request go, and it waited out its 10 s timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_after_the_kick_fails_at_once_as_closed() {
    let w = world(1, |_| {}).await;
    let p = w.player("late").await;
    w.gateway.shutdown().await;
    kicked(&p).await;
    let started = std::time::Instant::now();
    let r = p.request(modules::LOBBY, 1, Bytes::new()).await;
    assert!(
        matches!(r, Err(ClientError::Closed)),
        "expected ClientError::Closed, got {r:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "it took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_websocket_the_close_code_follows_the_kick() {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    let w = world(1, |s| {
        with_ws(s);
        s.drain.deadline = Duration::from_millis(300);
    })
    .await;
    let mut ws = raw_ws(&w, "ws").await;
    w.gateway.drain().await;
    let mut kick = None;
    let close = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Binary(b))) => {
                    let f = ClientFrame::from_message(&b, 4096).unwrap();
                    if f.opcode == op::KICK {
                        kick = Some(kick_code(&f));
                    }
                }
                Some(Ok(Message::Close(Some(c)))) => return u16::from(c.code),
                Some(Ok(_)) => {}
                other => panic!("expected a close frame, got {other:?}"),
            }
        }
    })
    .await
    .expect("closed");
    assert_eq!((kick, close), (Some(Kick::Drain.code()), 1001));
}
