//! `config.type=nacos` against a real Nacos-protocol server (rnacos, testkit): Seata's
//! data id and single-key data ids are read, a `Discovery` follows a
//! `service.vgroupMapping` change published through rnacos' config API
//! (`POST /nacos/v1/cs/configs`) within 2 s (blob and single key), an unreachable
//! server is an error naming the address and the cause, and a wrong password never
//! shows in errors or logs.
#![cfg(all(feature = "nacos", feature = "file"))]

mod support;

use meshline::centre::live_config;
use meshline_testkit::Rnacos;
use support::*;

/// Publishes `content` as data id `data_id` of group `SEATA_GROUP` (public namespace)
/// through the open API.
async fn publish(server: &Rnacos, data_id: &str, content: &str) {
    let resp = reqwest::Client::new()
        .post(format!("http://{}/nacos/v1/cs/configs", server.http_addr()))
        .form(&[
            ("dataId", data_id),
            ("group", "SEATA_GROUP"),
            ("content", content),
            ("tenant", ""),
        ])
        .send()
        .await
        .expect("publish config");
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    assert!(
        status.is_success() && body.trim() == "true",
        "publish: {status} {body}"
    );
    // rnacos answers the publish before every reader sees it (a read right after
    // could still find the old value, or none): wait until its own read API shows
    // the new content, so each test step starts from the state it published.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let got = reqwest::Client::new()
            .get(format!("http://{}/nacos/v1/cs/configs", server.http_addr()))
            .query(&[
                ("dataId", data_id),
                ("group", "SEATA_GROUP"),
                ("tenant", ""),
            ])
            .send()
            .await
            .expect("read config back");
        if got.status().is_success() && got.text().await.unwrap_or_default() == content {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "rnacos did not show the published {data_id} within 5 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn keys(server: &Rnacos) -> Vec<(&'static str, String)> {
    vec![
        ("serverAddr", server.http_addr()),
        ("grpcPort", server.grpc_port().to_string()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nacos_centre_reads_and_follows_seata_data_ids() {
    let server = Rnacos::start().expect("rnacos");

    // The blob wins over the single key, as in Seata.
    publish(&server, "seata.properties", &blob(Some("a"))).await;
    publish(&server, MAPPING_KEY, "b").await;
    let first = live(loader("nacos", &keys(&server)), "a").await;
    follows_change(
        &first,
        "nacos blob",
        publish(&server, "seata.properties", &blob(Some("b"))),
    )
    .await;
    drop(first);

    // Without the mapping in the blob, the single data id is read.
    publish(&server, "seata.properties", &blob(None)).await;
    publish(&server, MAPPING_KEY, "a").await;
    let second = live(loader("nacos", &keys(&server)), "a").await;
    follows_change(
        &second,
        "nacos single key",
        publish(&server, MAPPING_KEY, "b"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_nacos_centre_is_an_error_naming_it() {
    let port = meshline_testkit::closed_port().unwrap();
    let grpc = meshline_testkit::closed_port().unwrap();
    let addr = format!("127.0.0.1:{port}");
    let err = live_config(loader(
        "nacos",
        &[("serverAddr", addr.clone()), ("grpcPort", grpc.to_string())],
    ))
    .await
    .expect_err("no server there")
    .to_string();
    assert!(err.contains(&addr), "{err}");
    assert!(err.contains("refused"), "the cause: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_nacos_password_never_shows() {
    const SECRET: &str = "Nc4-centre-s3cret-Pz";
    let logs = trace_logs();
    let server = Rnacos::start_with_auth("meshline", SECRET).expect("rnacos");
    let mut with_password = keys(&server);
    with_password.push(("username", "meshline".into()));
    with_password.push(("password", format!("{SECRET}-wrong")));
    let refused = match live_config(loader("nacos", &with_password)).await {
        Err(e) => format!("{e} {e:?}"),
        Ok(live) => panic!("a wrong password must not read the centre: {live:?}"),
    };
    assert_secret_kept(&logs, SECRET, "nacos", &[&refused]);
}
