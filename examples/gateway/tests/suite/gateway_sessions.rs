//! Sessions across connections and gateways: resume on the same gateway, the Redis
//! session store, and what happens when it is down.

use crate::gateway_world::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumes_on_the_same_gateway_with_its_bindings() {
    let w = world(3, |_| {}).await;
    let p = w.player("resumer").await;
    let put = p
        .request(modules::INVENTORY, 1, &b"sword"[..])
        .await
        .unwrap();
    let welcome = w.disconnect(p).await;
    let again = w.resume(&welcome).await;
    assert_eq!(again.welcome.session, welcome.session);
    let home = last_word(&put);
    let bag = again
        .request(modules::INVENTORY, 2, Bytes::new())
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&bag), format!("sword on {home}"));
    // A wrong secret is refused.
    let mut bad = welcome.clone();
    bad.secret = "0".repeat(32);
    let e = GatewayClient::resume(w.gateway.local_addr(), &bad)
        .await
        .unwrap_err();
    assert_eq!(refusal(e), Refusal::BadResume);
}

/// Sessions in the Redis at `url`.
fn use_redis(s: &mut GatewaySettings, url: &str, window: Duration) {
    s.session_store = SessionStoreKind::Redis;
    s.redis_url = url.to_string();
    s.resume_window = window;
    s.redis_timeout = Duration::from_millis(500);
}

async fn redis_conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Two gateways on one Redis session store: the world's ("gw-a") and `b` ("gw-b").
struct OnRedis {
    redis: Redis,
    url: String,
    w: World,
    b: Gateway,
    /// A connection to the store, to read what the gateways wrote.
    c: redis::aio::MultiplexedConnection,
}

/// A Redis, and a world of `backends` whose two gateways keep sessions in it (resume
/// window 3 s).
async fn on_redis(backends: usize) -> OnRedis {
    let redis = Redis::start().unwrap();
    let url = redis.url();
    let window = Duration::from_secs(3);
    let w = world(backends, |s| use_redis(s, &url, window)).await;
    let b = w
        .another_gateway("gw-b", |s| use_redis(s, &url, window))
        .await;
    let c = redis_conn(&url).await;
    OnRedis {
        redis,
        url,
        w,
        b,
        c,
    }
}

/// The stored hash of session `id`.
async fn stored(c: &mut redis::aio::MultiplexedConnection, id: &str) -> HashMap<String, String> {
    redis::cmd("HGETALL")
        .arg(format!("{KEY_PREFIX}{id}"))
        .query_async(c)
        .await
        .unwrap()
}

