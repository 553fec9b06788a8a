//! RpcClient against real `tc-server` processes killed with SIGKILL.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{alive_ports, hub, seata_tm, until};
use meshline_registry_core::Instance;
use meshline_rpc_client::{CallOptions, EndpointState, Payload, RpcClient, RpcError};

/// A `tc-server` child process, killed and reaped on drop.
struct TcProcess {
    child: Option<Child>,
    addr: SocketAddr,
}

impl TcProcess {
    fn start(id: &str, port: u16) -> TcProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tc-server"))
            .args(["--id", id, "--port", &port.to_string()])
            .env("MESHLINE_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn tc-server");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read tc-server banner");
        let addr = line
            .trim()
            .rsplit(' ')
            .next()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("unexpected tc-server banner `{line}`"));
        TcProcess {
            child: Some(child),
            addr,
        }
    }

    fn instance(&self) -> Instance {
        Instance::new("127.0.0.1", self.addr.port()).unwrap()
    }

    /// SIGKILL: no chance to close anything gracefully.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for TcProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_tc_leaves_alive_set_written_calls_say_maybe_delivered_and_restart_reconnects() {
    let survivor = TcProcess::start("survivor", 0);
    let mut victim = TcProcess::start("victim", 0);
    let victim_port = victim.addr.port();
    let hub = hub();
    hub.publish("c", vec![survivor.instance(), victim.instance()]);
    let client: RpcClient = common::builder(&hub, "XID")
        .handshake(seata_tm())
        .configure(|o| o.request_timeout = Duration::from_secs(10))
        .build()
        .await
        .unwrap();
    client.wait_alive(2, Duration::from_secs(2)).await.unwrap();

    // Calls parked inside the victim (written, waiting for a 5 s answer).
    let victim_xid = format!("127.0.0.1:{victim_port}:1");
    let mut parked = Vec::new();
    for _ in 0..10 {
        let c = client.clone();
        let xid = victim_xid.clone();
        parked.push(tokio::spawn(async move {
            c.call(
                Payload::new(&b"slow"[..]).with_head("delay_ms", "5000"),
                CallOptions::xid(&xid),
            )
            .await
        }));
    }
    // Steady traffic to the survivor all along.
    let c = client.clone();
    let survivor_xid = format!("127.0.0.1:{}:2", survivor.addr.port());
    let steady = tokio::spawn(async move {
        let mut n = 0;
        for _ in 0..200 {
            let r = c
                .call(Payload::new(&b"x"[..]), CallOptions::xid(&survivor_xid))
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
    until(Duration::from_secs(1), || {
        !alive_ports(&client).contains(&victim_port)
    })
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
            .call(Payload::new(&b"x"[..]), CallOptions::xid(&victim_xid))
            .await
            .unwrap();
        assert_eq!(r.endpoint.port(), survivor.addr.port());
    }
    assert_eq!(steady.await.unwrap(), 200);

    // Restart on the same port: reconnected (with backoff) and registered again.
    let _again = TcProcess::start("victim-2", victim_port);
    until(Duration::from_secs(3), || {
        alive_ports(&client).contains(&victim_port)
    })
    .await
    .expect("restarted TC not reconnected");
    let r = client
        .call(Payload::new(&b"x"[..]), CallOptions::xid(&victim_xid))
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
    assert!(stats.reconnects >= 1, "{stats:?}");
    assert!(stats.connect_failures >= 1, "{stats:?}");
    assert!(stats.maybe_delivered >= 10, "{stats:?}");
}
