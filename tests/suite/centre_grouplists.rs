//! Against a real etcd centre: the file registry reads its
//! grouplists from the same sources as the configuration (the file, the centre, the
//! environment), follows each of them, and a group that is not the file's
//! `txServiceGroup` is read from the centre as Seata's `getConfig` would.
//! A grouplist given by the centre or the environment survives every poll of the
//! file, and a Discovery asked for another group finds its mapping in etcd.
#![cfg(all(feature = "etcd", feature = "file"))]

use crate::support;

use std::time::Duration;

use meshline::centre::{discovery_from_live, live_config};
use meshline::{ConfigLoader, RegistryError, Watch};
use meshline_testkit::watch::{addrs, wait_for};
use support::{etcd_and_client, loader_on};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouplists_come_from_the_file_the_centre_and_the_environment_and_are_followed() {
    let (server, client) = etcd_and_client().await;
    let mut kv = client.kv_client();
    // The centre holds single keys only (no blob): a group the file does not name,
    // mapped to a cluster whose grouplist only the centre has.
    kv.put("service.vgroupMapping.g1", "c1", None)
        .await
        .unwrap();
    kv.put("service.c1.grouplist", "127.0.0.1:19001", None)
        .await
        .unwrap();
    kv.put("service.c2.grouplist", "127.0.0.1:19002", None)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("client.properties");
    std::fs::write(&file, "service.f.grouplist=127.0.0.1:19010\n").unwrap();
    let base = ConfigLoader::new()
        .file(&file)
        .env_vars([("MESHLINE_SERVICE__e__GROUPLIST", "127.0.0.1:19020")]);
    let live = live_config(loader_on(
        base,
        "etcd3",
        &[("serverAddr", server.endpoint())],
    ))
    .await
    .expect("the centre is read");
    let discovery = discovery_from_live(&live).await.expect("discovery");

    // A group that is not the file's txServiceGroup: mapping and grouplist from etcd.
    let found = discovery.lookup("g1").await.expect("g1 through the centre");
    assert_eq!(
        found.iter().map(|i| i.to_string()).collect::<Vec<_>>(),
        ["127.0.0.1:19001"]
    );
    let mut g1 = discovery.watch("g1").await.unwrap();
    let registry = discovery.registry().clone();
    let env = registry.watch("e").await.expect("env-given cluster");
    let mut f = registry.watch("f").await.expect("file-given cluster");
    assert_eq!(addrs(&env.current()), ["127.0.0.1:19020"]);
    assert_eq!(addrs(&f.current()), ["127.0.0.1:19010"]);
    let env_rev = env.current().revision();

    // A change in the centre: the mapping moves g1 to c2.
    kv.put("service.vgroupMapping.g1", "c2", None)
        .await
        .unwrap();
    lists(&mut g1, "g1 on c2", "127.0.0.1:19002").await;
    // A change of c2's grouplist in the centre reaches the registry.
    kv.put("service.c2.grouplist", "127.0.0.1:19003", None)
        .await
        .unwrap();
    lists(&mut g1, "c2's new list", "127.0.0.1:19003").await;
    // An edit of the file, which also names `e`: seen, and the environment still wins.
    std::fs::write(
        &file,
        "service.f.grouplist=127.0.0.1:19011\nservice.e.grouplist=127.0.0.1:1\n",
    )
    .unwrap();
    lists(&mut f, "the file's edit", "127.0.0.1:19011").await;
    assert_eq!(addrs(&env.current()), ["127.0.0.1:19020"]);
    assert_eq!(
        env.current().revision(),
        env_rev,
        "the env-given list moved"
    );
    // A group the centre does not have either is still the mapping error.
    match discovery.lookup("nowhere").await {
        Err(RegistryError::MissingMapping { group }) => assert_eq!(group, "nowhere"),
        other => panic!("expected MissingMapping, got {other:?}"),
    }
    registry.close().await.unwrap();
}

/// Waits (3 s at most) for `w` to list `addr` alone; `what` names the change awaited.
async fn lists(w: &mut Watch, what: &str, addr: &str) {
    wait_for(w, Duration::from_secs(3), what, |s| addrs(s) == [addr]).await;
}
