//! ZookeeperRegistry against a real ZooKeeper started by meshline-testkit: the
//! conformance suite (with its fault behaviours), then what is ZooKeeper's own (Seata's
//! node layout, session expiry, digest ACLs, connect strings).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use meshline_registry_core::{Config, Instance, RegistryService};
use meshline_registry_others::ZookeeperRegistry;
use meshline_registry_others::zookeeper::{cluster_path, instance_path};
use meshline_testkit::ZooKeeper;
use meshline_testkit::conformance::{
    Expiry, Garbage, Harness, Lifetime, REMOVAL_CLUSTER, RefuseRemoval, SeataLayout, Secrets,
    Unreachable,
};
use zookeeper_client as zk;

const SESSION: Duration = Duration::from_secs(4);

/// A config for `connect`: 4 s session timeout, 2 s connect timeout, empty protection
/// on; then `extra` keys.
fn config(connect: &str, extra: &[(&str, &str)]) -> Config {
    let base = [
        ("registry.type", "zk"),
        ("registry.zk.serverAddr", connect),
        ("registry.zk.sessionTimeout", "4s"),
        ("registry.zk.connectTimeout", "2s"),
        ("registry.empty-protection", "true"),
    ];
    meshline_testkit::config_of(&base, extra)
}

const UNPROTECTED: (&str, &str) = ("registry.empty-protection", "false");

struct ZkHarness {
    zk: ZooKeeper,
    /// A raw client of the server, made when first needed (again after a kill).
    raw: tokio::sync::Mutex<Option<zk::Client>>,
}

async fn harness() -> ZkHarness {
    init_logs();
    ZkHarness {
        zk: ZooKeeper::start().expect("zookeeper"),
        raw: Default::default(),
    }
}

meshline_testkit::conformance_harness!(ZkHarness {
    registry: ZookeeperRegistry,
    server: zk,
    // testkit's ZooKeeper allows sessions of up to 60 s.
    lifetime: Lifetime::set("registry.zk.sessionTimeout", "4s", "60s", SESSION),
    // Down longer than the session timeout: sessions are rebuilt, nodes re-created.
    resync_within: Duration::from_secs(20),
    config: |h, extra| config(&h.zk.connect_string(), extra),
    // The server expires a session the session timeout after it last heard from the
    // client (which pings several times per timeout), rounded up to its 500 ms tick;
    // the ephemeral node's deletion fires the watchers' child watch at once.
    expiry: Expiry::after(SESSION, Duration::from_millis(500)),
});

impl Garbage for ZkHarness {
    async fn put_garbage(&self, cluster: &str, round: u32) {
        let raw = self.client().await;
        let dir = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let parent = format!("/registry/zk/{cluster}");
        let _ = raw.mkdir(&parent, &dir).await;
        let names = match round {
            0 => ["not-an-address", "10.0.0.9:0"],
            _ => ["10.0.0.9:70000", "garbage-1"],
        };
        for name in names {
            raw.create(&format!("{parent}/{name}"), b"true", &dir)
                .await
                .unwrap();
        }
    }
}

/// `connect` establishes a session; with nothing listening it fails with the connect
/// string and what a TCP connect to the server said, within the session timeout plus
/// the connect timeout (4 s + 2 s here) and the 1 s probe.
impl Unreachable for ZkHarness {
    fn address_key(&self) -> &'static str {
        "registry.zk.serverAddr"
    }
    fn refused_within(&self) -> Duration {
        Duration::from_secs(8)
    }
}

/// An ACL on the cluster's node without DELETE refuses the delete of our node (ZooKeeper
/// checks a delete against the parent's ACL); the full ACL back allows it at once. A
/// 30 s session: the node must go because of the retried delete, not an expiry.
impl RefuseRemoval for ZkHarness {
    async fn removal_client(&self) -> ZookeeperRegistry {
        let cfg = self.config(&[
            ("registry.zk.sessionTimeout", "30s"),
            ("registry.zk.connectTimeout", "1s"),
        ]);
        ZookeeperRegistry::connect(&cfg).await.unwrap()
    }
    async fn refuse_removals(&mut self) {
        let all_but_delete = zk::Permission::READ
            | zk::Permission::WRITE
            | zk::Permission::CREATE
            | zk::Permission::ADMIN;
        self.set_cluster_acl(all_but_delete).await;
    }
    async fn allow_removals(&mut self) {
        self.set_cluster_acl(zk::Permission::ALL).await;
    }
    async fn holds(&self, cluster: &str, member: &Instance) -> bool {
        self.client()
            .await
            .check_stat(&instance_path(cluster, member))
            .await
            .unwrap()
            .is_some()
    }
    /// The connect timeout bounds each attempt.
    fn attempt_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }
    /// The delete, refused by the ACL.
    fn refusal(&self) -> &'static str {
        "delete: not authorized"
    }
}

