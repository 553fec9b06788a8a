//! `RedisRegistry::nearby` against a real Redis (meshline-testkit): the other clusters
//! of Seata's `registry.redis.<cluster>_<ip>:<port>` layout with members, as
//! `meshline doctor` shows them when the asked cluster is empty.

mod common;

use std::time::Duration;

use common::*;
use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Config, Nearby, RegistryService};
use meshline_registry_others::RedisRegistry;
use meshline_testkit::Redis;

fn config(addr: &str) -> Config {
    ConfigLoader::new()
        .set("registry.type", "redis")
        .set("registry.redis.serverAddr", addr)
        .set("registry.redis.commandTimeout", "1s")
        .load()
        .unwrap()
}

/// (cluster, sorted members) of each place, in order.
fn summary(places: &[Nearby]) -> Vec<(String, Vec<String>)> {
    meshline_testkit::watch::cluster_places(places, "redis")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_cluster_lists_the_other_clusters_with_members() {
    init_logs();
    let r = Redis::start().expect("redis");
    let reg = RedisRegistry::connect(&config(&r.addr())).await.unwrap();
    assert!(reg.nearby("default").await.unwrap().is_empty());

    // What Seata TCs write (reference/seata-compat.md §1.5), through a raw connection:
    // a cluster whose name has `_`, garbage, and a key of another application.
    let mut raw = redis::Client::open(r.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for key in [
        "registry.redis.default2_10.0.0.1:8091",
        "registry.redis.default2_10.0.0.2:8091",
        "registry.redis.tx_prod_10.0.0.3:8091",
        "registry.redis.junk_not-an-address",
        "session_10.0.0.4:8091",
    ] {
        let () = redis::cmd("SETEX")
            .arg(key)
            .arg(60)
            .arg("1@host")
            .query_async(&mut raw)
            .await
            .unwrap();
    }
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
            ("tx_prod".to_string(), vec!["10.0.0.3:8091".to_string()]),
        ]
    );
    // The asked cluster itself is never listed, even with members.
    let clusters: Vec<String> = summary(&reg.nearby("default2").await.unwrap())
        .into_iter()
        .map(|(c, _)| c)
        .collect();
    assert_eq!(clusters, vec!["prod", "tx_prod"]);

    // Many members: a sample.
    for i in 1..=30 {
        let () = redis::cmd("SETEX")
            .arg(format!("registry.redis.big_10.1.0.{i}:8091"))
            .arg(60)
            .arg("1@host")
            .query_async(&mut raw)
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

/// Redis gone after connecting: an error naming the address, within the command
/// timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_is_an_error_naming_the_address() {
    init_logs();
    let mut r = Redis::start().expect("redis");
    let reg = RedisRegistry::connect(&config(&r.addr())).await.unwrap();
    r.kill();
    let t = std::time::Instant::now();
    let text = reg.nearby("default").await.unwrap_err().to_string();
    assert!(text.contains(&r.addr()), "no address in: {text}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}
