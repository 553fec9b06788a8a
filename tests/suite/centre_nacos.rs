//! `config.type=nacos` against a real Nacos-protocol server (rnacos, testkit): Seata's
//! data id and single-key data ids are read (the blob over the file, the environment
//! over all), a `Discovery` follows a `service.vgroupMapping` change published through
//! rnacos' config API (`POST /nacos/v1/cs/configs`) within 2 s (blob and single key),
//! an unreachable server is an error naming the address and the cause, and a wrong
//! password (refused with 403 "unknown user!") never shows in errors or logs.
#![cfg(all(feature = "nacos", feature = "file"))]

use crate::support;

use meshline::centre::live_config;
use meshline_testkit::Rnacos;
use support::*;

/// Publishes through rnacos' open API and waits until it reads back
/// ([`Rnacos::publish_config`]).
async fn publish(server: &Rnacos, data_id: &str, content: &str) {
    tokio::task::block_in_place(|| server.publish_config(data_id, "SEATA_GROUP", content))
        .expect("publish config");
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
    environment_over_all("nacos", &keys(&server), "a").await;
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
    let grpc = meshline_testkit::closed_port().unwrap();
    assert_unreachable_refused("nacos", &[("grpcPort", grpc.to_string())]).await;
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
    // nacos-sdk keeps the failed login to itself and reads without a token: the
    // server refuses the read as it refused the login (403 "unknown user!", Nacos's
    // NacosAuthManager text, which rnacos answers both with).
    assert!(
        refused.contains("get config `seata.properties`")
            && refused.contains("error_code:403")
            && refused.contains("unknown user!"),
        "not the server's refusal of the login: {refused}"
    );
    assert_secret_kept(&logs, SECRET, "nacos", &[&refused]);
}
