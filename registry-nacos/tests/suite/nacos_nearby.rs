//! `NacosRegistry::nearby` against a real Nacos-protocol server (rnacos, started by
//! testkit): where a Seata TC is registered when the client does not find it, with the
//! `registry.nacos.*` keys that select it (a TC registered in group `SEATA_GROUP` while
//! the client reads `DEFAULT_GROUP`: the doctor names `SEATA_GROUP` and the key to set).

use crate::support;

use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Config, Instance, Nearby, RegistryService};
use meshline_registry_nacos::NacosRegistry;
use meshline_testkit::Rnacos;
use nacos_sdk::api::naming::{NamingService, NamingServiceBuilder, ServiceInstance};

fn config(server: &Rnacos, extra: &[(&str, &str)]) -> Config {
    let mut l = ConfigLoader::new()
        .set("registry.type", "nacos")
        .set("registry.nacos.serverAddr", server.http_addr())
        .set("registry.nacos.grpcPort", server.grpc_port().to_string());
    for (k, v) in extra {
        l = l.set(*k, *v);
    }
    l.load().unwrap()
}

/// A plain nacos-sdk client in `namespace`, as a Seata TC uses it.
async fn tc_client(server: &Rnacos, namespace: &str) -> NamingService {
    NamingServiceBuilder::new(support::raw_client_props(server).namespace(namespace.to_string()))
        .build()
        .await
        .expect("raw nacos client")
}