/// ZooKeeper accepts any digest identity: the wrong password is refused by the ACL of
/// the path the right one created.
impl Secrets for ZkHarness {
    fn secrets(&self) -> [&'static str; 2] {
        ["Zk-Secret-5d2e8", "Zk-Wrong-9a4c1"]
    }
    fn with_secret(&self, secret: &str) -> Config {
        self.config(&[
            ("registry.zk.username", "seata"),
            ("registry.zk.password", secret),
            ("registry.zk.sessionTimeout", "30s"),
        ])
    }
    fn refusal(&self) -> &'static str {
        "not authorized"
    }
    /// ZooKeeper's client holds requests while disconnected: the lookup ends at the
    /// operation timeout (the connect timeout, 2 s here).
    fn down(&self) -> &'static str {
        "`list children` timed out after 2s"
    }
    /// The client library's own lines: the login (auth packets), the refusal and the
    /// reconnect.
    fn logged(&self) -> &'static [&'static str] {
        &["(Auth, None)", "NoAuth", "enter state Disconnected"]
    }
}

/// Seata's `/registry/zk/<cluster>/<ip>:<port>` nodes.
impl SeataLayout for ZkHarness {
    async fn put_member(&self, cluster: &str, addr: &str) {
        self.mkdir(&format!("/registry/zk/{cluster}/{addr}")).await;
    }
    /// A cluster holding only garbage, and an empty cluster path.
    async fn put_foreign(&self) {
        self.mkdir("/registry/zk/junk/not-an-address").await;
        self.mkdir("/registry/zk/default").await;
    }
    fn address(&self) -> String {
        self.zk.connect_string()
    }
    fn place_names(&self, cluster: &str) -> String {
        format!("/registry/zk/{cluster}")
    }
}

impl ZkHarness {
    /// The harness's raw client of the server, made when first needed.
    async fn client(&self) -> zk::Client {
        let mut raw = self.raw.lock().await;
        if raw.is_none() {
            *raw = Some(self::raw(&self.zk.connect_string()).await);
        }
        raw.clone().unwrap()
    }

    /// Gives anyone `permission` on the node of the conformance suite's removal
    /// cluster (open to anyone as our client created it, without credentials).
    async fn set_cluster_acl(&self, permission: zk::Permission) {
        let path = cluster_path(REMOVAL_CLUSTER);
        let acl = [zk::Acl::new(permission, zk::AuthId::anyone())];
        self.client()
            .await
            .set_acl(&path, &acl, None)
            .await
            .unwrap_or_else(|e| panic!("set the ACL of {path}: {e}"));
    }

    /// Creates `path` and its parents, persistent and open to anyone.
    async fn mkdir(&self, path: &str) {
        let raw = self.client().await;
        let dir = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        raw.mkdir(path, &dir).await.unwrap();
    }
}

meshline_testkit::conformance_tests!(harness() => round_trip, drop_ends_watches,
    crash_removed_within_ttl, outage_stale_resync, garbage_skipped, empty_protection,
    unreachable_is_named, refused_removal_retried, close_removes_a_refused_removal,
    close_meets_a_held_refusal, secrets_never_shown, nearby_lists_other_clusters);

