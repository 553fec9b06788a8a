//! `tc-server` registers itself in a real etcd (Seata's etcd3 layout), an `RpcClient`
//! discovers it there, and SIGTERM unregisters it. Needs `--features etcd` and the
//! `etcd` binary (scripts/install-test-deps.sh).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::{seata_tm, until};
use meshline_registry_core::{Config, Discovery, RegistryService};
use meshline_registry_etcd::EtcdRegistry;
use meshline_rpc_client::{CallOptions, Payload, RpcClient};
use meshline_testkit::Etcd;

/// Kills and reaps the child on drop (a failing test must not leak servers).
struct Reaped(Option<std::process::Child>);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn_tc(id: &str, config: &std::path::Path) -> (Reaped, u16) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tc-server"))
        .args(["--id", id, "--port", "0", "--config"])
        .arg(config)
        .env("MESHLINE_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn tc-server");
    let mut banner = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    let port: u16 = banner
        .trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("bad banner `{banner}`"));
    (Reaped(Some(child)), port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tc_servers_register_in_etcd_and_unregister_on_sigterm() {
    let etcd = Etcd::start().expect("start etcd");
    let dir = std::env::temp_dir().join(format!("meshline-tc-etcd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tc.properties");
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

    let (mut leaving, port) = spawn_tc("etcd-tc-1", &file);
    let (_staying, port2) = spawn_tc("etcd-tc-2", &file);

    let config = Config::load(Some(&file)).unwrap();
    let registry: Arc<dyn RegistryService> =
        Arc::new(EtcdRegistry::connect(&config).await.unwrap());
    let client = RpcClient::builder()
        .config(&config)
        .discovery(
            Discovery::from_config(registry.clone(), &config),
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
    let r = client
        .call(
            Payload::new(&b"x"[..]),
            CallOptions::xid(&format!("127.0.0.1:{port}:1")),
        )
        .await
        .unwrap();
    assert_eq!(r.payload.head.get("tc"), Some("etcd-tc-1"));

    let status = Command::new("kill")
        .args(["-TERM", &leaving.0.as_ref().unwrap().id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut leaving_child = leaving.0.take().unwrap();
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
    let r = client
        .call(
            Payload::new(&b"x"[..]),
            CallOptions::xid(&format!("127.0.0.1:{port}:2")),
        )
        .await
        .unwrap();
    assert_eq!(r.payload.head.get("tc"), Some("etcd-tc-2"));
    let _ = std::fs::remove_dir_all(&dir);
}
