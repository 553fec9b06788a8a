//! The backend commands of `gateway::wire` that other tests do not cover: `state`,
//! `join` / `leave`, `unbind`, `enable` after `disable`, and `load` over 90 refusing new
//! sessions (`kick` with and without `keep` is in gateway_kicks.rs). Each command is
//! one-way: the tests wait for its effect, never for a fixed time.

use crate::gateway_world::*;
use meshline::InstanceKey;

/// Sends `cmd` from `backend` on every connection the gateway holds to it.
async fn from_backend(backend: &GameBackend, cmd: impl Fn() -> meshline::rpc::Payload) {
    for c in backend.gateway_connections() {
        c.send_oneway(cmd()).await.unwrap();
    }
}

fn key_of(backend: &GameBackend) -> InstanceKey {
    meshline::Instance::new("127.0.0.1", backend.local_addr().port())
        .unwrap()
        .key()
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_sets_the_role_and_user_state_stamped_on_later_requests() {
    let w = world(1, |_| {}).await;
    let p = w.player("hero").await;
    let who = p.request(modules::LOBBY, 4, Bytes::new()).await.unwrap();
    assert_eq!(&who[..], b"role= state=");
    let sid = p.welcome.session.clone();
    let to_gateway = w.backends[0].gateway_connections().remove(0);
    to_gateway
        .send_oneway(
            command("state", "knight;guild=7").with_head(wire::TO, format!("{sid},not-a-session")),
        )
        .await
        .unwrap();
    let session = w.gateway.session(&sid).unwrap();
    until("the state set", Duration::from_secs(3), || {
        session.user_state() == "knight;guild=7"
    })
    .await;
    assert_eq!(session.role(), "knight");
    let who = p.request(modules::LOBBY, 4, Bytes::new()).await.unwrap();
    assert_eq!(&who[..], b"role=knight state=knight;guild=7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leave_takes_a_session_out_of_a_group_and_its_broadcasts() {
    let w = world(1, |_| {}).await;
    let p = w.player("member").await;
    let sid = p.welcome.session.clone();
    let to_gateway = w.backends[0].gateway_connections().remove(0);
    let send = async |cmd: meshline::rpc::Payload| to_gateway.send_oneway(cmd).await.unwrap();
    // `join` or `leave` of the guild, for this session.
    let guild = |cmd: &str| {
        command(cmd, Bytes::new())
            .with_head(wire::TO, sid.clone())
            .with_head(wire::GROUP, "guild")
    };
    let bcast = |group: &str, text: &str| {
        command("bcast", text.to_string())
            .with_head(wire::GROUP, group)
            .with_head(wire::MODULE, "1")
            .with_head(wire::OPCODE, "6")
    };
    // The payload of the next push, which must come within 2 s.
    let next = async |what: &str| {
        p.next_push(Duration::from_secs(2))
            .await
            .expect(what)
            .payload
    };
    send(guild("join")).await;
    send(bcast("guild", "for the guild")).await;
    assert_eq!(&next("the guild's").await[..], b"for the guild");
    send(guild("leave")).await;
    // On one connection, in order: the guild's broadcast would come before everyone's.
    send(bcast("guild", "not for you")).await;
    send(bcast("*", "for everyone")).await;
    assert_eq!(&next("everyone's").await[..], b"for everyone");
    assert!(w.gateway.session(&sid).unwrap().groups().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbind_returns_a_dynamic_module_to_balancing() {
    let w = world(3, |_| {}).await;
    let p = w.player("dyn").await;
    let id = w.bind(&p).await;
    let session = w.gateway.session(&p.welcome.session).unwrap();
    for _ in 0..6 {
        let who = p.request(modules::BIND, 2, Bytes::new()).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&who), id);
    }
    // Opcode 3 makes the backend send `unbind`.
    assert_eq!(
        &p.request(modules::BIND, 3, Bytes::new()).await.unwrap()[..],
        b"unbound"
    );
    until("unbound", Duration::from_secs(3), || {
        session.binding("m:4").is_none()
    })
    .await;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..6 {
        seen.insert(p.request(modules::BIND, 2, Bytes::new()).await.unwrap());
    }
    assert_eq!(seen.len(), 3, "round robin over the three again: {seen:?}");
}

/// The backends new static bindings go to, over `n` new players.
async fn homes_of_new_sessions(
    w: &World,
    n: usize,
    tag: &str,
) -> std::collections::HashSet<String> {
    let mut homes = std::collections::HashSet::new();
    for i in 0..n {
        let p = w.player(&format!("{tag}{i}")).await;
        let put = p.request(modules::INVENTORY, 1, &b"x"[..]).await.unwrap();
        homes.insert(last_word(&put));
    }
    homes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enable_after_disable_takes_new_sessions_again() {
    let w = world(2, |_| {}).await;
    let (be0, be1) = (&w.backends[0], &w.backends[1]);
    from_backend(be0, || command("disable", Bytes::new())).await;
    until("be-0 disabled", Duration::from_secs(3), || {
        w.gateway.refused_backends("inventory") == [key_of(be0)]
    })
    .await;
    let homes = homes_of_new_sessions(&w, 6, "d").await;
    assert_eq!(homes, [be1.id().to_string()].into());
    from_backend(be0, || command("enable", Bytes::new())).await;
    until("be-0 enabled", Duration::from_secs(3), || {
        w.gateway.refused_backends("inventory").is_empty()
    })
    .await;
    let homes = homes_of_new_sessions(&w, 6, "e").await;
    assert_eq!(homes.len(), 2, "both again: {homes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_over_90_refuses_new_sessions_and_a_lower_one_takes_them_again() {
    let w = world(2, |_| {}).await;
    let (be0, be1) = (&w.backends[0], &w.backends[1]);
    // 90 is not over 90.
    from_backend(be0, || command("load", "90")).await;
    let guard = w.gateway.protection().cluster("inventory").unwrap();
    until("the load recorded", Duration::from_secs(3), || {
        guard.reported_load(&key_of(be0)) == Some(90)
    })
    .await;
    assert!(w.gateway.refused_backends("inventory").is_empty());
    from_backend(be0, || command("load", "95")).await;
    until("be-0 overloaded", Duration::from_secs(3), || {
        w.gateway.refused_backends("inventory") == [key_of(be0)]
    })
    .await;
    let homes = homes_of_new_sessions(&w, 6, "o").await;
    assert_eq!(homes, [be1.id().to_string()].into());
    // A report that is not a number changes nothing: still refused once it was read
    // (a `state` sent after it on the same connections is the marker).
    let p = w.player("marker").await;
    let sid = p.welcome.session.clone();
    from_backend(be0, || command("load", "lots")).await;
    from_backend(be0, || {
        command("state", "read").with_head(wire::TO, sid.clone())
    })
    .await;
    let marker = w.gateway.session(&sid).unwrap();
    until("the marker", Duration::from_secs(3), || {
        marker.user_state() == "read"
    })
    .await;
    assert_eq!(w.gateway.refused_backends("inventory"), [key_of(be0)]);
    from_backend(be0, || command("load", "40")).await;
    until("be-0 back", Duration::from_secs(3), || {
        w.gateway.refused_backends("inventory").is_empty()
    })
    .await;
    let homes = homes_of_new_sessions(&w, 6, "n").await;
    assert_eq!(homes.len(), 2, "both again: {homes:?}");
}
