//! Keyed modules (`kind: keyed`, the example's rooms): a room lives on one backend
//! whichever gateway its members use, and when that backend dies the room moves to
//! another one and every member is told (`MOVED`), on both gateways.

use std::collections::{HashMap as Map, HashSet};

use crate::gateway_world::*;

/// `<room> snapshot <n>` -> (room, n).
fn snapshot(f: &ClientFrame) -> (String, u64) {
    let text = String::from_utf8_lossy(&f.payload).into_owned();
    let mut parts = text.split(' ');
    let room = parts.next().unwrap_or_default().to_string();
    assert_eq!(parts.next(), Some("snapshot"), "{text}");
    (room, parts.next().unwrap_or_default().parse().unwrap())
}

/// The next `count` snapshots of `p`'s room (other pushes skipped).
async fn snapshots(p: &GatewayClient, count: usize) -> Vec<(String, u64)> {
    let mut v = Vec::new();
    while v.len() < count {
        let f = next_push_of(p, modules::ROOM, Some(9), Duration::from_secs(3))
            .await
            .expect("room snapshots");
        v.push(snapshot(&f));
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_room_lives_on_one_backend_with_members_on_two_gateways() {
    let w = world(3, |_| {}).await;
    let b = w.another_gateway("gw-b", |_| {}).await;
    const ROOMS: usize = 12;
    // Four members a room, two through each gateway.
    let mut members: Vec<(String, GatewayClient)> = Vec::new();
    let mut homes: Map<String, HashSet<String>> = Map::new();
    for r in 0..ROOMS {
        let room = format!("room{r}");
        for m in 0..4 {
            let account = format!("r{r}m{m}");
            let token = w.minter.mint(&account, Duration::from_secs(60));
            let gw = if m % 2 == 0 {
                w.gateway.local_addr()
            } else {
                b.local_addr()
            };
            let p = GatewayClient::auth(gw, &token).await.unwrap();
            let joined = p.request(modules::ROOM, 1, room.clone()).await.unwrap();
            let joined = String::from_utf8_lossy(&joined).into_owned();
            assert!(
                joined.starts_with(&format!("joined {room} on ")),
                "{joined}"
            );
            homes
                .entry(room.clone())
                .or_default()
                .insert(last_word(joined.as_bytes()));
            members.push((room.clone(), p));
        }
    }
    // One backend per room, whichever gateway the member came through.
    for (room, h) in &homes {
        assert_eq!(h.len(), 1, "{room} is on {h:?}");
    }
    let used: HashSet<&String> = homes.values().flatten().collect();
    assert!(used.len() >= 2, "12 rooms all on {used:?}");
    // Exactly one copy of each room, with its four members.
    let mut copies: Map<String, Vec<(String, usize)>> = Map::new();
    for be in &w.backends {
        for (room, _, n) in be.rooms() {
            copies
                .entry(room)
                .or_default()
                .push((be.id().to_string(), n));
        }
    }
    assert_eq!(copies.len(), ROOMS);
    for (room, c) in &copies {
        assert_eq!(c.len(), 1, "{room} has copies {c:?}");
        assert_eq!(c[0].1, 4, "{room}: {c:?}");
        assert!(homes[room].contains(&c[0].0), "{room}: {c:?}");
    }
    // Both gateways remember the same home for every room.
    for room in homes.keys() {
        let a = w.gateway.keys().remembered(modules::ROOM, room);
        assert!(a.is_some(), "{room}");
        assert_eq!(a, b.keys().remembered(modules::ROOM, room), "{room}");
    }
    // Every member sees one state: its room's snapshots, each number once, in order
    // (two copies fanned out to everyone would show `6, 6, 7, 7`).
    for (room, p) in &members {
        let seen = snapshots(p, 4).await;
        assert!(seen.iter().all(|(r, _)| r == room), "{room}: {seen:?}");
        assert!(
            seen.windows(2).all(|s| s[1].1 > s[0].1),
            "{room}: snapshots not strictly increasing: {seen:?}"
        );
    }
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_moves_when_its_backend_dies_and_its_members_are_told() {
    let mut w = world(2, |_| {}).await;
    let b = w.another_gateway("gw-b", |_| {}).await;
    let mut members = Vec::new();
    for m in 0..4 {
        let token = w.minter.mint(&format!("m{m}"), Duration::from_secs(60));
        let gw = if m % 2 == 0 {
            w.gateway.local_addr()
        } else {
            b.local_addr()
        };
        let p = GatewayClient::auth(gw, &token).await.unwrap();
        p.request(modules::ROOM, 1, &b"arena"[..]).await.unwrap();
        members.push(p);
    }
    let home = {
        let state = members[0]
            .request(modules::ROOM, 2, &b"arena"[..])
            .await
            .unwrap();
        let state = String::from_utf8_lossy(&state).into_owned();
        assert!(state.contains(" 4 members on "), "{state}");
        last_word(state.as_bytes())
    };
    for p in &members {
        snapshots(p, 2).await;
    }
    let idx = w.backends.iter().position(|be| be.id() == home).unwrap();
    let survivor = w.backends[1 - idx].id().to_string();
    assert!(
        w.backends[1 - idx].rooms().is_empty(),
        "the survivor held no copy of the room"
    );
    w.backends.remove(idx).kill();
    // Every member is told, through its own gateway: MOVED `3 arena`, a numbered push.
    for (i, p) in members.iter().enumerate() {
        let moved = next_push_of(p, GATEWAY_MODULE, Some(op::MOVED), Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("member {i} was not told the room moved"));
        assert_eq!(&moved.payload[..], b"3 arena");
        assert!(moved.seq > 0, "MOVED is numbered: {moved:?}");
        assert_eq!(p.last_push(), moved.seq);
    }
    assert_eq!(w.gateway.keys().moved_total(), 1);
    assert_eq!(b.keys().moved_total(), 1);
    // The room lives on the survivor now, afresh, with all four members: both gateways
    // handed theirs over.
    until(
        "the room on the survivor with its members",
        Duration::from_secs(3),
        || {
            w.backends[0]
                .rooms()
                .iter()
                .any(|(r, _, n)| r == "arena" && *n == 4)
        },
    )
    .await;
    for p in &members {
        let state = p.request(modules::ROOM, 2, &b"arena"[..]).await.unwrap();
        let state = String::from_utf8_lossy(&state).into_owned();
        assert!(
            state.ends_with(&format!("4 members on {survivor}")),
            "{state}"
        );
        // Its pushes keep coming, from the one copy.
        let seen = snapshots(p, 3).await;
        assert!(seen.windows(2).all(|s| s[1].1 > s[0].1), "{seen:?}");
    }
    assert_eq!(
        w.gateway
            .keys()
            .remembered(modules::ROOM, "arena")
            .map(|k| k.port),
        Some(w.backends[0].local_addr().port())
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_whose_home_changes_is_dropped_by_its_old_backend() {
    // One backend, a room on it; a second backend joins and wins the room (or not: the
    // rendezvous score decides). When it wins, the room moves there, the first backend
    // drops its copy, and the member is told; either way there is one copy.
    let mut w = world(1, |_| {}).await;
    let p = w.player("mover").await;
    // Rooms until one would move to the newcomer: join several, so that at least one
    // does (each moves with probability 1/2).
    for r in 0..16 {
        p.request(modules::ROOM, 1, format!("hall{r}"))
            .await
            .unwrap();
    }
    let newcomer = w.add_backend("be-new").await;
    wait_alive(&w.gateway, "room", 2, Duration::from_secs(5)).await;
    until("the moves made", Duration::from_secs(5), || {
        w.gateway.keys().moved_total() > 0
            && newcomer.rooms().len() as u64 == w.gateway.keys().moved_total()
    })
    .await;
    let moved = w.gateway.keys().moved_total() as usize;
    assert!((1..16).contains(&moved), "{moved} of 16 rooms moved");
    // Every room has exactly one copy.
    until("one copy of each room", Duration::from_secs(3), || {
        w.backends[0].rooms().len() + newcomer.rooms().len() == 16
    })
    .await;
    let mut told = 0;
    while let Some(f) = next_push_of(
        &p,
        GATEWAY_MODULE,
        Some(op::MOVED),
        Duration::from_millis(300),
    )
    .await
    {
        assert!(
            String::from_utf8_lossy(&f.payload).starts_with("3 hall"),
            "{f:?}"
        );
        told += 1;
    }
    assert_eq!(told, moved);
    w.backends.push(newcomer);
}

/// How many members room `room` has on the backends (every copy summed: there is one).
fn members_of(w: &World, room: &str) -> usize {
    w.backends
        .iter()
        .flat_map(|be| be.rooms())
        .filter(|(r, _, _)| r == room)
        .map(|(_, _, n)| n)
        .sum()
}

/// A session that ends leaves its rooms at once, however it ends: replaced by a new
/// login of its account (`duplicate-login: kick-old`), or detached past the resume
/// window (the expiry timer). The backend hears it from the gateway (`cmd=ended`);
/// before, a room kept every member it ever had until they sent a leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_ends_leaves_its_rooms_at_once() {
    let window = Duration::from_millis(500);
    let w = world(2, |s| s.resume_window = window).await;
    let room = "hall".to_string();
    let stay = w.player("stay").await;
    let replaced = w.player("twice").await;
    let leaving = w.player("gone").await;
    for p in [&stay, &replaced, &leaving] {
        p.request(modules::ROOM, 1, room.clone()).await.unwrap();
    }
    assert_eq!(members_of(&w, &room), 3);
    let ended_before: u64 = w.backends.iter().map(|b| b.ended()).sum();

    // The account logs in again: its first session ends, and leaves the room.
    let _again = w.player("twice").await;
    until(
        "the replaced session left the room",
        Duration::from_secs(1),
        || members_of(&w, &room) == 2,
    )
    .await;

    // A client gone for good: its session ends when the window is over.
    let gone = leaving.welcome.session.clone();
    drop(leaving);
    w.detached(&gone).await;
    until(
        "the expired session left the room",
        window + Duration::from_secs(2),
        || members_of(&w, &room) == 1,
    )
    .await;
    let state = stay.request(modules::ROOM, 2, room.clone()).await.unwrap();
    let state = String::from_utf8_lossy(&state);
    assert!(state.contains(" 1 members on "), "{state}");
    // Each backend of the room cluster heard of both (and the other clusters' none).
    let ended: u64 = w.backends.iter().map(|b| b.ended()).sum::<u64>() - ended_before;
    assert!(ended >= 2, "{ended} sessions reported ended");
}
