//! ZookeeperRegistry against a real ZooKeeper started by meshline-testkit.

mod common;

use std::time::Duration;

use common::*;
use meshline_registry_core::{Config, RegistryService};
use meshline_registry_others::ZookeeperRegistry;
use meshline_registry_others::zookeeper::instance_path;
use meshline_testkit::ZooKeeper;
use zookeeper_client as zk;

const SESSION: Duration = Duration::from_secs(4);

fn config(connect: &str, empty_protection: bool) -> Config {
    let mut c = Config::default();
    c.registry.kind = "zk".into();
    c.registry.zk.server_addr = connect.to_string();
    c.registry.zk.session_timeout = SESSION;
    c.registry.zk.connect_timeout = Duration::from_secs(2);
    c.registry.empty_protection = empty_protection;
    c
}

async fn raw(connect: &str) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(connect)
        .await
        .expect("raw zookeeper client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_lookup_watch_unregister_round_trip() {
    init_logs();
    let zk = ZooKeeper::start().expect("zookeeper");
    let server = ZookeeperRegistry::connect(&config(&zk.connect_string(), false))
        .await
        .unwrap();
    let client = ZookeeperRegistry::connect(&config(&zk.connect_string(), false))
        .await
        .unwrap();
    assert_eq!(client.kind(), "zk");
    // Missing cluster path: empty, not an error.
    assert!(client.lookup("default").await.unwrap().is_empty());
    let mut w = client.watch("default").await.unwrap();
    assert!(w.next().await.unwrap().is_empty());

    let a = inst("127.0.0.1:8091");
    let b = inst("[::1]:8092");
    server.register("default", &a).await.unwrap();
    server.register("default", &b).await.unwrap();
    wait_for(&mut w, Duration::from_secs(5), "a and b", |s| s.len() == 2).await;
    let found = client.lookup("default").await.unwrap();
    assert_eq!(found.len(), 2);
    assert!(found.contains(&a) && found.contains(&b));
    // Registering twice is fine (same session owns the node).
    server.register("default", &a).await.unwrap();

    server.unregister("default", &a).await.unwrap();
    let s = wait_for(&mut w, Duration::from_secs(5), "only b", |s| s.len() == 1).await;
    assert_eq!(addrs(&s), vec!["[::1]:8092"]);
    server.unregister("default", &b).await.unwrap();
    wait_for(&mut w, Duration::from_secs(5), "empty", |s| s.is_empty()).await;

    server.register("default", &a).await.unwrap();
    wait_for(&mut w, Duration::from_secs(5), "a again", |s| s.len() == 1).await;
    server.close().await.unwrap();
    wait_for(&mut w, Duration::from_secs(5), "empty after close", |s| {
        s.is_empty()
    })
    .await;
    assert!(server.register("default", &a).await.is_err());
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seata_layout_both_ways_and_garbage_is_skipped() {
    init_logs();
    let zk = ZooKeeper::start().expect("zookeeper");
    let raw = raw(&zk.connect_string()).await;
    // What a Seata TC writes: persistent parents, ephemeral child with data "true".
    let dir = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let eph = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    raw.mkdir("/registry/zk/default", &dir).await.unwrap();
    raw.create("/registry/zk/default/172.0.0.1:8091", b"true", &eph)
        .await
        .unwrap();
    raw.create(
        "/registry/zk/default/2000:0:0:0:1:2345:6789:abcd:8091",
        b"true",
        &eph,
    )
    .await
    .unwrap();
    raw.create("/registry/zk/default/not-an-address", b"true", &eph)
        .await
        .unwrap();

    let reg = ZookeeperRegistry::connect(&config(&zk.connect_string(), true))
        .await
        .unwrap();
    let mut w = reg.watch("default").await.unwrap();
    let s = w.next().await.unwrap();
    assert_eq!(
        addrs(&s),
        vec!["172.0.0.1:8091", "[2000::1:2345:6789:abcd]:8091"]
    );
    // More garbage and a good node through the watch.
    raw.create("/registry/zk/default/10.0.0.9:0", b"true", &eph)
        .await
        .unwrap();
    raw.create("/registry/zk/default/10.0.0.5:8091", b"true", &eph)
        .await
        .unwrap();
    let s = wait_for(&mut w, Duration::from_secs(5), "10.0.0.5", |s| s.len() == 3).await;
    assert!(addrs(&s).contains(&"10.0.0.5:8091".to_string()));

    // What we register is Seata's layout, read by the raw client.
    let me = inst("[2000::1:2345:6789:abcd]:8092");
    reg.register("prod", &me).await.unwrap();
    let path = "/registry/zk/prod/2000:0:0:0:1:2345:6789:abcd:8092";
    assert_eq!(instance_path("prod", &me), path);
    let (data, stat) = raw.get_data(path).await.unwrap();
    assert_eq!(data, b"true");
    assert_eq!(
        stat.ephemeral_owner,
        reg.session_id(),
        "must be ephemeral, ours"
    );
    let parent = raw.check_stat("/registry/zk/prod").await.unwrap().unwrap();
    assert_eq!(parent.ephemeral_owner, 0, "parents are persistent");
    reg.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_kill_9_of_the_server() {
    init_logs();
    let zk = ZooKeeper::start().expect("zookeeper");
    let cs = zk.connect_string();
    let server = ZookeeperRegistry::connect(&config(&cs, true))
        .await
        .unwrap();
    let client = ZookeeperRegistry::connect(&config(&cs, true))
        .await
        .unwrap();
    let me = inst("10.1.1.1:8091");
    server.register("default", &me).await.unwrap();
    let mut w = client.watch("default").await.unwrap();
    wait_for(&mut w, Duration::from_secs(5), "registered", |s| {
        s.len() == 1
    })
    .await;

    // Down 5 s > session timeout 4 s: the sessions are rebuilt, our node re-created.
    let zk = survive_outage(&mut w, zk, Duration::from_secs(5), Duration::from_secs(20)).await;
    let raw = raw(&zk.connect_string()).await;
    let path = instance_path("default", &me);
    eventually(
        Duration::from_secs(15),
        "our node owned by our live session",
        || {
            let raw = raw.clone();
            let path = path.clone();
            let sid = server.session_id();
            async move {
                matches!(raw.check_stat(&path).await, Ok(Some(st)) if st.ephemeral_owner == sid)
            }
        },
    )
    .await;
    // Stays there, and the watch still follows changes.
    tokio::time::sleep(SESSION + Duration::from_secs(1)).await;
    assert_eq!(client.lookup("default").await.unwrap(), vec![me.clone()]);
    server
        .register("default", &inst("10.1.1.2:8091"))
        .await
        .unwrap();
    wait_for(&mut w, Duration::from_secs(5), "new member", |s| {
        s.len() == 2
    })
    .await;
    assert_eq!(addrs(&w.current()), vec!["10.1.1.1:8091", "10.1.1.2:8091"]);
    server.close().await.unwrap();
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_session_is_rebuilt_and_the_node_comes_back() {
    init_logs();
    let mut zk = ZooKeeper::start().expect("zookeeper");
    let cs = zk.connect_string();
    let reg = ZookeeperRegistry::connect(&config(&cs, false))
        .await
        .unwrap();
    let me = inst("10.2.2.2:8091");
    reg.register("default", &me).await.unwrap();
    let old_session = reg.session_id();
    let mut w = reg.watch("default").await.unwrap();
    wait_for(&mut w, Duration::from_secs(5), "registered", |s| {
        s.len() == 1
    })
    .await;

    // Freeze the server past the session timeout: the session expires.
    zk.pause().unwrap();
    wait_health(&mut w, SESSION * 2, false).await;
    tokio::time::sleep(SESSION + Duration::from_secs(1)).await;
    zk.resume().unwrap();

    let raw = raw(&cs).await;
    let path = instance_path("default", &me);
    eventually(Duration::from_secs(20), "node re-created by a new session", || {
        let raw = raw.clone();
        let path = path.clone();
        let sid = reg.session_id();
        async move {
            sid != old_session
                && matches!(raw.check_stat(&path).await, Ok(Some(st)) if st.ephemeral_owner == sid)
        }
    })
    .await;
    wait_health(&mut w, Duration::from_secs(10), true).await;
    let s = wait_for(&mut w, Duration::from_secs(5), "member back", |s| {
        s.len() == 1
    })
    .await;
    assert_eq!(addrs(&s), vec!["10.2.2.2:8091"]);
    // The re-armed watch follows changes made after the expiry.
    reg.register("default", &inst("10.2.2.3:8091"))
        .await
        .unwrap();
    wait_for(&mut w, Duration::from_secs(5), "second member", |s| {
        s.len() == 2
    })
    .await;
    reg.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_registrant_disappears_within_the_session_timeout() {
    init_logs();
    let zk = ZooKeeper::start().expect("zookeeper");
    let cs = zk.connect_string();
    let stable = ZookeeperRegistry::connect(&config(&cs, true))
        .await
        .unwrap();
    let doomed = ZookeeperRegistry::connect(&config(&cs, true))
        .await
        .unwrap();
    let watcher = ZookeeperRegistry::connect(&config(&cs, true))
        .await
        .unwrap();
    stable
        .register("default", &inst("10.3.3.1:1"))
        .await
        .unwrap();
    doomed
        .register("default", &inst("10.3.3.2:1"))
        .await
        .unwrap();
    let mut w = watcher.watch("default").await.unwrap();
    wait_for(&mut w, Duration::from_secs(5), "both", |s| s.len() == 2).await;
    assert_crash_removed_within(
        &mut w,
        "zookeeper",
        SESSION + Duration::from_secs(1),
        || {
            doomed.abandon();
            drop(doomed);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_credentials_are_sent() {
    init_logs();
    let zk = ZooKeeper::start().expect("zookeeper");
    // A cluster path only the digest user seata:s3cret may write under.
    let owner = zk::Client::connector()
        .with_auth("digest", b"seata:s3cret")
        .connect(&zk.connect_string())
        .await
        .unwrap();
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    owner.mkdir("/registry/zk", &open).await.unwrap();
    let creator_only = zk::CreateMode::Persistent.with_acls(zk::Acls::creator_all());
    owner
        .create("/registry/zk/secured", b"", &creator_only)
        .await
        .unwrap();

    let mut with_auth = config(&zk.connect_string(), true);
    with_auth.registry.zk.username = Some("seata".into());
    with_auth.registry.zk.password = Some("s3cret".into());
    let reg = ZookeeperRegistry::connect(&with_auth).await.unwrap();
    reg.register("secured", &inst("10.5.5.5:8091"))
        .await
        .unwrap();
    assert_eq!(
        reg.lookup("secured").await.unwrap(),
        vec![inst("10.5.5.5:8091")]
    );

    let stranger = ZookeeperRegistry::connect(&config(&zk.connect_string(), true))
        .await
        .unwrap();
    let refused = stranger.register("secured", &inst("10.5.5.6:8091")).await;
    assert!(
        refused.is_err(),
        "without credentials the ACL must refuse us"
    );
    reg.close().await.unwrap();
    stranger.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_string_with_a_dead_server_fails_over() {
    init_logs();
    let zk = ZooKeeper::start().expect("zookeeper");
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap().to_string();
    drop(dead);
    let cs = format!("{dead_addr},{}", zk.connect_string());
    let reg = ZookeeperRegistry::connect(&config(&cs, true))
        .await
        .unwrap();
    reg.register("default", &inst("10.7.7.7:8091"))
        .await
        .unwrap();
    let mut w = reg.watch("default").await.unwrap();
    assert_eq!(addrs(&w.next().await.unwrap()), vec!["10.7.7.7:8091"]);
    reg.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_registry_ends_its_tasks_and_removes_its_node() {
    init_logs();
    let zk = ZooKeeper::start().expect("zookeeper");
    let cs = zk.connect_string();
    let mut long_session = config(&cs, false);
    long_session.registry.zk.session_timeout = Duration::from_secs(30);
    let doomed = ZookeeperRegistry::connect(&long_session).await.unwrap();
    let watcher = ZookeeperRegistry::connect(&config(&cs, false))
        .await
        .unwrap();
    doomed
        .register("default", &inst("10.8.8.8:1"))
        .await
        .unwrap();
    let mut own = doomed.watch("default").await.unwrap();
    let mut w = watcher.watch("default").await.unwrap();
    wait_for(&mut w, Duration::from_secs(5), "registered", |s| {
        s.len() == 1
    })
    .await;
    drop(doomed);
    // Deleted at once, not after the 30 s session timeout.
    wait_for(&mut w, Duration::from_secs(5), "removed on drop", |s| {
        s.is_empty()
    })
    .await;
    own.next().await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(5), own.next()).await;
    assert!(
        matches!(end, Ok(Err(_))),
        "watch of a dropped registry must end: {end:?}"
    );
    watcher.close().await.unwrap();
}

/// `connect` establishes a session: with nothing listening, it fails with the connect
/// string and what a TCP connect to the server said, not just "zk registry: connect".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_an_error_naming_the_address_and_the_cause() {
    init_logs();
    let port = meshline_testkit::closed_port().unwrap();
    let server = format!("127.0.0.1:{port}");
    let t = std::time::Instant::now();
    let err = ZookeeperRegistry::connect(&config(&server, true))
        .await
        .unwrap_err();
    let text = err.to_string();
    eprintln!("after {:?}: {text}", t.elapsed());
    assert!(
        text.starts_with(&format!("zk registry at {server}: connect: ")),
        "{text}"
    );
    assert!(
        text.contains(&format!("{server}: Connection refused")),
        "{text}"
    );
    // Bounded by the session timeout plus the connect timeout (4 s + 2 s here), plus
    // the 1 s probe.
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
}
