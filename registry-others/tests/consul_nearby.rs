//! `ConsulRegistry::nearby` against the Consul agent double (meshline-testkit): the
//! other services with Seata's tag `services` and passing members, as `meshline doctor`
//! shows them when the asked cluster (service) is empty.

mod common;

use common::*;
use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Config, Nearby, RegistryService};
use meshline_registry_others::ConsulRegistry;
use meshline_testkit::{ConsulDouble, ConsulDoubleOptions};
use serde_json::json;

fn config(server_addr: &str) -> Config {
    ConfigLoader::new()
        .set("registry.type", "consul")
        .set("registry.consul.serverAddr", server_addr)
        .set("registry.consul.ttl", "60s")
        .load()
        .unwrap()
}

/// Registers a service instance as raw agent JSON, with a TTL check in `status`.
async fn raw_register(consul: &ConsulDouble, name: &str, addr: &str, tag: &str, status: &str) {
    let (ip, port) = addr.rsplit_once(':').unwrap();
    let r = reqwest::Client::new()
        .put(format!("{}/v1/agent/service/register", consul.url()))
        .body(
            json!({
                "ID": format!("{name}-{addr}"),
                "Name": name,
                "Tags": [tag],
                "Address": ip,
                "Port": port.parse::<u16>().unwrap(),
                "Check": {"TTL": "60s", "Status": status}
            })
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// (cluster, sorted members) of each place, in order.
fn summary(places: &[Nearby]) -> Vec<(String, Vec<String>)> {
    meshline_testkit::watch::cluster_places(places, "consul")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_cluster_lists_the_other_tagged_services_with_passing_members() {
    init_logs();
    let consul = ConsulDouble::start(ConsulDoubleOptions::default()).unwrap();
    let reg = ConsulRegistry::connect(&config(&consul.server_addr()))
        .await
        .unwrap();
    // Only the agent's own `consul` service: nothing nearby.
    assert!(reg.nearby("default").await.unwrap().is_empty());

    // Seata TCs under another cluster name (reference/seata-compat.md §1.6).
    raw_register(&consul, "default2", "10.0.0.1:8091", "services", "passing").await;
    raw_register(&consul, "default2", "10.0.0.2:8091", "services", "passing").await;
    // Not Seata's tag: another application, not a place for a TC.
    raw_register(&consul, "web", "10.0.0.3:80", "http", "passing").await;
    // Seata's tag but no passing member: nothing a client could use.
    raw_register(&consul, "down", "10.0.0.4:8091", "services", "critical").await;
    // And one we register ourselves.
    reg.register("prod", &inst("10.0.0.5:8091")).await.unwrap();

    assert!(reg.lookup("default").await.unwrap().is_empty());
    assert_eq!(
        summary(&reg.nearby("default").await.unwrap()),
        vec![
            (
                "default2".to_string(),
                vec!["10.0.0.1:8091".to_string(), "10.0.0.2:8091".to_string()]
            ),
            ("prod".to_string(), vec!["10.0.0.5:8091".to_string()]),
        ]
    );
    // The asked cluster itself is never listed, even with members.
    let clusters: Vec<String> = summary(&reg.nearby("default2").await.unwrap())
        .into_iter()
        .map(|(c, _)| c)
        .collect();
    assert_eq!(clusters, vec!["prod"]);

    // Many members: a sample.
    for i in 1..=30 {
        raw_register(
            &consul,
            "big",
            &format!("10.1.0.{i}:8091"),
            "services",
            "passing",
        )
        .await;
    }
    let places = reg.nearby("default").await.unwrap();
    let big = places
        .iter()
        .find(|p| p.cluster.as_deref() == Some("big"))
        .expect("big listed");
    assert_eq!(big.members.len(), 10);
    reg.close().await.unwrap();
}

/// The agent gone after connecting: an error naming its address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_agent_is_an_error_naming_the_address() {
    init_logs();
    let mut consul = ConsulDouble::start(ConsulDoubleOptions::default()).unwrap();
    let reg = ConsulRegistry::connect(&config(&consul.server_addr()))
        .await
        .unwrap();
    consul.stop();
    let text = reg.nearby("default").await.unwrap_err().to_string();
    assert!(
        text.contains(&format!(
            "consul registry at {} unavailable",
            consul.server_addr()
        )),
        "{text}"
    );
    assert!(text.contains("list services"), "{text}");
}
