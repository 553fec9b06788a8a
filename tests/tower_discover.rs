//! `meshline::tower::WatchDiscover` under a real tower balancer: membership changes in
//! the registry reach tower's p2c `Balance` and are seen in which services answer.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;

use meshline::tower::WatchDiscover;
use meshline::{EmptyProtection, Instance, InstanceKey, WatchHub};
use tower::balance::p2c::Balance;
use tower::discover::{Change, Discover};
use tower::load::PendingRequests;
use tower::load::completion::CompleteOnResponse;
use tower::util::BoxService;
use tower::{Service, ServiceExt};

fn inst(s: &str) -> Instance {
    Instance::parse(s).unwrap()
}

/// A member's service: answers every request with the member's address; counted by
/// requests pending, so p2c sends the next request to the member with fewer.
type Member = PendingRequests<BoxService<(), String, Infallible>>;

fn member(instance: &Instance) -> Member {
    let address = instance.to_string();
    let answer = tower::service_fn(move |_: ()| {
        let address = address.clone();
        async move { Ok::<_, Infallible>(address) }
    });
    PendingRequests::new(BoxService::new(answer), CompleteOnResponse::default())
}

/// Sends two requests through the balancer while both are pending, then collects who
/// answered. With two members and loads counted by pending requests, p2c sends the
/// second to the member the first did not go to: the answers are exactly the members.
async fn answers_of_two_held<D>(balance: &mut Balance<D, ()>) -> BTreeSet<String>
where
    D: Discover<Key = InstanceKey, Service = Member, Error = Infallible> + Unpin,
{
    let first = balance.ready().await.unwrap().call(());
    let second = balance.ready().await.unwrap().call(());
    let (a, b) = tokio::join!(first, second);
    [a.unwrap(), b.unwrap()].into_iter().collect()
}

fn set(addresses: &[&str]) -> BTreeSet<String> {
    addresses.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn a_tower_balancer_follows_the_registry() {
    let hub = WatchHub::new("test", EmptyProtection::Apply);
    hub.publish("game", vec![inst("10.0.0.1:7000"), inst("10.0.0.2:7000")]);
    let discover = WatchDiscover::new(hub.subscribe("game"), member);
    let mut balance: Balance<_, ()> = Balance::new(discover);

    assert_eq!(
        answers_of_two_held(&mut balance).await,
        set(&["10.0.0.1:7000", "10.0.0.2:7000"])
    );
    assert_eq!(balance.len(), 2);

    // 10.0.0.1 leaves, 10.0.0.3 joins: the next requests see it.
    hub.publish("game", vec![inst("10.0.0.2:7000"), inst("10.0.0.3:7000")]);
    assert_eq!(
        answers_of_two_held(&mut balance).await,
        set(&["10.0.0.2:7000", "10.0.0.3:7000"])
    );
    assert_eq!(balance.len(), 2);

    // Down to one member: every request goes to it.
    hub.publish("game", vec![inst("10.0.0.3:7000")]);
    for _ in 0..4 {
        let answer = balance.ready().await.unwrap().call(()).await.unwrap();
        assert_eq!(answer, "10.0.0.3:7000");
    }
    assert_eq!(balance.len(), 1);

    // The registry closes: the balancer keeps what it has.
    hub.close();
    drop(hub);
    let answer = balance.ready().await.unwrap().call(()).await.unwrap();
    assert_eq!(answer, "10.0.0.3:7000");
}

/// One change as tower's `Discover` yields it.
type Discovered<D> =
    Option<Result<Change<<D as Discover>::Key, <D as Discover>::Service>, <D as Discover>::Error>>;

/// The adapter's next change, as tower asks for it.
fn next_change<D: Discover + Unpin>(d: &mut D) -> impl Future<Output = Discovered<D>> + '_ {
    std::future::poll_fn(move |cx| Pin::new(&mut *d).poll_discover(cx))
}

/// The adapter's next change as text (`insert <key> <service>`, `remove <key>`, `end`),
/// so each expected change is one comparison.
async fn next_described<D>(d: &mut D) -> String
where
    D: Discover<Key = InstanceKey, Service = String, Error = Infallible> + Unpin,
{
    match next_change(d).await {
        Some(Ok(Change::Insert(k, s))) => format!("insert {k} {s}"),
        Some(Ok(Change::Remove(k))) => format!("remove {k}"),
        Some(Err(never)) => match never {},
        None => "end".into(),
    }
}

/// The changes themselves: inserts for the first members, insert and remove keyed by
/// identity, an insert (a replacement) when only the data changed, nothing for an
/// identical snapshot, and the end when the registry closes.
#[tokio::test]
async fn changes_are_keyed_by_identity() {
    let hub = WatchHub::new("test", EmptyProtection::Apply);
    hub.publish("c", vec![inst("10.0.0.1:1"), inst("10.0.0.2:2")]);
    let mut made = 0;
    let mut d = WatchDiscover::new(hub.subscribe("c"), |i: &Instance| {
        made += 1;
        format!("svc{made}:w{}", i.weight())
    });
    assert_eq!(next_described(&mut d).await, "insert 10.0.0.1:1 svc1:w1");
    assert_eq!(next_described(&mut d).await, "insert 10.0.0.2:2 svc2:w1");

    let heavier = Instance::new("10.0.0.2", 2).unwrap().with_weight(5);
    hub.publish("c", vec![heavier, inst("10.0.0.3:3")]);
    assert_eq!(next_described(&mut d).await, "insert 10.0.0.2:2 svc3:w5");
    assert_eq!(next_described(&mut d).await, "insert 10.0.0.3:3 svc4:w1");
    assert_eq!(next_described(&mut d).await, "remove 10.0.0.1:1");
    let members: Vec<String> = d.members().map(|i| i.to_string()).collect();
    assert_eq!(members, ["10.0.0.2:2", "10.0.0.3:3"]);

    hub.close();
    drop(hub);
    assert_eq!(next_described(&mut d).await, "end");
}
