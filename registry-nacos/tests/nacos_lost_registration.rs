//! A server that loses a live registration: the client registers it again.
//!
//! A Nacos cluster can drop a registration whose connection is alive (rnacos did, in
//! `nacos_node_cut`, when a cut node returned and its removal of the client's old
//! connection reached the node the client had moved to). Here one rnacos loses it
//! on demand: the instance is deleted through Nacos' HTTP API, which removes it
//! whatever connection registered it. The client must notice by its check of what the
//! server lists (every `VERIFY_PERIOD`, after a health check) and register it again,
//! saying so at `WARN`.
//!
//! A test binary of its own (a process-wide subscriber captures the registry's log).

use std::time::{Duration, Instant};

use meshline_registry_core::{RegistryService, Snapshot};
use meshline_registry_nacos::{HEALTH_PERIOD, NacosRegistry, VERIFY_PERIOD};
use meshline_testkit::Rnacos;
use meshline_testkit::watch::{LogBuf, addrs, inst, wait_for};

const IP: &str = "10.6.6.7";
const ME: &str = "10.6.6.7:8091";
const WARNED: &str = "the server no longer lists this registration";

fn listed(s: &Snapshot) -> bool {
    addrs(s).iter().any(|a| a == ME)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_the_server_lost_is_registered_again() {
    let logs = LogBuf::global("meshline_registry_nacos=warn");
    let server = Rnacos::start().expect("start rnacos");
    let r = NacosRegistry::connect(&server.registry_config(&[]))
        .await
        .unwrap();
    r.register("default", &inst(ME)).await.unwrap();
    // The observer's watch must show an empty list as empty.
    let o =
        NacosRegistry::connect(&server.registry_config(&[("registry.empty-protection", "false")]))
            .await
            .unwrap();
    let mut w = o.watch("default").await.unwrap();
    wait_for(&mut w, Duration::from_secs(5), "the registration", listed).await;

    // The server loses it.
    let url = format!(
        "http://{}/nacos/v1/ns/instance?serviceName=seata-server&groupName=DEFAULT_GROUP\
         &clusterName=default&ip={IP}&port=8091&ephemeral=true",
        server.http_addr()
    );
    let answer = reqwest::Client::new().delete(url).send().await.unwrap();
    assert!(answer.status().is_success(), "{answer:?}");
    let deleted = Instant::now();
    // Seen gone (else the test proves nothing) ...
    wait_for(
        &mut w,
        Duration::from_secs(2),
        "the registration gone after the HTTP delete",
        |s| !listed(s),
    )
    .await;
    let gone_for_at_least = deleted.elapsed();
    // ... then listed again within a check period (plus the health check it follows).
    let bound = VERIFY_PERIOD + HEALTH_PERIOD + Duration::from_secs(1);
    wait_for(
        &mut w,
        bound.saturating_sub(deleted.elapsed()),
        "the lost registration made again",
        listed,
    )
    .await;
    let back = deleted.elapsed();
    let text = logs.text();
    assert!(
        text.lines().any(|l| l.contains(WARNED) && l.contains(ME)),
        "R's log did not say it registered {ME} again:\n{text}"
    );
    meshline_testkit::figures::report(
        "nacos_lost_registration",
        &format!(
            "a registration the server lost (seen gone {gone_for_at_least:?} after the \
             delete) was listed again {back:?} after it (bound {bound:?})"
        ),
    );
    drop(w);
    o.close().await.unwrap();
    r.close().await.unwrap();
}
