//! The per-session push buffer: reliable pushes are numbered; a client that resumes says
//! the last number it got and receives what it missed, once, in order; what the buffer
//! no longer holds is reported as a `GAP`.

use crate::gateway_world::*;
use meshline_example_gateway::gateway::session::pushes::PushLimits;

/// The next `n` chat pushes of `p`: (number, text).
async fn chats(p: &GatewayClient, n: usize) -> Vec<(u32, String)> {
    let mut v = Vec::new();
    while v.len() < n {
        let f = next_push_of(p, modules::CHAT, Some(2), Duration::from_secs(3))
            .await
            .unwrap_or_else(|| panic!("chat push {} of {n}", v.len() + 1));
        v.push((f.seq, String::from_utf8_lossy(&f.payload).into_owned()));
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_sent_during_a_disconnect_is_replayed_once_after_resume() {
    let w = world(1, |_| {}).await;
    let alice = w.player("alice").await;
    let bob = w.player("bob").await;
    bob.request(modules::CHAT, 1, &b"one"[..]).await.unwrap();
    assert_eq!(chats(&alice, 1).await, [(1, "bob: one".to_string())]);
    assert_eq!(alice.last_push(), 1);
    // Alice drops; two chats while she is away.
    let ticket = w.disconnect(alice).await;
    assert_eq!(ticket.last_push, 1);
    bob.request(modules::CHAT, 1, &b"two"[..]).await.unwrap();
    bob.request(modules::CHAT, 1, &b"three"[..]).await.unwrap();
    chats(&bob, 3).await;
    let kept = w.gateway.session(&ticket.session).unwrap().kept_pushes();
    assert_eq!(kept, 3, "numbered pushes are kept whether connected or not");
    // She resumes: exactly the two she missed, in order, then live ones.
    let alice = w.resume(&ticket).await;
    let first = alice
        .next_push(Duration::from_secs(2))
        .await
        .expect("the replay");
    assert_eq!(
        (first.module, first.seq),
        (modules::CHAT, 2),
        "no GAP first: {first:?}"
    );
    assert_eq!(&first.payload[..], b"bob: two");
    assert_eq!(chats(&alice, 1).await, [(3, "bob: three".to_string())]);
    bob.request(modules::CHAT, 1, &b"four"[..]).await.unwrap();
    assert_eq!(chats(&alice, 1).await, [(4, "bob: four".to_string())]);
    assert!(
        alice.next_push(Duration::from_millis(200)).await.is_none(),
        "nothing replayed twice"
    );
    // Resuming again from the same point replays the same, from a later point nothing.
    let again = w.resume(&alice.resume_ticket()).await;
    assert!(again.next_push(Duration::from_millis(200)).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_that_no_longer_fit_the_buffer_are_reported_as_a_gap() {
    // "bob: message N" is 14 bytes of payload, 27 on the wire: 100 bytes keep three.
    let w = world(1, |s| {
        s.push_buffer = PushLimits {
            bytes: 100,
            age: Duration::from_secs(60),
        }
    })
    .await;
    let alice = w.player("alice").await;
    let bob = w.player("bob").await;
    let ticket = w.disconnect(alice).await;
    for i in 1..=7 {
        bob.request(modules::CHAT, 1, format!("message {i}"))
            .await
            .unwrap();
    }
    chats(&bob, 7).await;
    let alice = w.resume(&ticket).await;
    // 1..=4 fell out: a GAP says so, then 5, 6, 7.
    let gap = gateway_push(&alice, op::GAP, Duration::from_secs(2), "a GAP").await;
    assert_eq!(&gap.payload[..], b"1 4");
    let replayed = chats(&alice, 3).await;
    assert_eq!(
        replayed,
        (5..=7)
            .map(|i| (i, format!("bob: message {i}")))
            .collect::<Vec<_>>()
    );
    assert_eq!(alice.last_push(), 7);
}
