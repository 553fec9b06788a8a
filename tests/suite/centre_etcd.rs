//! `config.type=etcd3` against a real etcd (testkit): Seata's blob key and single keys
//! are read (the blob over the file, the environment over all), a `Discovery` follows a
//! `service.vgroupMapping` change made through etcd's own API within 2 s (blob and
//! single key), and an unreachable centre is an error naming the address.
#![cfg(all(feature = "etcd", feature = "file"))]

use crate::support;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_centre_reads_and_follows_seata_keys() {
    let (server, client) = etcd_and_client().await;
    let put = |key: &'static str, value: String| {
        let mut kv = client.kv_client();
        async move {
            kv.put(key, value, None).await.expect("put");
        }
    };
    let keys = || vec![("serverAddr", server.endpoint())];

    // The blob wins over the single key, as in Seata.
    put("seata.properties", blob(Some("a"))).await;
    put(MAPPING_KEY, "b".into()).await;
    environment_over_all("etcd3", &keys(), "a").await;
    let first = live(loader("etcd3", &keys()), "a").await;
    follows_change(
        &first,
        "etcd blob",
        put("seata.properties", blob(Some("b"))),
    )
    .await;
    drop(first);

    // Without the mapping in the blob, the single key is read.
    put("seata.properties", blob(None)).await;
    put(MAPPING_KEY, "a".into()).await;
    let second = live(loader("etcd3", &keys()), "a").await;
    follows_change(&second, "etcd single key", put(MAPPING_KEY, "b".into())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_etcd_centre_is_an_error_naming_it() {
    let port = meshline_testkit::closed_port().unwrap();
    let addr = format!("http://127.0.0.1:{port}");
    let err = unreachable_error("etcd3", &[("serverAddr", addr)]).await;
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
}
