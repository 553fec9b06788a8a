//! `EurekaRegistry::nearby` against the Eureka server double (meshline-testkit): the
//! other applications with UP instances, as `meshline doctor` shows them when the
//! asked cluster (application) is empty.

mod common;

use common::*;
use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Config, Nearby, RegistryService};
use meshline_registry_others::EurekaRegistry;
use meshline_testkit::{EurekaDouble, EurekaDoubleOptions};
use serde_json::json;

fn config(eureka: &EurekaDouble) -> Config {
    ConfigLoader::new()
        .set("registry.type", "eureka")
        .set("registry.eureka.serviceUrl", eureka.service_url())
        .load()
        .unwrap()
}

/// Registers an instance as a Java Eureka client (Seata's TC) sends it.
async fn raw_register(eureka: &EurekaDouble, app: &str, ip: &str, port: u16, status: &str) {
    let body = json!({"instance": {
        "instanceId": format!("{ip}:{}:{port}", app.to_lowercase()), "hostName": ip,
        "app": app, "ipAddr": ip, "status": status, "overriddenstatus": "UNKNOWN",
        "port": {"$": port, "@enabled": "true"}, "securePort": {"$": 443, "@enabled": "false"},
        "countryId": 1,
        "dataCenterInfo": {"@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", "name": "MyOwn"},
        "leaseInfo": {"renewalIntervalInSecs": 30, "durationInSecs": 90},
        "metadata": {"weight": "1"},
        "vipAddress": app.to_lowercase(), "secureVipAddress": app.to_lowercase(),
        "lastDirtyTimestamp": "1700000000000"
    }});
    let st = reqwest::Client::new()
        .post(format!("{}/apps/{app}", eureka.service_url()))
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(st, 204);
}

/// (cluster, place, sorted members) of each place, in order.
fn summary(places: &[Nearby]) -> Vec<(String, String, Vec<String>)> {
    places
        .iter()
        .map(|p| {
            assert!(p.select_with.is_empty(), "{p:?}");
            let cluster = p.cluster.clone().expect("a eureka place is a cluster");
            let mut members: Vec<String> = p.members.iter().map(|i| i.to_string()).collect();
            members.sort();
            (cluster, p.place.clone(), members)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_cluster_lists_the_other_applications_with_up_members() {
    init_logs();
    let eureka = EurekaDouble::start(EurekaDoubleOptions::default()).unwrap();
    let reg = EurekaRegistry::connect(&config(&eureka)).await.unwrap();
    assert!(reg.nearby("default").await.unwrap().is_empty());

    // Seata TCs under another application name (reference/seata-compat.md §1.7).
    raw_register(&eureka, "SEATA-SERVER", "10.0.0.1", 8091, "UP").await;
    raw_register(&eureka, "SEATA-SERVER", "10.0.0.2", 8091, "UP").await;
    // An application whose only instance is not UP: nothing a client could use.
    raw_register(&eureka, "DRAINING", "10.0.0.4", 8091, "OUT_OF_SERVICE").await;
    // And one we register ourselves.
    reg.register("prod", &inst("10.0.0.5:8091")).await.unwrap();

    assert!(reg.lookup("default").await.unwrap().is_empty());
    assert_eq!(
        summary(&reg.nearby("default").await.unwrap()),
        vec![
            (
                "prod".to_string(),
                "application `PROD`".to_string(),
                vec!["10.0.0.5:8091".to_string()]
            ),
            (
                "seata-server".to_string(),
                "application `SEATA-SERVER`".to_string(),
                vec!["10.0.0.1:8091".to_string(), "10.0.0.2:8091".to_string()]
            ),
        ]
    );
    // The asked cluster itself is never listed, whatever its case.
    let clusters: Vec<String> = summary(&reg.nearby("Seata-Server").await.unwrap())
        .into_iter()
        .map(|(c, _, _)| c)
        .collect();
    assert_eq!(clusters, vec!["prod"]);

    // Many members: a sample.
    for i in 1..=30 {
        raw_register(&eureka, "BIG", &format!("10.1.0.{i}"), 8091, "UP").await;
    }
    let places = reg.nearby("default").await.unwrap();
    let big = places
        .iter()
        .find(|p| p.cluster.as_deref() == Some("big"))
        .expect("big listed");
    assert_eq!(big.members.len(), 10);
    reg.close().await.unwrap();
}

/// The server gone after connecting: an error naming its address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_is_an_error_naming_the_address() {
    init_logs();
    let mut eureka = EurekaDouble::start(EurekaDoubleOptions::default()).unwrap();
    let reg = EurekaRegistry::connect(&config(&eureka)).await.unwrap();
    eureka.stop();
    let text = reg.nearby("default").await.unwrap_err().to_string();
    assert!(text.contains(&eureka.service_url()), "{text}");
    assert!(text.contains("list apps"), "{text}");
}
