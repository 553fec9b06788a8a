//! The example gateway end to end, in-process on loopback: real TCP clients, the
//! gateway, game backends found through an in-memory registry.

use crate::gateway_world::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_accepts_valid_tokens_and_refuses_forged_expired_replayed_and_late() {
    let w = world(1, |_| {}).await;
    let addr = w.gateway.local_addr();
    let token = w.minter.mint("alice", Duration::from_secs(60));
    let alice = GatewayClient::auth(addr, &token).await.unwrap();
    assert_eq!(alice.welcome.gateway, "gw-a");
    let who = alice
        .request(modules::LOBBY, 1, Bytes::new())
        .await
        .unwrap();
    assert_eq!(&who[..], b"alice@be-0");
    // Replayed.
    let e = GatewayClient::auth(addr, &token).await.unwrap_err();
    assert_eq!(refusal(e), Refusal::Replayed);
    // Forged.
    let forged = TokenMinter::new("not-the-secret").mint("mallory", Duration::from_secs(60));
    let e = GatewayClient::auth(addr, &forged).await.unwrap_err();
    assert_eq!(refusal(e), Refusal::Forged);
    // Expired.
    let old = w.minter.mint_at("bob", 1_000_000);
    let e = GatewayClient::auth(addr, &old).await.unwrap_err();
    assert_eq!(refusal(e), Refusal::Expired);
    // Late: connect and say nothing past the 500 ms deadline. The gateway's clock starts
    // after our connect returns (it accepts after the kernel's handshake), so the
    // refusal cannot come before 500 ms on ours; a deadline that fired late by a timer
    // tick or a busy worker stays well under 800 ms.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    let mut buf = vec![0u8; 256];
    let t0 = tokio::time::Instant::now();
    let n = tokio::time::timeout(Duration::from_secs(5), idle.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_millis(800),
        "refused after {waited:?} for a 500 ms deadline"
    );
    let f = ClientFrame::from_message(&buf[..n], 4096).unwrap();
    assert_eq!(f.opcode, op::AUTH_FAIL);
    assert!(
        String::from_utf8_lossy(&f.payload).starts_with("5 "),
        "{f:?}"
    );
    // Not AUTH first.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&ClientFrame::new(modules::LOBBY, 1, 1, Bytes::new()).to_bytes())
        .await
        .unwrap();
    let n = s.read(&mut buf).await.unwrap();
    let f = ClientFrame::from_message(&buf[..n], 4096).unwrap();
    assert!(
        String::from_utf8_lossy(&f.payload).starts_with("6 "),
        "{f:?}"
    );
    let stats = w.gateway.stats();
    assert_eq!(stats.refused.load(Ordering::Relaxed), 5);
    for r in [
        Refusal::Replayed,
        Refusal::Forged,
        Refusal::Expired,
        Refusal::Late,
        Refusal::NotAuth,
    ] {
        assert_eq!(stats.refused_for(r), 1, "{r:?}");
    }
    assert_eq!(stats.refused_for(Refusal::Malformed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_first_frames_are_refused_for_what_they_are_not_as_token_errors() {
    let w = world(1, |s| s.auth_max_frame = 256).await;
    let addr = w.gateway.local_addr();
    // A raw client: writes `bytes`, reads the refusal to the end of the connection.
    let refused_with = async |bytes: Vec<u8>| {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&bytes).await.unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut got))
            .await
            .expect("refused and closed in time")
            .unwrap();
        let f = ClientFrame::from_message(&got, 4096).unwrap();
        assert_eq!(
            (f.module, f.opcode),
            (GATEWAY_MODULE, op::AUTH_FAIL),
            "{f:?}"
        );
        String::from_utf8_lossy(&f.payload).into_owned()
    };
    // Over the pre-auth cap (256 here), under max-frame (4096): too large, not a token.
    let big = ClientFrame::new(GATEWAY_MODULE, op::AUTH, 0, vec![b'a'; 300]).to_bytes();
    let text = refused_with(big.to_vec()).await;
    assert!(text.starts_with("11 "), "{text}");
    // A length shorter than the header: not a frame.
    let text = refused_with(vec![0, 0, 0, 3, 1, 2, 3]).await;
    assert!(text.starts_with("12 "), "{text}");
    // A token that is not text is still a token error.
    let text = refused_with(
        ClientFrame::new(GATEWAY_MODULE, op::AUTH, 0, vec![0xff, 0xfe])
            .to_bytes()
            .to_vec(),
    )
    .await;
    assert!(text.starts_with("1 "), "{text}");
    // A RESUME that does not parse is a bad resume.
    let text = refused_with(
        ClientFrame::new(GATEWAY_MODULE, op::RESUME, 0, &b"x y z w"[..])
            .to_bytes()
            .to_vec(),
    )
    .await;
    assert!(text.starts_with("8 "), "{text}");
    // Connections that close before a byte (a port check, a client that gave up) are
    // counted apart: not refusals, not bad frames.
    for _ in 0..3 {
        drop(TcpStream::connect(addr).await.unwrap());
    }
    let stats = w.gateway.stats();
    let closed = || {
        stats
            .closed_before_frame
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    until(
        "three closed connections counted",
        Duration::from_secs(3),
        || closed() >= 3,
    )
    .await;
    assert_eq!(closed(), 3);
    assert_eq!(stats.refused_for(Refusal::TooLarge), 1);
    assert_eq!(stats.refused_for(Refusal::BadFrame), 1);
    assert_eq!(stats.refused_for(Refusal::Malformed), 1);
    assert_eq!(stats.refused_for(Refusal::BadResume), 1);
    assert_eq!(stats.refused.load(std::sync::atomic::Ordering::Relaxed), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_binding_sticks_per_session_and_spreads_sessions() {
    let w = world(3, |_| {}).await;
    let mut homes = std::collections::HashSet::new();
    for i in 0..12 {
        let p = w.player(&format!("p{i}")).await;
        let first = p
            .request(modules::INVENTORY, 1, &b"sword"[..])
            .await
            .unwrap();
        let home = last_word(&first);
        assert_eq!(
            String::from_utf8_lossy(&first),
            format!("1 items on {home}")
        );
        for k in 0..5 {
            let again = p.request(modules::INVENTORY, 1, &b"gem"[..]).await.unwrap();
            assert_eq!(
                String::from_utf8_lossy(&again),
                format!("{} items on {home}", k + 2),
                "session moved off {home}"
            );
        }
        homes.insert(home);
    }
    assert_eq!(homes.len(), 3, "12 sessions should spread over 3 backends");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_bind_routes_to_the_bound_backend() {
    let w = world(3, |_| {}).await;
    let p = w.player("dyn").await;
    // Unbound: balanced round robin over all three.
    let mut seen = std::collections::HashSet::new();
    for _ in 0..6 {
        seen.insert(p.request(modules::BIND, 2, Bytes::new()).await.unwrap());
    }
    assert_eq!(seen.len(), 3);
    let id = w.bind(&p).await;
    for _ in 0..10 {
        let who = p.request(modules::BIND, 2, Bytes::new()).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&who), id);
    }
    // An opcode the module does not have is an error, as in every module (the
    // protocol doc's rule), not the backend's id.
    match p.request(modules::BIND, 9, Bytes::new()).await {
        Err(ClientError::Reply(text)) => {
            assert!(text.starts_with("unknown module 4 opcode 9"), "{text}")
        }
        other => panic!("expected an ERROR reply, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_reaches_every_member_once_with_one_backend_send_per_gateway() {
    let w = world(2, |_| {}).await;
    let mut players = Vec::new();
    for i in 0..20 {
        players.push(w.player(&format!("c{i}")).await);
    }
    // The gateway reaches a backend through one connection per cluster (lobby, chat,
    // ...): a lobby request first, so the backend has seen this gateway on two
    // connections; the broadcast must still go once per gateway.
    for p in &players {
        p.request(modules::LOBBY, 1, Bytes::new()).await.unwrap();
    }
    let before: u64 = w.backends.iter().map(|b| b.fanout_sends()).sum();
    players[0]
        .request(modules::CHAT, 1, &b"hello"[..])
        .await
        .unwrap();
    for p in &players {
        let f = p
            .next_push(Duration::from_secs(2))
            .await
            .expect("broadcast");
        assert_eq!(&f.payload[..], b"c0: hello");
        assert!(
            p.next_push(Duration::from_millis(100)).await.is_none(),
            "exactly once"
        );
    }
    let sends: u64 = w.backends.iter().map(|b| b.fanout_sends()).sum::<u64>() - before;
    assert_eq!(sends, 1, "one gateway, one backend send");
    assert_eq!(w.gateway.stats().fanouts.load(Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_backend_moves_stateless_traffic_and_rebinds_bound_sessions() {
    let mut w = world(2, |s| s.protect.hold_for = Duration::from_millis(300)).await;
    let p = w.player("k").await;
    let put = p
        .request(modules::INVENTORY, 1, &b"sword"[..])
        .await
        .unwrap();
    let home = last_word(&put);
    let idx = w.backends.iter().position(|b| b.id() == home).unwrap();
    let victim = w.backends.remove(idx);
    victim.kill();
    for c in CLUSTERS {
        w.until_alive_count(c, 1).await;
    }
    for _ in 0..6 {
        let who = p.request(modules::LOBBY, 1, Bytes::new()).await.unwrap();
        assert!(!String::from_utf8_lossy(&who).ends_with(&home), "{who:?}");
    }
    // The bound backend is gone: the next request is served by the other one (its bag is
    // empty there: the old one's state is lost), and the client is told first.
    let survivor = w.backends[0].id().to_string();
    let bag = p
        .request(modules::INVENTORY, 2, Bytes::new())
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&bag),
        format!("empty on {survivor}")
    );
    let notice = gateway_push(&p, op::REBOUND, Duration::from_secs(1), "a REBOUND notice").await;
    assert_eq!(
        &notice.payload[..],
        b"5",
        "the static modules of the cluster"
    );
    assert_eq!(w.gateway.stats().rebound.load(Ordering::Relaxed), 1);
    // Bound to the survivor from now on, without another notice.
    for k in 0..3 {
        let put = p.request(modules::INVENTORY, 1, &b"gem"[..]).await.unwrap();
        assert_eq!(
            String::from_utf8_lossy(&put),
            format!("{} items on {survivor}", k + 1)
        );
    }
    assert!(p.next_push(Duration::from_millis(100)).await.is_none());
    assert_eq!(w.gateway.stats().rebound.load(Ordering::Relaxed), 1);
    // With no backend at all, the error names the module, never a backend address.
    w.backends.pop().unwrap().kill();
    w.until_alive_count("lobby", 0).await;
    let text = error_text(p.request(modules::LOBBY, 1, Bytes::new()).await);
    assert_eq!(text, "busy: lobby unavailable");
    assert!(!text.contains("127.0.0.1"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_loses_unreliable_frames_then_is_cut_and_a_fast_one_is_not() {
    let w = world(1, |s| {
        // A reading client has 1 MiB (eight bursts) of slack on a loaded machine.
        s.send_queue_soft = 1024 * 1024;
        s.send_queue_hard = 3 * 1024 * 1024;
    })
    .await;
    let fast = w.player("fast").await;
    // The slow one authenticates and then never reads (with a small receive buffer, so
    // the kernel holds little for it).
    // Held open, never read, to the end of the test.
    let (_slow, slow_sid) = w.raw_login("slow").await;
    let fast_sid = fast.welcome.session.clone();
    // Push frames to both as the backend does, on its connection to the gateway.
    let to_gateway = w.backends[0]
        .gateway_connections()
        .into_iter()
        .next()
        .expect("the gateway is connected to the backend");
    let body = Bytes::from(vec![7u8; 16 * 1024]);
    let fast_reader = tokio::spawn(async move {
        let mut got = 0;
        while let Some(_f) = fast.next_push(Duration::from_secs(2)).await {
            got += 1;
        }
        got
    });
    // 800 x 16 KiB unreliable frames (12.5 MiB) in bursts of 8 (128 KiB, within the soft
    // limit) every 5 ms: a reading client keeps up, the silent one cannot.
    for _ in 0..100 {
        for _ in 0..8 {
            to_gateway
                .send_oneway(
                    command("send", body.clone())
                        .with_head(wire::TO, format!("{slow_sid},{fast_sid}"))
                        .with_head(wire::MODULE, "1")
                        .with_head(wire::OPCODE, "7"),
                )
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let stats = w.gateway.stats();
    assert!(
        stats.dropped.load(Ordering::Relaxed) > 0,
        "unreliable frames dropped for the silent client"
    );
    assert_eq!(stats.overflowed.load(Ordering::Relaxed), 0);
    // Reliable frames cannot be dropped: 300 x 16 KiB is past the 3 MiB hard limit, and
    // the silent client is cut.
    for _ in 0..300 {
        to_gateway
            .send_oneway(
                command("send", body.clone())
                    .with_head(wire::TO, slow_sid.clone())
                    .with_head(wire::RELIABLE, "1"),
            )
            .await
            .unwrap();
    }
    until("the silent client cut", Duration::from_secs(3), || {
        stats.overflowed.load(Ordering::Relaxed) == 1
    })
    .await;
    let got = fast_reader.await.unwrap();
    assert_eq!(got, 800, "the reading client got every frame");
}

// --- WebSocket: the same frame, one per binary message -------------------------------

/// Reads until the gateway's close frame; returns its code and reason, and the code of
/// the KICK read before it, if one came.
async fn close_of(ws: &mut RawWs) -> (u16, String, Option<u16>) {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    let mut kick = None;
    tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(Some(c)))) => {
                    return (u16::from(c.code), c.reason.to_string(), kick);
                }
                Some(Ok(Message::Binary(b))) => {
                    if let Ok(f) = ClientFrame::from_message(&b, 4096)
                        && (f.module, f.opcode) == (GATEWAY_MODULE, op::KICK)
                    {
                        kick = Some(kick_code(&f));
                    }
                }
                Some(Ok(_)) => {}
                other => panic!("expected a close frame, got {other:?}"),
            }
        }
    })
    .await
    .expect("the gateway closes the connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_clients_authenticate_request_and_share_broadcasts_with_tcp_clients() {
    let w = world(1, with_ws).await;
    let url = w.ws_url();
    let alice = w.ws_player("alice").await;
    assert_eq!(alice.welcome.gateway, "gw-a");
    // A TCP player in the same broadcast.
    let bob = w.player("bob").await;
    bob.request(modules::CHAT, 1, &b"hi from tcp"[..])
        .await
        .unwrap();
    alice
        .request(modules::CHAT, 1, &b"hi from ws"[..])
        .await
        .unwrap();
    for p in [&alice, &bob] {
        let mut got = Vec::new();
        for _ in 0..2 {
            let f = p
                .next_push(Duration::from_secs(2))
                .await
                .expect("broadcast");
            assert_eq!(f.module, modules::CHAT);
            got.push(String::from_utf8_lossy(&f.payload).into_owned());
        }
        got.sort();
        assert_eq!(got, ["alice: hi from ws", "bob: hi from tcp"]);
    }
    // (Chat first: the example backend broadcasts once per gateway *connection* it has
    // seen a request on, and the gateway holds one per cluster, lobby included.)
    let who = alice
        .request(modules::LOBBY, 1, Bytes::new())
        .await
        .unwrap();
    assert_eq!(&who[..], b"alice@be-0");
    // Refusals reach WebSocket clients the same way.
    let forged = TokenMinter::new("not-the-secret").mint("mallory", Duration::from_secs(60));
    let e = GatewayClient::auth_ws(&url, &forged).await.unwrap_err();
    assert_eq!(refusal(e), Refusal::Forged);
    // And a session resumes over WebSocket.
    let welcome = w.disconnect(alice).await;
    let again = GatewayClient::resume_ws(&url, &welcome).await.unwrap();
    assert_eq!(again.welcome.session, welcome.session);
    assert_eq!(
        &again
            .request(modules::LOBBY, 1, Bytes::new())
            .await
            .unwrap()[..],
        b"alice@be-0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_websocket_message_closes_that_connection() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let w = world(1, with_ws).await;
    let alice = w.ws_player("alice").await;
    // A message over max-frame (4096): refused by the WebSocket layer on its header.
    let mut big = raw_ws(&w, "big").await;
    let payload = Bytes::from(vec![1u8; 8192]);
    let _ = big
        .send(Message::Binary(
            ClientFrame::new(modules::LOBBY, 1, 1, payload).to_bytes(),
        ))
        .await;
    let (code, reason, kick) = close_of(&mut big).await;
    assert_eq!(code, 1009, "message too big: {reason}");
    assert!(reason.contains("4096-byte limit"), "{reason}");
    assert_eq!(kick, Some(1), "KICK OVERSIZE before the close");
    // A small message whose frame announces 4 GiB: refused by the frame's cap.
    let mut liar = raw_ws(&w, "liar").await;
    liar.send(Message::Binary(Bytes::from_static(&[0xff; 13])))
        .await
        .unwrap();
    let (code, reason, kick) = close_of(&mut liar).await;
    assert_eq!(code, 1009, "{reason}");
    assert_eq!(kick, Some(1));
    // A message that is not one whole frame.
    let mut cut = raw_ws(&w, "cut").await;
    cut.send(Message::Binary(Bytes::from_static(&[0, 0, 0, 20, 0, 1])))
        .await
        .unwrap();
    let (code, reason, kick) = close_of(&mut cut).await;
    assert_eq!(code, 1002, "{reason}");
    assert!(reason.contains("inside its frame"), "{reason}");
    assert_eq!(kick, Some(2), "KICK BAD_FRAME before the close");
    // Others are unaffected.
    assert!(alice.request(modules::LOBBY, 1, Bytes::new()).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_text_message_closes_that_connection() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let w = world(1, with_ws).await;
    let mut ws = raw_ws(&w, "texter").await;
    ws.send(Message::Text("hello".into())).await.unwrap();
    let (code, reason, kick) = close_of(&mut ws).await;
    assert_eq!(code, 1003, "unsupported data: {reason}");
    assert!(reason.contains("binary"), "{reason}");
    assert_eq!(kick, Some(2));
    // Text instead of AUTH is refused at admission, with the reason code.
    let (mut early, _) = tokio_tungstenite::connect_async(w.ws_url()).await.unwrap();
    early.send(Message::Text("AUTH".into())).await.unwrap();
    use futures_util::StreamExt;
    match early.next().await {
        Some(Ok(Message::Binary(b))) => {
            let f = ClientFrame::from_message(&b, 4096).unwrap();
            assert_eq!(f.opcode, op::AUTH_FAIL, "{f:?}");
            // Not a frame (12), not a malformed token.
            assert!(
                String::from_utf8_lossy(&f.payload).starts_with("12 "),
                "{f:?}"
            );
        }
        other => panic!("expected AUTH_FAIL, got {other:?}"),
    }
    let (code, _, _) = close_of(&mut early).await;
    assert_eq!(code, 1008);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_sessions_go_only_to_backends_that_take_them() {
    let registry = Arc::new(MemoryRegistry::default());
    let mut backends = Vec::new();
    for (id, version) in [("v2-a", "2.1"), ("v3", "3.0"), ("v2-b", "2.4.1")] {
        backends.push(
            GameBackend::start_versioned(
                id,
                "127.0.0.1:0".parse().unwrap(),
                registry.clone(),
                &CLUSTERS,
                Duration::from_secs(3600),
                version,
            )
            .await
            .unwrap(),
        );
    }
    let mut s = settings();
    s.app_version = Some("2.0.0".into());
    let gateway = Gateway::start(s, registry.clone()).await.unwrap();
    let inventory = gateway.backend("inventory").unwrap();
    inventory
        .wait_alive(3, Duration::from_secs(5))
        .await
        .unwrap();
    let minter = TokenMinter::new(SECRET);
    let mut homes = std::collections::HashSet::new();
    for i in 0..12 {
        let put = first_put(&gateway, &minter, &format!("v{i}")).await;
        homes.insert(last_word(put.as_bytes()));
    }
    let want: std::collections::HashSet<String> = ["v2-a".into(), "v2-b".into()].into();
    assert_eq!(homes, want, "major version 3 must get no new session");
    // A backend that disables new sessions gets none either.
    let v2a = backends.iter().find(|b| b.id() == "v2-a").unwrap();
    for c in v2a.gateway_connections() {
        c.send_oneway(command("disable", Bytes::new()))
            .await
            .unwrap();
    }
    // One-way: wait until the gateway took it (it reaches the gateway on the inventory
    // cluster's connection among others).
    until("v2-a disabled", Duration::from_secs(3), || {
        gateway
            .refused_backends("inventory")
            .iter()
            .any(|k| k.port == v2a.local_addr().port())
    })
    .await;
    for i in 0..6 {
        let put = first_put(&gateway, &minter, &format!("d{i}")).await;
        assert_eq!(put, "1 items on v2-b");
    }
}

/// A new session of `account` on `gateway` puts an item in its bag: the answer
/// (`1 items on <backend>`: the static binding a new session got).
async fn first_put(gateway: &Gateway, minter: &TokenMinter, account: &str) -> String {
    let p = GatewayClient::auth(
        gateway.local_addr(),
        &minter.mint(account, Duration::from_secs(60)),
    )
    .await
    .unwrap();
    ok_text(p.request(modules::INVENTORY, 1, &b"r"[..]).await)
}
