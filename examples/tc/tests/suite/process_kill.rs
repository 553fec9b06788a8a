//! RpcClient against real `tc-server` processes killed with SIGKILL.

use crate::common;
use crate::tx_world;

use std::sync::Arc;
use std::time::Duration;

use common::{TcProcess, seata_tm, until};
use meshline::rpc::message::{BranchType, GlobalBeginRequest, GlobalEndRequest, SeataMessage};
use meshline::rpc::{CallOptions, EndpointState, Payload, RpcClient, RpcError};
use meshline::{EmptyProtection, WatchHub};

fn seata(msg: SeataMessage) -> Payload {
    Payload::seata(&msg).unwrap()
}

/// A GlobalStatus request: every TC answers it (`Finished` for an XID it does not
/// know), tagged with its id.
fn status(xid: &str) -> Payload {
    seata(SeataMessage::GlobalStatus(GlobalEndRequest::new(xid)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_tc_leaves_alive_set_written_calls_say_maybe_delivered_and_restart_reconnects() {
    let survivor = TcProcess::start("survivor", 0, None);
    let mut victim = TcProcess::start("victim", 0, None);
    let victim_port = victim.addr.port();
    // The registry: an in-memory hub listing both TCs, never changed during the test,
    // so every membership change the client sees comes from connections alone.
    let hub = Arc::new(WatchHub::new("test", EmptyProtection::Apply));
    hub.publish("c", vec![survivor.instance(), victim.instance()]);
    let client = RpcClient::builder()
        .watch(hub.subscribe("c"), "c")
        .load_balance_name("XID")
        .handshake(seata_tm())
        .configure(|o| {
            o.backoff_initial = Duration::from_millis(50);
            o.backoff_max = Duration::from_millis(400);
            o.connect_timeout = Duration::from_millis(500);
            o.request_timeout = Duration::from_secs(10);
        })
        .build()
        .await
        .unwrap();
    client.wait_alive(2, Duration::from_secs(2)).await.unwrap();
    // An RM whose phase two takes 5 s: commits wait inside the victim that long.
    let slow = tx_world::Recorder {
        delay: Some(Duration::from_secs(5)),
        ..Default::default()
    };
    let rm = tx_world::rm(&hub, "stock", "db-a", slow, false, 2).await;

    // Calls parked inside the victim (written, waiting for a 5 s answer): global
    // commits of transactions begun there, each with a branch at the slow RM.
    let victim_xid = format!("127.0.0.1:{victim_port}:1");
    let mut parked = Vec::new();
    for i in 0..10 {
        let begin = seata(SeataMessage::GlobalBegin(GlobalBeginRequest {
            timeout_ms: 60_000,
            transaction_name: Some(format!("parked-{i}")),
        }));
        // Routed by an XID naming the victim, so the begin lands there.
        let r = client
            .call(begin, CallOptions::xid(&victim_xid))
            .await
            .unwrap();
        let Ok(SeataMessage::GlobalBeginResponse(b)) = r.payload.decode_seata() else {
            panic!("not a begin response")
        };
        let xid = b.xid.unwrap();
        assert!(
            xid.starts_with(&format!("127.0.0.1:{victim_port}:")),
            "{xid}"
        );
        // TCC: its commit waits for phase two (an AT commit is answered at once and
        // committed in the background, as Seata's TC does).
        rm.branch_register(&xid, BranchType::TCC, "db-a", None, None)
            .await
            .unwrap();
        let c = client.clone();
        parked.push(tokio::spawn(async move {
            let commit = seata(SeataMessage::GlobalCommit(GlobalEndRequest::new(&xid)));
            c.call(commit, CallOptions::xid(&xid)).await
        }));
    }
    // Steady traffic to the survivor all along.
    let c = client.clone();
    let survivor_xid = format!("127.0.0.1:{}:2", survivor.addr.port());
    let steady = tokio::spawn(async move {
        let mut n = 0;
        for _ in 0..200 {
            let r = c
                .call(status(&survivor_xid), CallOptions::xid(&survivor_xid))
                .await
                .expect("call to the surviving TC failed");
            assert_eq!(r.payload.head.get("tc"), Some("survivor"));
            n += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        n
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    victim.kill();
    until(Duration::from_secs(1), || !alive(&client, victim_port))
        .await
        .expect("SIGKILLed TC still alive after 1 s");

    for p in parked {
        let err = p.await.unwrap().expect_err("call parked in a killed TC");
        assert!(matches!(err, RpcError::MaybeDelivered { .. }), "{err}");
        assert!(err.to_string().contains("may have been delivered"), "{err}");
    }
    // New calls naming the dead TC go to the survivor.
    for _ in 0..20 {
        let r = client
            .call(status(&victim_xid), CallOptions::xid(&victim_xid))
            .await
            .unwrap();
        assert_eq!(r.endpoint.port(), survivor.addr.port());
    }
    assert_eq!(steady.await.unwrap(), 200);

    // Restart on the same port: reconnected (with backoff) and registered again.
    let _again = TcProcess::start("victim-2", victim_port, None);
    until(Duration::from_secs(3), || alive(&client, victim_port))
        .await
        .expect("restarted TC not reconnected");
    let r = client
        .call(status(&victim_xid), CallOptions::xid(&victim_xid))
        .await
        .unwrap();
    assert_eq!(r.payload.head.get("tc"), Some("victim-2"));
    let st = client
        .endpoints()
        .into_iter()
        .find(|e| e.instance.port() == victim_port)
        .unwrap();
    assert_eq!(st.state, EndpointState::Alive);
    assert_eq!(st.connects, 2);
    let stats = client.stats();
    // Exact counts, because every call and connection above has a known outcome:
    // - connects: the survivor once, the victim once before the kill and once after the
    //   restart (its own count is 2, checked above); the survivor's connection never
    //   breaks (the test is far shorter than the 15 s read-idle close), so 3 in all.
    //   (The RM is a client of its own, with its own counts.)
    // - reconnects: of those, the victim's second connection is the only one to an
    //   endpoint connected before.
    // - maybe_delivered: each of the 10 parked calls failed with MaybeDelivered (checked
    //   one by one above) and is counted once (a written call is never retried); every
    //   other call succeeded (`expect` / `unwrap`), so none adds to it.
    assert_eq!(stats.connects, 3, "{stats:?}");
    assert_eq!(stats.reconnects, 1, "{stats:?}");
    assert_eq!(stats.maybe_delivered, 10, "{stats:?}");
    // Not exact: how many reconnect attempts fail while the victim is down depends on
    // timing (jittered backoff from 50 ms to 400 ms over the time the victim is dead).
    // At least one does: the victim is down for well over the first backoff step.
    assert!(stats.connect_failures >= 1, "{stats:?}");
}

/// Whether the endpoint on `port` is in the client's alive set.
fn alive(client: &RpcClient, port: u16) -> bool {
    client
        .alive()
        .endpoints()
        .iter()
        .any(|e| e.instance.port() == port)
}
