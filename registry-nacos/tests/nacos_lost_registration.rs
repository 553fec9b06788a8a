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

use meshline_registry_core::{Config, RegistryService};
use meshline_registry_nacos::{HEALTH_PERIOD, NacosRegistry, VERIFY_PERIOD};
use meshline_testkit::Rnacos;
use meshline_testkit::watch::{LogBuf, inst};

const IP: &str = "10.6.6.7";
const ME: &str = "10.6.6.7:8091";
const WARNED: &str = "the server no longer lists this registration";

fn capture() -> LogBuf {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::{EnvFilter, Layer};
    let logs = LogBuf::default();
    let w = logs.clone();
    let subscriber = tracing_subscriber::registry().with(
        tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || w.clone())
            .with_filter(EnvFilter::new("meshline_registry_nacos=warn")),
    );
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    logs
}

fn config(server: &Rnacos) -> Config {
    meshline_testkit::config_of(
        &[
            ("registry.type", "nacos"),
            ("registry.nacos.serverAddr", &server.http_addr()),
            ("registry.nacos.grpcPort", &server.grpc_port().to_string()),
        ],
        &[],
    )
}

async fn listed(o: &NacosRegistry) -> bool {
    o.lookup("default")
        .await
        .unwrap()
        .iter()
        .any(|i| i.to_string() == ME)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_the_server_lost_is_registered_again() {
    let logs = capture();
    let server = Rnacos::start().expect("start rnacos");
    let r = NacosRegistry::connect(&config(&server)).await.unwrap();
    r.register("default", &inst(ME)).await.unwrap();
    let o = NacosRegistry::connect(&config(&server)).await.unwrap();
    let t = Instant::now();
    while !listed(&o).await {
        assert!(t.elapsed() < Duration::from_secs(5), "never registered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

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
    while listed(&o).await {
        assert!(
            deleted.elapsed() < Duration::from_secs(2),
            "the HTTP delete did not remove the registration"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let gone_for_at_least = deleted.elapsed();
    // ... then listed again within a check period (plus the health check it follows).
    let bound = VERIFY_PERIOD + HEALTH_PERIOD + Duration::from_secs(1);
    while !listed(&o).await {
        assert!(
            deleted.elapsed() < bound,
            "the lost registration was not made again within {bound:?}:\n{}",
            logs.text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
    o.close().await.unwrap();
    r.close().await.unwrap();
}