async fn raw(connect: &str) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(connect)
        .await
        .expect("raw zookeeper client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seata_layout_both_ways() {
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

    let reg = client(&zk).await;
    let mut w = reg.watch("default").await.unwrap();
    let s = w.next().await.unwrap();
    assert_eq!(
        addrs(&s),
        vec!["172.0.0.1:8091", "[2000::1:2345:6789:abcd]:8091"]
    );
    // A TC registering later, through the watch.
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
async fn an_expired_session_is_rebuilt_and_the_node_comes_back() {
    init_logs();
    let mut zk = ZooKeeper::start().expect("zookeeper");
    let cs = zk.connect_string();
    let reg = ZookeeperRegistry::connect(&config(&cs, &[UNPROTECTED]))
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

    let with_auth = config(
        &zk.connect_string(),
        &[
            ("registry.zk.username", "seata"),
            ("registry.zk.password", "s3cret"),
        ],
    );
    let reg = ZookeeperRegistry::connect(&with_auth).await.unwrap();
    reg.register("secured", &inst("10.5.5.5:8091"))
        .await
        .unwrap();
    assert_eq!(
        reg.lookup("secured").await.unwrap(),
        vec![inst("10.5.5.5:8091")]
    );

    let stranger = client(&zk).await;
    let refused = stranger
        .register("secured", &inst("10.5.5.6:8091"))
        .await
        .expect_err("without credentials the ACL must refuse us")
        .to_string();
    assert!(refused.contains("create: not authorized"), "{refused}");
    reg.close().await.unwrap();
    stranger.close().await.unwrap();
}

/// A "dead" server for connect strings: accepts connections and closes them at once
/// (no ZooKeeper answer), counting them, so a test sees that it was tried.
fn dead_server() -> (String, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let tried = Arc::new(AtomicUsize::new(0));
    let count = tried.clone();
    // Lives until the test process ends.
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            count.fetch_add(1, Ordering::SeqCst);
            drop(conn);
        }
    });
    (addr, tried)
}

/// The client shuffles the connect string, so a connect may never try a given server:
/// with three dead servers and one live one, connects are repeated (each must work)
/// until the dead servers were tried at least once, which one connect does with
/// probability 3/4; twenty without are a failure (odds 4^-20 when fail-over works).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_string_with_a_dead_server_fails_over() {
    init_logs();
    let zk = ZooKeeper::start().expect("zookeeper");
    let dead: Vec<_> = (0..3).map(|_| dead_server()).collect();
    let mut servers: Vec<String> = dead.iter().map(|(a, _)| a.clone()).collect();
    servers.push(zk.connect_string());
    let cs = servers.join(",");
    let tried = || {
        dead.iter()
            .map(|(_, n)| n.load(Ordering::SeqCst))
            .sum::<usize>()
    };
    for attempt in 1..=20 {
        let reg = ZookeeperRegistry::connect(&config(&cs, &[]))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "connect {attempt} (dead servers tried {} times): {e}",
                    tried()
                )
            });
        reg.register("default", &inst("10.7.7.7:8091"))
            .await
            .unwrap();
        let mut w = reg.watch("default").await.unwrap();
        assert_eq!(addrs(&w.next().await.unwrap()), vec!["10.7.7.7:8091"]);
        reg.close().await.unwrap();
        if tried() > 0 {
            eprintln!("dead servers tried {} times in {attempt} connects", tried());
            return;
        }
    }
    panic!("20 connects never tried the dead servers of {cs}");
}

/// With credentials our cluster path and nodes are creator-all +
/// world-read: a client without them reads the members but can neither delete nor
/// overwrite them (with open ACLs anyone could).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_credentials_strangers_cannot_delete_our_nodes() {
    init_logs();
    let zk = ZooKeeper::start().expect("zookeeper");
    let reg = ZookeeperRegistry::connect(&config(
        &zk.connect_string(),
        &[
            ("registry.zk.username", "seata"),
            ("registry.zk.password", "s3cret"),
        ],
    ))
    .await
    .unwrap();
    let (me, path) = register_node(&reg, "guarded", "10.5.5.7:8091").await;
    let stranger = raw(&zk.connect_string()).await;
    let children = stranger
        .list_children("/registry/zk/guarded")
        .await
        .unwrap();
    assert_eq!(children, vec![me.to_java_string()], "world can read");
    let deleted = stranger.delete(&path, None).await;
    assert!(
        matches!(deleted, Err(zk::Error::NoAuth)),
        "a stranger deleted our node: {deleted:?}"
    );
    let written = stranger.set_data(&path, b"false", None).await;
    assert!(
        matches!(written, Err(zk::Error::NoAuth)),
        "a stranger wrote our node: {written:?}"
    );
    // Other clusters stay possible for other registrants: the shared roots are open.
    stranger
        .create(
            "/registry/zk/other",
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    assert_eq!(reg.lookup("guarded").await.unwrap(), vec![me.clone()]);
    reg.unregister("guarded", &me).await.unwrap();
    assert!(stranger.check_stat(&path).await.unwrap().is_none());
    reg.close().await.unwrap();
}