/// `registerInstance(service, group, ip, port, cluster)`, as Seata's TC does it.
async fn register_tc(tc: &NamingService, service: &str, group: &str, addr: &str, cluster: &str) {
    let i = Instance::parse(addr).unwrap();
    tc.register_instance(
        service.to_string(),
        Some(group.to_string()),
        ServiceInstance {
            ip: i.host().to_string(),
            port: i32::from(i.port()),
            cluster_name: Some(cluster.to_string()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
}

/// A TC in the public namespace that registered Seata's `seata-server` in `group` at
/// `addr`, Nacos cluster `default`; its registration lasts as long as the client.
async fn public_tc(server: &Rnacos, group: &str, addr: &str) -> NamingService {
    let tc = tc_client(server, "").await;
    register_tc(&tc, "seata-server", group, addr, "default").await;
    tc
}

/// (place, cluster, select_with, members) of each place.
type Summary = (String, Option<String>, Vec<String>, Vec<String>);

fn summary(places: &[Nearby]) -> Vec<Summary> {
    places
        .iter()
        .map(|p| {
            (
                p.place.clone(),
                p.cluster.clone(),
                p.select_with.clone(),
                p.members.iter().map(|i| i.to_string()).collect(),
            )
        })
        .collect()
}

fn s(v: &str) -> String {
    v.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tc_in_another_group_cluster_or_service_is_named_with_its_key() {
    named_with_its_key("grpc").await;
}

/// The same over Nacos 1.x's v1 HTTP API (service list and instance list).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_the_tc_elsewhere_is_named_with_its_key() {
    named_with_its_key("http").await;
}

async fn named_with_its_key(protocol: &str) {
    meshline_testkit::watch::init_logs("meshline_registry_nacos=info");
    let server = Rnacos::start().expect("start rnacos");
    // Seata's client defaults: seata-server, DEFAULT_GROUP, public namespace.
    let reg = NacosRegistry::connect(&config(&server, &[("registry.nacos.protocol", protocol)]))
        .await
        .unwrap();
    assert!(reg.nearby("default").await.unwrap().is_empty());

    // The shipped server files' group while the client reads the code default.
    let _tc = public_tc(&server, "SEATA_GROUP", "10.0.0.1:8091").await;
    assert!(reg.lookup("default").await.unwrap().is_empty());
    let places = reg.nearby("default").await.unwrap();
    assert_eq!(
        summary(&places),
        vec![(
            s(
                "service `seata-server` in group `SEATA_GROUP`, namespace `public`, Nacos cluster `default`"
            ),
            None,
            vec![s("registry.nacos.group=SEATA_GROUP")],
            vec![s("10.0.0.1:8091")],
        )]
    );

    // Another Nacos cluster of the very service read, and another application name
    // (a second TC process: one nacos-sdk connection keeps one instance per service).
    let tc2 = tc_client(&server, "").await;
    register_tc(
        &tc2,
        "seata-server",
        "DEFAULT_GROUP",
        "10.0.0.2:8091",
        "default2",
    )
    .await;
    register_tc(&tc2, "seata", "DEFAULT_GROUP", "10.0.0.3:8091", "default").await;
    let places = reg.nearby("default").await.unwrap();
    assert_eq!(
        summary(&places),
        vec![
            (
                s(
                    "service `seata-server` in group `DEFAULT_GROUP`, namespace `public`, Nacos cluster `default2`"
                ),
                Some(s("default2")),
                vec![],
                vec![s("10.0.0.2:8091")],
            ),
            (
                s(
                    "service `seata` in group `DEFAULT_GROUP`, namespace `public`, Nacos cluster `default`"
                ),
                None,
                vec![s("registry.nacos.application=seata")],
                vec![s("10.0.0.3:8091")],
            ),
            (
                s(
                    "service `seata-server` in group `SEATA_GROUP`, namespace `public`, Nacos cluster `default`"
                ),
                None,
                vec![s("registry.nacos.group=SEATA_GROUP")],
                vec![s("10.0.0.1:8091")],
            ),
        ]
    );

    // The asked place itself is never listed, even with members: asking for
    // `default2`, the TC in `default2` is the lookup's, not a neighbour.
    assert_eq!(reg.lookup("default2").await.unwrap().len(), 1);
    let places = reg.nearby("default2").await.unwrap();
    assert!(
        places
            .iter()
            .all(|p| !p.members.iter().any(|m| m.to_string() == "10.0.0.2:8091")),
        "{places:?}"
    );
    reg.close().await.unwrap();
}

/// A client in namespace `dev` while the TC registered in the public namespace: the
/// place names the namespace key, read through a client opened for the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tc_in_the_public_namespace_is_named_with_the_namespace_key() {
    meshline_testkit::watch::init_logs("meshline_registry_nacos=info");
    let server = Rnacos::start().expect("start rnacos");
    let reg = NacosRegistry::connect(&config(
        &server,
        &[
            ("registry.nacos.namespace", "dev"),
            ("registry.nacos.group", "SEATA_GROUP"),
        ],
    ))
    .await
    .unwrap();
    assert!(reg.nearby("default").await.unwrap().is_empty());
    let _tc = public_tc(&server, "SEATA_GROUP", "10.0.0.7:8091").await;
    assert!(reg.lookup("default").await.unwrap().is_empty());
    assert_eq!(
        summary(&reg.nearby("default").await.unwrap()),
        vec![(
            s(
                "service `seata-server` in group `SEATA_GROUP`, namespace `public`, Nacos cluster `default`"
            ),
            None,
            vec![s("registry.nacos.namespace=")],
            vec![s("10.0.0.7:8091")],
        )]
    );
    reg.close().await.unwrap();
}

/// A TC under a group that is neither `DEFAULT_GROUP` nor
/// `SEATA_GROUP` (a team's own name), and one in a namespace that is neither the
/// configured one nor public, are found through the server's catalog and namespace
/// list, each named with the keys that select it. Before, only the two guessed groups
/// were read, and both were reported as "nothing near it has members".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tc_in_any_group_or_namespace_is_named_with_its_keys() {
    meshline_testkit::watch::init_logs("meshline_registry_nacos=info");
    let server = Rnacos::start().expect("start rnacos");
    let reg = NacosRegistry::connect(&config(&server, &[])).await.unwrap();
    let _tc = public_tc(&server, "TEAM_TX", "10.0.0.11:8091").await;
    // A namespace of its own, with a service name and group Seata never guesses.
    let created = reqwest::Client::new()
        .post(format!(
            "http://{}/nacos/v1/console/namespaces",
            server.http_addr()
        ))
        .form(&[
            ("customNamespaceId", "team-ns"),
            ("namespaceName", "team-ns"),
        ])
        .send()
        .await
        .unwrap();
    assert!(created.status().is_success(), "{created:?}");
    let tc2 = tc_client(&server, "team-ns").await;
    register_tc(&tc2, "tx-coordinator", "OPS", "10.0.0.12:8091", "default").await;
    assert!(reg.lookup("default").await.unwrap().is_empty());
    assert_eq!(
        summary(&reg.nearby("default").await.unwrap()),
        vec![
            (
                s(
                    "service `seata-server` in group `TEAM_TX`, namespace `public`, Nacos cluster `default`"
                ),
                None,
                vec![s("registry.nacos.group=TEAM_TX")],
                vec![s("10.0.0.11:8091")],
            ),
            (
                s(
                    "service `tx-coordinator` in group `OPS`, namespace `team-ns`, Nacos cluster `default`"
                ),
                None,
                vec![
                    s("registry.nacos.namespace=team-ns"),
                    s("registry.nacos.group=OPS"),
                    s("registry.nacos.application=tx-coordinator"),
                ],
                vec![s("10.0.0.12:8091")],
            ),
        ]
    );
    reg.close().await.unwrap();
}

/// Nacos gone after connecting: an error naming the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_is_an_error_naming_the_address() {
    meshline_testkit::watch::init_logs("meshline_registry_nacos=info");
    let mut server = Rnacos::start().expect("start rnacos");
    let reg = NacosRegistry::connect(&config(&server, &[])).await.unwrap();
    server.kill();
    let text = reg.nearby("default").await.unwrap_err().to_string();
    assert!(text.contains(&server.http_addr()), "no address in: {text}");
}
