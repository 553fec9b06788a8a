//! `tc-server` registers itself in a real etcd (Seata's etcd3 layout), an `RpcClient`
//! discovers it there, and SIGTERM unregisters it. Needs the `etcd` feature (or
//! `all-registries`, which scripts/test.sh turns on) and the `etcd` binary
//! (scripts/install-test-deps.sh).

mod common;

use std::time::Duration;

use common::{TcProcess, seata_tm, until};
use meshline::Config;
use meshline::rpc::message::{GlobalEndRequest, SeataMessage};
use meshline::rpc::{CallOptions, Payload, RpcClient};
use meshline_testkit::Etcd;

/// A GlobalStatus request: every TC answers it, tagged with its id.
fn status_request(xid: &str) -> Payload {
    Payload::seata(&SeataMessage::GlobalStatus(GlobalEndRequest::new(xid))).unwrap()
}

/// Which TC answers a GlobalStatus of `xid` sent to the TC the XID names.
async fn answering_tc(client: &RpcClient, xid: &str) -> Option<String> {
    let r = client
        .call(status_request(xid), CallOptions::xid(xid))
        .await
        .unwrap();
    r.payload.head.get("tc").map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tc_servers_register_in_etcd_and_unregister_on_sigterm() {
    let etcd = Etcd::start().expect("start etcd");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tc.properties");
    std::fs::write(
        &file,
        format!(
            "registry.type=etcd3\n\
             registry.etcd3.serverAddr={}\n\
             service.vgroupMapping.default_tx_group=default\n",
            etcd.endpoint()
        ),
    )
    .unwrap();

    let mut leaving = TcProcess::start("etcd-tc-1", 0, Some(&file));
    let staying = TcProcess::start("etcd-tc-2", 0, Some(&file));
    let (port, port2) = (leaving.addr.port(), staying.addr.port());

    // The client side exactly as an application opens it: the facade's registry
    // factory, then a Discovery over it.
    let config = Config::load(Some(&file)).unwrap();
    let registry = meshline::registry::from_config(&config).await.unwrap();
    let client = RpcClient::builder()
        .config(&config)
        .discovery(
            meshline::Discovery::from_config(registry.clone(), &config),
            "default_tx_group",
        )
        .handshake(seata_tm())
        .build()
        .await
        .unwrap();
    client
        .wait_alive(2, Duration::from_secs(10))
        .await
        .expect("both tc-servers found through etcd");
    let mut ports: Vec<u16> = client
        .alive()
        .endpoints()
        .iter()
        .map(|e| e.instance.port())
        .collect();
    ports.sort_unstable();
    let mut want = vec![port, port2];
    want.sort_unstable();
    assert_eq!(ports, want);
    assert_eq!(
        answering_tc(&client, &format!("127.0.0.1:{port}:1")).await,
        Some("etcd-tc-1".to_string())
    );

    let pid = leaving.child.as_ref().unwrap().id();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut leaving_child = leaving.child.take().unwrap();
    let exit = tokio::task::spawn_blocking(move || leaving_child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "tc-server exit: {exit:?}");
    // Unregistered: the registry lists only the other TC and the client follows that.
    // (Had the last TC left, empty-list protection would keep the old list.)
    let listed: Vec<u16> = registry
        .lookup("default")
        .await
        .unwrap()
        .iter()
        .map(|i| i.port())
        .collect();
    assert_eq!(listed, vec![port2]);
    until(Duration::from_secs(5), || {
        client.endpoints().len() == 1 && client.endpoints()[0].instance.port() == port2
    })
    .await
    .expect("client still follows the unregistered TC");
    assert_eq!(
        answering_tc(&client, &format!("127.0.0.1:{port}:2")).await,
        Some("etcd-tc-2".to_string())
    );
}