/// A client of `zk` with the tests' config.
async fn client(zk: &ZooKeeper) -> ZookeeperRegistry {
    ZookeeperRegistry::connect(&config(&zk.connect_string(), &[]))
        .await
        .unwrap()
}

/// Registers `addr` in `cluster` through `reg`: the instance and its node's path.
async fn register_node(reg: &ZookeeperRegistry, cluster: &str, addr: &str) -> (Instance, String) {
    let me = inst(addr);
    reg.register(cluster, &me).await.unwrap();
    let path = instance_path(cluster, &me);
    (me, path)
}

/// A node at our path that another session owns (a Java TC
/// registered on the same address) is not deleted by our unregister or close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_another_session_owns_is_not_deleted() {
    init_logs();
    let zk = ZooKeeper::start().expect("zookeeper");
    let reg = client(&zk).await;
    let (me, path) = register_node(&reg, "shared", "10.5.5.8:8091").await;
    // The other session takes the path over (as after our node went away).
    let java = raw(&zk.connect_string()).await;
    java.delete(&path, None).await.unwrap();
    let eph = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    java.create(&path, b"true", &eph).await.unwrap();
    let owner = java.session_id().0;

    reg.unregister("shared", &me).await.unwrap();
    let stat = java.check_stat(&path).await.unwrap();
    assert_eq!(
        stat.map(|s| s.ephemeral_owner),
        Some(owner),
        "unregister deleted another session's node"
    );
    // Registered again by us (the node exists: we leave it), then close.
    let (_, other_path) = register_node(&reg, "shared", "10.5.5.9:8091").await;
    java.delete(&other_path, None).await.unwrap();
    java.create(&other_path, b"true", &eph).await.unwrap();
    reg.close().await.unwrap();
    for p in [&path, &other_path] {
        let stat = java.check_stat(p).await.unwrap();
        assert_eq!(
            stat.map(|s| s.ephemeral_owner),
            Some(owner),
            "close deleted another session's node {p}"
        );
    }
}

/// Registering where another session's node sits (a Java TC on the
/// same address, or the process we replaced) never deletes it: the register waits for
/// the owner's session to go, then creates ours; a live owner makes it an error.
#[tokio::test]
async fn register_waits_for_another_sessions_node_and_never_deletes_it() {
    init_logs();
    let zk = ZooKeeper::start().expect("zookeeper");
    let reg = client(&zk).await;
    let java = raw(&zk.connect_string()).await;
    let eph = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    // Parents first (a registration of another address makes them).
    reg.register("taken", &inst("10.5.6.1:1")).await.unwrap();

    // A live owner: the register fails after its wait, the node is untouched.
    let me = inst("10.5.6.7:8091");
    let path = instance_path("taken", &me);
    java.create(&path, b"true", &eph).await.unwrap();
    let owner = java.session_id().0;
    let t0 = std::time::Instant::now();
    let err = reg.register("taken", &me).await.unwrap_err().to_string();
    assert!(err.contains("another live session"), "{err}");
    assert!(
        t0.elapsed() >= SESSION,
        "gave up before a session timeout: {:?}",
        t0.elapsed()
    );
    let stat = java.check_stat(&path).await.unwrap();
    assert_eq!(
        stat.map(|s| s.ephemeral_owner),
        Some(owner),
        "deleted another session's node"
    );

    // The owner goes away meanwhile: the register completes with our own node.
    let waiting = tokio::spawn({
        let reg = std::sync::Arc::new(reg);
        let me = me.clone();
        async move {
            let r = reg.register("taken", &me).await;
            (reg, r)
        }
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        !waiting.is_finished(),
        "it must wait while the other node is there"
    );
    java.delete(&path, None).await.unwrap();
    let (reg, r) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("register finishes once the other node is gone")
        .unwrap();
    r.unwrap();
    let stat = java.check_stat(&path).await.unwrap().expect("our node");
    assert_ne!(stat.ephemeral_owner, owner);
    reg.close().await.unwrap();
    assert!(
        java.check_stat(&path).await.unwrap().is_none(),
        "close removes ours"
    );
}
