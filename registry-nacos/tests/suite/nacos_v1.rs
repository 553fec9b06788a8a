//! The Nacos registry speaking Nacos 1.x's v1 HTTP API (`registry.nacos.protocol =
//! http`) to a real server (rnacos serves the v1 API beside gRPC): the conformance
//! suite as the second Nacos flavour, Seata's layout seen across the two protocols,
//! and the heartbeat that keeps a 1.x registration alive.

use crate::support;

use std::time::Duration;

use meshline_registry_core::{Instance, RegistryService};
use meshline_registry_nacos::{NacosRegistry, Protocol};
use meshline_testkit::Rnacos;
use meshline_testkit::watch::{addrs, assert_unchanged_for, eventually, wait_for};
use support::{WITHIN, config, harness_speaking};

async fn v1_harness() -> support::NacosHarness {
    harness_speaking(Some("http")).await
}

// No `crash_removed_within_ttl`: the registry has no way to stop without deregistering
// (its drop deregisters); expiry after missed beats is the server's, and the test below
// shows the beats are what keeps a registration.
meshline_testkit::conformance_tests!(v1_harness() => round_trip, drop_ends_watches,
    outage_stale_resync, garbage_skipped, empty_protection);

const HTTP: (&str, &str) = ("registry.nacos.protocol", "http");

/// Seata's layout across the two protocols: registered over HTTP, seen by a gRPC
/// (nacos-sdk) client; registered over gRPC as Seata does, seen over HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seata_layout_across_the_two_protocols() {
    support::seata_layout_both_ways("http").await;
}

/// `http` is what the client speaks; an instance's zone and weight go through the v1
/// registration (metadata as a JSON string) and come back; close deregisters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zone_and_weight_round_trip_and_close_deregisters() {
    let server = Rnacos::start().expect("start rnacos");
    let reg = NacosRegistry::connect(&config(&server, &[HTTP]))
        .await
        .unwrap();
    assert_eq!(reg.protocol(), Protocol::Http);
    let reader = NacosRegistry::connect(&config(&server, &[HTTP]))
        .await
        .unwrap();
    let mut w = reader.watch("default").await.unwrap();
    let a = Instance::parse("10.0.0.1:8091")
        .unwrap()
        .with_weight(3)
        .with_zone("az1");
    reg.register("default", &a).await.unwrap();
    let s = wait_for(&mut w, WITHIN, "registered", |s| s.len() == 1).await;
    assert_eq!(addrs(&s), vec!["10.0.0.1:8091"]);
    assert_eq!(s.instances()[0].weight(), 3);
    assert_eq!(s.instances()[0].zone(), Some("az1"));
    reg.close().await.unwrap();
    assert!(reader.lookup("default").await.unwrap().is_empty());
    reader.close().await.unwrap();
}

/// rnacos set to mark a heartbeat instance unhealthy 7 s after its last beat and to
/// remove it 9 s after: an instance registered over HTTP stays listed and healthy for
/// 15 s (beats every 5 s, the interval rnacos answers), and a registration the server
/// lost (a restart keeps no ephemeral instance) is brought back by the next beat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beats_keep_the_registration_and_bring_it_back() {
    let mut server = Rnacos::start_with_settings(&[
        ("RNACOS_NAMING_HEALTH_TIMEOUT_SECOND", "4"),
        ("RNACOS_NAMING_INSTANCE_TIMEOUT_SECOND", "6"),
    ])
    .expect("start rnacos");
    let me = Instance::parse("10.0.1.1:8091").unwrap();
    let reg = NacosRegistry::connect(&config(&server, &[HTTP]))
        .await
        .unwrap();
    // Without empty protection: a removal must show.
    let reader = NacosRegistry::connect(&config(
        &server,
        &[HTTP, ("registry.empty-protection", "false")],
    ))
    .await
    .unwrap();
    let mut w = reader.watch("default").await.unwrap();
    reg.register("default", &me).await.unwrap();
    wait_for(&mut w, WITHIN, "registered", |s| s.len() == 1).await;
    assert_unchanged_for(&mut w, Duration::from_secs(15), "kept alive by beats").await;

    server.kill();
    server.restart().unwrap();
    // Registered again by the next beat (rnacos takes a beat of an instance it does
    // not know as a registration; Java Nacos answers 20404 and the client registers).
    eventually(WITHIN, "registered again after the restart", || async {
        matches!(reader.lookup("default").await.map(|l| l.len()), Ok(1))
    })
    .await;
    reg.close().await.unwrap();
    reader.close().await.unwrap();
}

/// The login over HTTP: the token goes as `accessToken`; a wrong password is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn username_and_password_are_used_over_http() {
    support::credentials_are_used("http").await;
}
