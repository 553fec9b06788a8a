//! A frozen TC (`tc-server` under SIGSTOP for 6 s): its kernel still accepts
//! connections, so a reconnect succeeds at once, but nothing answers. Alive means
//! answered: each client lets it go once, takes it back only after an answer (the TM
//! after its RegisterTM, a client without a handshake after a PING), and has it back
//! within 1 s of SIGCONT. Taking a reconnect for a return would put the frozen TC back
//! in the alive set after every reconnect and lose it again, every ~2 s.
//!
//! runs one at a time: it times a rejoin to within a second (and leaves the CPU idle
//! meanwhile).

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{TcProcess, seata_tm};
use meshline::rpc::RpcClient;
use meshline::{EmptyProtection, WatchHub};

const FROZEN: Duration = Duration::from_secs(6);
const BACK_WITHIN: Duration = Duration::from_secs(1);

/// Every change of `port`'s presence in `client`'s alive set: (when, present).
fn follow(client: &RpcClient, port: u16, base: Instant) -> Arc<Mutex<Vec<(Duration, bool)>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut rx = client.subscribe_alive();
    let out = seen.clone();
    tokio::spawn(async move {
        let mut was = true;
        while rx.changed().await.is_ok() {
            let present = rx.borrow().instances().iter().any(|i| i.port() == port);
            if present != was {
                out.lock().unwrap().push((base.elapsed(), present));
                was = present;
            }
        }
    });
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_tc_leaves_once_and_returns_only_when_it_answers() {
    let frozen = TcProcess::start("frozen", 0, None);
    let other = TcProcess::start("other", 0, None);
    let hub = Arc::new(WatchHub::new("test", EmptyProtection::Apply));
    hub.publish("c", vec![frozen.instance(), other.instance()]);
    let quick = |o: &mut meshline::rpc::ClientOptions| {
        o.backoff_initial = Duration::from_millis(50);
        o.backoff_max = Duration::from_millis(400);
        o.connect_timeout = Duration::from_millis(500);
    };
    let tm = RpcClient::builder()
        .watch(hub.subscribe("c"), "c")
        .load_balance_name("RoundRobinLoadBalance")
        .handshake(seata_tm())
        .configure(quick)
        .build()
        .await
        .unwrap();
    let plain = RpcClient::builder()
        .watch(hub.subscribe("c"), "c")
        .load_balance_name("RoundRobinLoadBalance")
        .configure(quick)
        .build()
        .await
        .unwrap();
    for c in [&tm, &plain] {
        c.wait_alive(2, Duration::from_secs(5)).await.unwrap();
    }
    let port = frozen.addr.port();
    let base = Instant::now();
    let seen = [
        ("TM", follow(&tm, port, base)),
        ("no handshake", follow(&plain, port, base)),
    ];

    frozen.signal("-STOP");
    tokio::time::sleep(FROZEN).await;
    let resumed = base.elapsed();
    frozen.signal("-CONT");
    let back = common::until(BACK_WITHIN + Duration::from_secs(2), || {
        seen.iter()
            .all(|(_, s)| s.lock().unwrap().last().is_some_and(|(_, p)| *p))
    })
    .await;

    for (who, s) in &seen {
        let s = s.lock().unwrap().clone();
        meshline_testkit::figures::report(
            "frozen_tc",
            &format!("{who}: left/rejoined at {s:?} (SIGCONT at {resumed:?})"),
        );
        let while_frozen: Vec<_> = s.iter().filter(|(t, _)| *t < resumed).collect();
        assert_eq!(
            while_frozen.iter().filter(|(_, p)| !p).count(),
            1,
            "{who}: left the alive set once while frozen: {s:?}"
        );
        assert!(
            while_frozen.iter().all(|(_, p)| !p),
            "{who}: the frozen TC rejoined while frozen: {s:?}"
        );
        let rejoined = s.iter().find(|(t, p)| *p && *t >= resumed).map(|(t, _)| *t);
        let rejoined = rejoined.unwrap_or_else(|| panic!("{who}: not back after SIGCONT: {s:?}"));
        assert!(
            rejoined - resumed <= BACK_WITHIN,
            "{who}: back {:?} after SIGCONT (bound {BACK_WITHIN:?})",
            rejoined - resumed
        );
    }
    assert!(back.is_some());
}
