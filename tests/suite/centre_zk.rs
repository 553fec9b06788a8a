//! `config.type=zk` against a real ZooKeeper (testkit): Seata's blob node and
//! single-key nodes are read (the blob over the file, the environment over all), a
//! `Discovery` follows a `service.vgroupMapping` change made through ZooKeeper's own
//! API within 2 s (blob and single key, and a node created after the start), an
//! unreachable centre is an error naming the address and the cause, and a digest
//! password never shows in errors or logs (a wrong one is ZooKeeper's NoAuth on the
//! node).
#![cfg(all(feature = "zookeeper", feature = "file"))]

use crate::support;

use std::time::Duration;

use meshline::centre::live_config;
use support::*;
use zookeeper_client as zk;

/// A ZooKeeper client of the test itself (no auth), to write Seata's nodes.
async fn admin(server: &meshline_testkit::ZooKeeper) -> zk::Client {
    zk::Client::connect(&server.connect_string())
        .await
        .expect("test client")
}

/// Creates or replaces the node `path` (parents created) with `data`.
async fn put(client: &zk::Client, path: &str, data: &str) {
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let parent = &path[..path.rfind('/').unwrap()];
    if !parent.is_empty() {
        client.mkdir(parent, &open).await.expect("parents");
    }
    match client.create(path, data.as_bytes(), &open).await {
        Ok(_) => {}
        Err(zk::Error::NodeExists) => {
            client
                .set_data(path, data.as_bytes(), None)
                .await
                .expect("set data");
        }
        Err(e) => panic!("create {path}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_centre_reads_and_follows_seata_nodes() {
    let server = meshline_testkit::ZooKeeper::start().expect("zookeeper");
    let client = admin(&server).await;
    let keys = || vec![("serverAddr", server.connect_string())];
    let single = format!("/seata/{MAPPING_KEY}");

    // The blob wins over the single key, as in Seata.
    put(&client, "/seata/seata.properties", &blob(Some("a"))).await;
    put(&client, &single, "b").await;
    environment_over_all("zk", &keys(), "a").await;
    let first = live(loader("zk", &keys()), "a").await;
    follows_change(&first, "zk blob", async {
        put(&client, "/seata/seata.properties", &blob(Some("b"))).await;
    })
    .await;
    drop(first);

    // Without the mapping in the blob, the single node `/seata/<key>` is read.
    put(&client, "/seata/seata.properties", &blob(None)).await;
    put(&client, &single, "a").await;
    let second = live(loader("zk", &keys()), "a").await;
    follows_change(&second, "zk single key", async {
        put(&client, &single, "b").await;
    })
    .await;
    drop(second);

    // A blob node that does not exist at the start (followed with an existence
    // watch), under a custom nodePath: the mapping comes from the single node until the
    // blob is created with another one.
    let custom = "/seata-custom/client.properties";
    let third = live(
        loader(
            "zk",
            &[
                ("serverAddr", server.connect_string()),
                ("nodePath", custom.to_string()),
            ],
        )
        .set("service.a.grouplist", A)
        .set("service.b.grouplist", B),
        "b",
    )
    .await;
    // Subscribed before the change (see centre_consul.rs: a watch made after it can
    // miss it).
    let mut rx = third.subscribe();
    put(&client, &single, "a").await;
    tokio::time::timeout(
        Duration::from_secs(5),
        rx.wait_for(|c| c.service.vgroup_mapping.get(GROUP).map(String::as_str) == Some("a")),
    )
    .await
    .expect("the single node's change is followed")
    .unwrap();
    follows_change(&third, "zk blob node created after the start", async {
        put(&client, custom, &blob(Some("b"))).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_zk_centre_is_an_error_naming_it() {
    let timeouts = [
        ("sessionTimeout", "2s".to_string()),
        ("connectTimeout", "500ms".to_string()),
    ];
    assert_unreachable_refused("zk", &timeouts).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_digest_password_never_shows() {
    const SECRET: &str = "Zk9-centre-s3cret-Qw";
    let logs = trace_logs();
    let server = meshline_testkit::ZooKeeper::start().expect("zookeeper");
    // The blob is readable by the digest identity `seata:SECRET` only.
    let auth = format!("seata:{SECRET}");
    let owner = zk::Client::connector()
        .with_auth("digest", auth.as_bytes())
        .connect(&server.connect_string())
        .await
        .expect("owner client");
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    owner.mkdir("/seata", &open).await.unwrap();
    owner
        .create(
            "/seata/seata.properties",
            blob(Some("a")).as_bytes(),
            &zk::CreateMode::Persistent.with_acls(zk::Acls::creator_all()),
        )
        .await
        .unwrap();
    let with = |password: String| {
        loader(
            "zk",
            &[
                ("serverAddr", server.connect_string()),
                ("username", "seata".into()),
                ("password", password),
            ],
        )
    };
    // The right password reads it.
    let good = live(with(SECRET.to_string()), "a").await;
    let shown = format!("{good:?} {:?}", good.centre().unwrap().location());
    // A wrong one is refused by ZooKeeper (NoAuth), and the error does not show it.
    let wrong = format!("{SECRET}-wrong");
    let err = live_config(with(wrong)).await.expect_err("no read access");
    let text = format!("{err} {err:?}");
    assert!(
        text.contains("not authorized") && text.contains("/seata/seata.properties"),
        "not ZooKeeper's refusal (NoAuth) naming the node: {text}"
    );
    assert_secret_kept(&logs, SECRET, "zk", &[&text, &shown]);
}
