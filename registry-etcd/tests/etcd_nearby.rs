//! `EtcdRegistry::nearby` against a real etcd (meshline-testkit): the clusters that
//! share Seata's `registry-seata-` layout, as `meshline doctor` shows them when the
//! asked cluster is empty (issue #16: "etcd cluster `default` empty while `default2`
//! has members -> doctor lists them").

use etcd_client::Client;
use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Config, Nearby, RegistryService};
use meshline_registry_etcd::EtcdRegistry;
use meshline_testkit::Etcd;
use meshline_testkit::watch::inst;

fn config(endpoint: &str) -> Config {
    ConfigLoader::new()
        .set("registry.type", "etcd3")
        .set("registry.etcd3.serverAddr", endpoint)
        .set("registry.etcd3.ttl", "2s")
        .load()
        .unwrap()
}

/// (cluster, sorted members) of each place, in order.
fn summary(places: &[Nearby]) -> Vec<(String, Vec<String>)> {
    meshline_testkit::watch::cluster_places(places, "etcd")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_default_lists_default2_and_the_other_clusters() {
    meshline_testkit::watch::init_logs("meshline_registry_etcd=info");
    let etcd = Etcd::start().expect("etcd");
    let reg = EtcdRegistry::connect(&config(&etcd.endpoint()))
        .await
        .unwrap();
    // An empty registry: nothing nearby.
    assert!(reg.nearby("default").await.unwrap().is_empty());

    // What Seata TCs write (reference/seata-compat.md §1.3), through a raw client: the
    // cluster `default2` shares `default`'s prefix, `a-b` has a `-` in its name.
    let mut raw = Client::connect([etcd.endpoint()], None).await.unwrap();
    for (key, value) in [
        ("registry-seata-default2-10.0.0.1:8091", "10.0.0.1:8091"),
        ("registry-seata-default2-10.0.0.2:8091", "10.0.0.2:8091"),
        ("registry-seata-a-b-10.0.0.3:8091", "10.0.0.3:8091"),
        // Garbage and keys of other layouts are skipped.
        ("registry-seata-junk-x", "not an address"),
        ("unrelated-10.0.0.4:8091", "10.0.0.4:8091"),
    ] {
        raw.put(key, value, None).await.unwrap();
    }
    // And one we register ourselves, in the asked cluster's neighbour `prod`.
    reg.register("prod", &inst("10.0.0.5:8091")).await.unwrap();

    assert!(reg.lookup("default").await.unwrap().is_empty());
    let places = reg.nearby("default").await.unwrap();
    assert_eq!(
        summary(&places),
        vec![
            ("a-b".to_string(), vec!["10.0.0.3:8091".to_string()]),
            (
                "default2".to_string(),
                vec!["10.0.0.1:8091".to_string(), "10.0.0.2:8091".to_string()]
            ),
            ("prod".to_string(), vec!["10.0.0.5:8091".to_string()]),
        ]
    );

    // The asked cluster itself is never listed, even when it has members.
    let places = reg.nearby("default2").await.unwrap();
    let clusters: Vec<String> = summary(&places).into_iter().map(|(c, _)| c).collect();
    assert_eq!(clusters, vec!["a-b", "prod"]);

    // Many members: a sample per place.
    for i in 1..=40 {
        raw.put(
            format!("registry-seata-big-10.1.0.{i}:8091"),
            format!("10.1.0.{i}:8091"),
            None,
        )
        .await
        .unwrap();
    }
    let places = reg.nearby("default").await.unwrap();
    let big = places
        .iter()
        .find(|p| p.cluster.as_deref() == Some("big"))
        .expect("big listed");
    assert_eq!(big.members.len(), 10);
    reg.close().await.unwrap();
}

/// An unreachable etcd: an error naming the endpoint and the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_etcd_is_an_error_naming_the_address() {
    let port = meshline_testkit::closed_port().expect("a closed port");
    let endpoint = format!("http://127.0.0.1:{port}");
    let reg = EtcdRegistry::connect(&config(&endpoint)).await.unwrap();
    let text = reg.nearby("default").await.unwrap_err().to_string();
    assert!(text.contains(&endpoint), "no address in: {text}");
    assert!(text.contains("Connection refused"), "no cause in: {text}");
}