/// Waits (up to 10 s) until session `id`'s stored hash satisfies `ok`.
async fn stored_until(
    c: &mut redis::aio::MultiplexedConnection,
    id: &str,
    what: &str,
    ok: impl Fn(&HashMap<String, String>) -> bool,
) -> HashMap<String, String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let h = stored(c, id).await;
        if ok(&h) {
            return h;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "stored session never {what}: {h:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumes_on_another_gateway_through_redis_and_its_backend_follows() {
    let OnRedis {
        redis: _redis,
        w,
        b,
        mut c,
        ..
    } = on_redis(3).await;

    // On gateway A: authenticate, put something in the bag (static binding), join a
    // room (keyed), get its snapshots.
    let p = w.player("roamer").await;
    assert_eq!(p.welcome.gateway, "gw-a");
    let put = p
        .request(modules::INVENTORY, 1, &b"sword"[..])
        .await
        .unwrap();
    let home = last_word(&put);
    p.request(modules::ROOM, 1, &b"r"[..]).await.unwrap();
    let f = next_push_of(&p, modules::ROOM, Some(9), Duration::from_secs(3))
        .await
        .expect("room snapshots through gateway A");
    assert!(String::from_utf8_lossy(&f.payload).starts_with("r snapshot"));
    let welcome = p.resume_ticket();
    // Redis holds the durable part: the binding, the group, a hash of the secret only.
    let h = stored_until(&mut c, &welcome.session, "bound and in its room", |h| {
        h.contains_key("b:inventory") && h.contains_key("g:room:r")
    })
    .await;
    assert_eq!(h["account"], "roamer");
    assert_eq!(h["gateway"], "gw-a");
    assert_eq!(h["secret"], secret_sha256(&welcome.secret));
    assert!(
        h.values().all(|v| !v.contains(&welcome.secret)),
        "the resume secret itself is never stored: {h:?}"
    );
    let ttl: i64 = redis::cmd("PTTL")
        .arg(format!("{KEY_PREFIX}{}", welcome.session))
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(ttl > 0 && ttl <= 3_000, "TTL = the resume window: {ttl} ms");

    // Disconnect, resume on gateway B.
    drop(p);
    w.detached(&welcome.session).await;
    let rebinds: u64 = w.backends.iter().map(|b| b.rebinds()).sum();
    let again = GatewayClient::resume(b.local_addr(), &welcome)
        .await
        .unwrap();
    // The push buffer stayed on A: B says at once it cannot tell what was missed.
    let gap = gateway_push(
        &again,
        op::GAP,
        Duration::from_secs(1),
        "a GAP after a resume on another gateway",
    )
    .await;
    assert_eq!(&gap.payload[..], b"1 ?");
    // (a) Same session, same binding: bag requests reach the same backend.
    assert_eq!(again.welcome.session, welcome.session);
    assert_eq!(again.welcome.gateway, "gw-b");
    for _ in 0..3 {
        let bag = again
            .request(modules::INVENTORY, 2, Bytes::new())
            .await
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&bag), format!("sword on {home}"));
    }
    // (b) The backend was told the new gateway: the room's snapshots come through B.
    let f = next_push_of(&again, modules::ROOM, Some(9), Duration::from_secs(3))
        .await
        .expect("room snapshots through gateway B");
    assert!(String::from_utf8_lossy(&f.payload).starts_with("r snapshot"));
    assert!(b.stats().pushed.load(Ordering::Relaxed) > 0);
    let home_backend = w.backends.iter().find(|b| b.id() == home).unwrap();
    assert!(home_backend.rebinds() >= 1);
    assert!(w.backends.iter().map(|b| b.rebinds()).sum::<u64>() > rebinds);
    // B holds it now.
    stored_until(&mut c, &welcome.session, "claimed by gw-b", |h| {
        h.get("gateway").map(String::as_str) == Some("gw-b")
    })
    .await;

    // (c) A wrong secret is refused on B (and on A).
    let mut bad = welcome.clone();
    bad.secret = "0".repeat(32);
    for gw in [b.local_addr(), w.gateway.local_addr()] {
        let e = GatewayClient::resume(gw, &bad).await.unwrap_err();
        assert_eq!(refusal(e), Refusal::BadResume);
    }

    // A client still connected to A whose session is resumed on B: A learns it lost the
    // session (its next TTL refresh, a third of the window) and closes that connection.
    let q = w.player("twice").await;
    q.request(modules::LOBBY, 1, Bytes::new()).await.unwrap();
    stored_until(&mut c, &q.welcome.session, "written", |h| !h.is_empty()).await;
    let q2 = GatewayClient::resume(b.local_addr(), &q.welcome)
        .await
        .unwrap();
    // A finds out at its next TTL refresh (every third of the 3 s window) and kicks the
    // old connection: TAKEOVER.
    let kick = next_push_of(&q, GATEWAY_MODULE, Some(op::KICK), Duration::from_secs(3))
        .await
        .expect("gateway A kept a session gateway B took over");
    assert_eq!(kick_code(&kick), 3, "{kick:?}");
    tokio::time::timeout(Duration::from_secs(2), q.closed())
        .await
        .expect("closed after the kick");
    let who = q2.request(modules::LOBBY, 1, Bytes::new()).await.unwrap();
    assert!(String::from_utf8_lossy(&who).starts_with("twice@"));
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_store_resumes_only_on_the_gateway_holding_the_session() {
    let w = world(1, |_| {}).await;
    let b = w.another_gateway("gw-b", |_| {}).await;
    let p = w.player("homebody").await;
    p.request(modules::ROOM, 1, &b"r"[..]).await.unwrap();
    let welcome = w.disconnect(p).await;
    let e = GatewayClient::resume(b.local_addr(), &welcome)
        .await
        .unwrap_err();
    assert_eq!(refusal(e), Refusal::BadResume);
    let again = w.resume(&welcome).await;
    assert_eq!(again.welcome.session, welcome.session);
    // Resumed on the same gateway, the backend is told too.
    let f = next_push_of(&again, modules::ROOM, Some(9), Duration::from_secs(3)).await;
    assert!(
        f.is_some(),
        "room snapshots after a resume on the same gateway"
    );
    until("a rebind", Duration::from_secs(3), || {
        w.backends[0].rebinds() > 0
    })
    .await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_resumes_are_refused_with_a_reason_and_traffic_goes_on() {
    let OnRedis {
        mut redis,
        url,
        w,
        b,
        mut c,
    } = on_redis(1).await;
    let gone = w.player("gone").await;
    let stays = w.player("stays").await;
    let home = last_word(
        &stays
            .request(modules::INVENTORY, 1, &b"sword"[..])
            .await
            .unwrap(),
    );
    stays.request(modules::ROOM, 1, &b"r"[..]).await.unwrap();
    for id in [&gone.welcome.session, &stays.welcome.session] {
        stored_until(&mut c, id, "written", |h| !h.is_empty()).await;
    }
    let gone_welcome = gone.welcome.clone();
    drop(gone);
    drop(c);

    redis.kill();
    // A resume needs the store: refused, with the reason.
    let e = GatewayClient::resume(b.local_addr(), &gone_welcome)
        .await
        .unwrap_err();
    match &e {
        ClientError::Refused(text) => assert!(text.contains("session store unavailable"), "{text}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(refusal(e), Refusal::StoreUnavailable);
    // Everything else goes on: requests, bound requests, new logins, room changes.
    for _ in 0..3 {
        let who = stays
            .request(modules::LOBBY, 1, Bytes::new())
            .await
            .unwrap();
        assert_eq!(&who[..], b"stays@be-0");
    }
    stays.request(modules::ROOM, 1, &b"r2"[..]).await.unwrap();
    let bag = stays
        .request(modules::INVENTORY, 2, Bytes::new())
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&bag), format!("sword on {home}"));
    let newcomer = w.player("newcomer").await;
    newcomer
        .request(modules::LOBBY, 1, Bytes::new())
        .await
        .unwrap();
    let on_b = GatewayClient::auth(b.local_addr(), &w.token("on-b"))
        .await
        .unwrap();
    on_b.request(modules::LOBBY, 1, Bytes::new()).await.unwrap();

    // Redis back, empty (no persistence): connected sessions are written again (the
    // TTL refresh finds them missing), with what changed meanwhile, and resume anywhere.
    tokio::task::block_in_place(|| redis.restart()).unwrap();
    let mut c = redis_conn(&url).await;
    stored_until(&mut c, &stays.welcome.session, "written again", |h| {
        h.contains_key("g:room:r2")
    })
    .await;
    let welcome = w.disconnect(stays).await;
    let again = GatewayClient::resume(b.local_addr(), &welcome)
        .await
        .unwrap();
    let bag = again
        .request(modules::INVENTORY, 2, Bytes::new())
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&bag), format!("sword on {home}"));
    b.shutdown().await;
}
