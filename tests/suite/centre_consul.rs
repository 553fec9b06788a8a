//! `config.type=consul` against the testkit Consul double (no Consul server can be
//! installed here; its KV endpoints are checked against npm `consul` by
//! scripts/check-doubles.sh): Seata's blob key and single keys are read (the blob over
//! the file, the environment over all), a `Discovery` follows a `service.vgroupMapping`
//! change made through the KV API within 2 s (blob and single key), an unreachable
//! agent is an error naming the address and the cause, and a wrong ACL token never
//! shows in errors or logs.
#![cfg(all(feature = "consul", feature = "file"))]

use crate::support;

use meshline::centre::live_config;
use meshline_testkit::{ConsulDouble, ConsulDoubleOptions};
use support::*;

/// `PUT /v1/kv/<key>` on the agent at `url`, with `token`.
async fn put(url: &str, token: Option<&str>, key: &str, value: &str) {
    let mut req = reqwest::Client::new()
        .put(format!("{url}/v1/kv/{key}"))
        .body(value.to_string());
    if let Some(t) = token {
        req = req.header("X-Consul-Token", t);
    }
    let resp = req.send().await.expect("kv put");
    assert!(resp.status().is_success(), "kv put: {}", resp.status());
    assert_eq!(resp.text().await.unwrap(), "true");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consul_centre_reads_and_follows_seata_keys() {
    let agent = ConsulDouble::start(ConsulDoubleOptions::default()).expect("consul double");
    let url = agent.url();
    let keys = || vec![("serverAddr", agent.server_addr())];

    // The blob wins over the single key, as in Seata.
    put(&url, None, "seata.properties", &blob(Some("a"))).await;
    put(&url, None, MAPPING_KEY, "b").await;
    environment_over_all("consul", &keys(), "a").await;
    let first = live(loader("consul", &keys()), "a").await;
    follows_change(
        &first,
        "consul blob",
        put(&url, None, "seata.properties", &blob(Some("b"))),
    )
    .await;
    drop(first);

    // Without the mapping in the blob, the single key is read.
    put(&url, None, "seata.properties", &blob(None)).await;
    put(&url, None, MAPPING_KEY, "a").await;
    let second = live(loader("consul", &keys()), "a").await;
    follows_change(
        &second,
        "consul single key",
        put(&url, None, MAPPING_KEY, "b"),
    )
    .await;
    drop(second);

    // A custom blob key that does not exist at the start: a blocking query on a
    // missing key (its 404 carries an index) sees it created.
    let third = live(
        loader(
            "consul",
            &[
                ("serverAddr", agent.server_addr()),
                ("key", "seata/client.properties".into()),
            ],
        )
        .set("service.a.grouplist", A)
        .set("service.b.grouplist", B),
        "b",
    )
    .await;
    // Subscribed before the change: a watch made after it could miss it (the change
    // may be applied before the subscription, which then waits for another one; this
    // timed out on a loaded machine).
    let mut rx = third.subscribe();
    put(&url, None, MAPPING_KEY, "a").await;
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        rx.wait_for(|c| c.service.vgroup_mapping.get(GROUP).map(String::as_str) == Some("a")),
    )
    .await
    .expect("the single key's change is followed")
    .unwrap();
    follows_change(
        &third,
        "consul blob key created after the start",
        put(&url, None, "seata/client.properties", &blob(Some("b"))),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_consul_centre_is_an_error_naming_it() {
    assert_unreachable_refused("consul", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_acl_token_never_shows() {
    const SECRET: &str = "Cn7-consul-t0ken-Vb";
    let logs = trace_logs();
    let agent = ConsulDouble::start(ConsulDoubleOptions {
        acl_token: Some(SECRET.to_string()),
        ..Default::default()
    })
    .expect("consul double");
    put(
        &agent.url(),
        Some(SECRET),
        "seata.properties",
        &blob(Some("a")),
    )
    .await;
    let with = |token: String| {
        loader(
            "consul",
            &[("serverAddr", agent.server_addr()), ("aclToken", token)],
        )
    };
    let good = live(with(SECRET.to_string()), "a").await;
    let shown = format!("{good:?} {:?}", good.centre().unwrap().location());
    let err = live_config(with(format!("{SECRET}-wrong")))
        .await
        .expect_err("the agent refuses the token");
    let text = format!("{err} {err:?}");
    assert!(text.contains("403"), "{text}");
    assert_secret_kept(&logs, SECRET, "consul", &[&text, &shown]);
}
