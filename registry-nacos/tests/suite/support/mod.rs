//! What the Nacos test files share: rnacos with the conformance suite's harness (for
//! either protocol the registry speaks), the registry's config for it, and a plain
//! nacos-sdk client as a Seata TC would use it.

#![allow(dead_code)] // each test file uses its part

use std::sync::Mutex;
use std::time::Duration;

use meshline_registry_core::{Instance, RegistryService};
use meshline_testkit::watch::{addrs, wait_for};

/// How long a change may take to reach a watch.
pub const WITHIN: Duration = Duration::from_secs(10);

use meshline_registry_core::{Config, RegistryError};
use meshline_registry_nacos::NacosRegistry;
use meshline_testkit::Rnacos;
use meshline_testkit::conformance::{Garbage, Harness, Lifetime, Server};
use nacos_sdk::api::naming::{NamingService, NamingServiceBuilder, ServiceInstance};
use nacos_sdk::api::props::ClientProps;

/// A config for `server` with empty protection on, then `extra` keys.
pub fn config(server: &Rnacos, extra: &[(&str, &str)]) -> Config {
    let (addr, grpc) = (server.http_addr(), server.grpc_port().to_string());
    let base = [
        ("registry.type", "nacos"),
        ("registry.nacos.serverAddr", addr.as_str()),
        ("registry.nacos.grpcPort", grpc.as_str()),
        ("registry.empty-protection", "true"),
    ];
    meshline_testkit::config_of(&base, extra)
}

/// rnacos and the registry's settings for it.
pub struct NacosHarness {
    pub server: Rnacos,
    /// Raw clients that wrote garbage: their (ephemeral) instances live with them.
    raw: Mutex<Vec<NamingService>>,
    /// `registry.nacos.protocol`, when set (unset: `auto`, which picks gRPC for rnacos).
    protocol: Option<&'static str>,
}

/// A harness whose clients leave the protocol to `auto`.
pub async fn harness() -> NacosHarness {
    harness_speaking(None).await
}

/// A harness whose clients speak `protocol` (`grpc`, `http`).
pub async fn harness_speaking(protocol: Option<&'static str>) -> NacosHarness {
    meshline_testkit::watch::init_logs("meshline_registry_nacos=info");
    NacosHarness {
        server: Rnacos::start().expect("start rnacos"),
        raw: Mutex::new(Vec::new()),
        protocol,
    }
}

impl Harness for NacosHarness {
    type Registry = NacosRegistry;
    /// Nacos 2 instances are ephemeral, bound to the client's gRPC connection: there
    /// is no TTL to make long, only the spans the suite holds a registration (and the
    /// server down) for.
    const LIFETIME: Lifetime = Lifetime::fixed(Duration::from_secs(4));
    /// The client reconnects (a round of servers, then at most 2 s between rounds) and
    /// redoes its registrations and subscriptions.
    const RESYNC_WITHIN: Duration = Duration::from_secs(30);

    fn config(&self, extra: &[(&str, &str)]) -> Config {
        let mut keys: Vec<(&str, &str)> = extra.to_vec();
        if let Some(p) = self.protocol {
            keys.push(("registry.nacos.protocol", p));
        }
        config(&self.server, &keys)
    }
    async fn connect_config(&self, cfg: &Config) -> Result<NacosRegistry, RegistryError> {
        NacosRegistry::connect(cfg).await
    }
    fn server(&mut self) -> &mut dyn Server {
        &mut self.server
    }
}

impl Garbage for NacosHarness {
    async fn put_garbage(&self, cluster: &str, round: u32) {
        let raw = raw_client(&self.server).await;
        let bad = match round {
            0 => ("not an ip!", 8091),
            _ => ("10.0.0.9", 70000),
        };
        raw.register_instance(
            "seata-server".into(),
            Some("DEFAULT_GROUP".into()),
            ServiceInstance {
                ip: bad.0.into(),
                port: bad.1,
                cluster_name: Some(cluster.into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        self.raw.lock().unwrap().push(raw);
    }
}

/// The settings of a plain nacos-sdk client of `server`, as a Seata TC (Java) or any
/// other client would give them (no namespace: the public one).
pub fn raw_client_props(server: &Rnacos) -> ClientProps {
    ClientProps::new()
        .server_addr(server.http_addr())
        .remote_grpc_port(server.grpc_port())
        .app_name("seata-server")
        .env_first(false)
}

/// A plain nacos-sdk client, as a Seata TC (Java) or any other client would use it.
pub async fn raw_client(server: &Rnacos) -> NamingService {
    NamingServiceBuilder::new(raw_client_props(server))
        .build()
        .await
        .expect("raw nacos client")
}

/// A login with `username`/`password` over `protocol`: the right ones register and
/// read; a wrong password and none at all are the server's auth refusal, named with
/// the keys to check and without the password.
pub async fn credentials_are_used(protocol: &str) {
    let server = Rnacos::start_with_auth("meshline", "s3cret-pass").expect("start rnacos");
    let good = config(
        &server,
        &[
            ("registry.nacos.username", "meshline"),
            ("registry.nacos.password", "s3cret-pass"),
            ("registry.nacos.protocol", protocol),
        ],
    );
    let reg = NacosRegistry::connect(&good).await.unwrap();
    let me = Instance::parse("10.3.0.1:8091").unwrap();
    reg.register("default", &me).await.unwrap();
    let mut w = reg.watch("default").await.unwrap();
    wait_for(&mut w, WITHIN, "our registration", |s| s.len() == 1).await;

    let bad = config(
        &server,
        &[
            ("registry.nacos.username", "meshline"),
            ("registry.nacos.password", "not-the-pass-9f2"),
            ("registry.nacos.protocol", protocol),
        ],
    );
    let refused = match NacosRegistry::connect(&bad).await {
        Err(e) => e.to_string(),
        Ok(r) => match r.lookup("default").await {
            Err(e) => e.to_string(),
            Ok(s) => panic!("a wrong password read the registry: {s:?}"),
        },
    };
    let anonymous =
        match NacosRegistry::connect(&config(&server, &[("registry.nacos.protocol", protocol)]))
            .await
        {
            Err(e) => e.to_string(),
            Ok(r) => match r
                .register("default", &Instance::parse("10.3.0.2:1").unwrap())
                .await
            {
                Err(e) => e.to_string(),
                Ok(()) => panic!("a registration without credentials was accepted"),
            },
        };
    // Both are the server's auth refusal, named with the keys to check, and neither
    // carries the password.
    for (what, e) in [
        ("a wrong password", &refused),
        ("no credentials", &anonymous),
    ] {
        assert!(
            e.contains("refused by the server's auth (403)")
                && e.contains("registry.nacos.username and registry.nacos.password"),
            "{what}: {e}"
        );
        assert!(
            !e.contains("not-the-pass-9f2") && !e.contains("s3cret"),
            "{what}: {e}"
        );
    }
    reg.close().await.unwrap();
}

/// Seata's layout both ways over `protocol`: ours (two instances: the batch path over
/// gRPC) seen by a plain nacos-sdk client as Seata lays them out, a TC registered by
/// another client as Seata does seen by ours, another cluster's TC kept apart, and
/// removals seen.
pub async fn seata_layout_both_ways(protocol: &str) {
    let server = Rnacos::start().expect("start rnacos");
    let reg = NacosRegistry::connect(&config(&server, &[("registry.nacos.protocol", protocol)]))
        .await
        .unwrap();
    let raw = raw_client(&server).await;

    let mut w = reg.watch("default").await.unwrap();
    assert!(w.next().await.unwrap().is_empty());

    // Ours: register two instances (one connection keeps one registration per service,
    // so this exercises the batch path), see both, in Seata's layout for a raw client.
    let a = Instance::parse("10.0.0.1:8091").unwrap().with_weight(3);
    let b = Instance::parse("10.0.0.2:8091").unwrap();
    reg.register("default", &a).await.unwrap();
    reg.register("default", &b).await.unwrap();
    let s = wait_for(&mut w, WITHIN, "our two instances", |s| s.len() == 2).await;
    assert_eq!(addrs(&s), vec!["10.0.0.1:8091", "10.0.0.2:8091"]);
    assert_eq!(s.instances()[0].weight(), 3);
    let seen = raw
        .get_all_instances(
            "seata-server".into(),
            Some("DEFAULT_GROUP".into()),
            vec!["default".into()],
            false,
        )
        .await
        .unwrap();
    let mut raw_addrs: Vec<String> = seen
        .iter()
        .map(|i| format!("{}:{}", i.ip, i.port))
        .collect();
    raw_addrs.sort();
    assert_eq!(raw_addrs, vec!["10.0.0.1:8091", "10.0.0.2:8091"]);
    assert!(
        seen.iter()
            .all(|i| i.cluster_name.as_deref() == Some("default") && i.ephemeral)
    );

    // A TC registered by another client exactly as Seata does:
    // registerInstance("seata-server", "DEFAULT_GROUP", ip, port, cluster).
    let tc = ServiceInstance {
        ip: "10.0.0.9".into(),
        port: 8091,
        cluster_name: Some("default".into()),
        ..Default::default()
    };
    raw.register_instance(
        "seata-server".into(),
        Some("DEFAULT_GROUP".into()),
        tc.clone(),
    )
    .await
    .unwrap();
    wait_for(&mut w, WITHIN, "the Seata-registered TC", |s| {
        addrs(s).contains(&"10.0.0.9:8091".to_string())
    })
    .await;
    assert_eq!(reg.lookup("default").await.unwrap().len(), 3);

    // Another cluster's TC is not ours.
    let other = ServiceInstance {
        ip: "10.0.0.8".into(),
        port: 8091,
        cluster_name: Some("other".into()),
        ..Default::default()
    };
    let raw2 = raw_client(&server).await;
    raw2.register_instance("seata-server".into(), Some("DEFAULT_GROUP".into()), other)
        .await
        .unwrap();
    assert_eq!(reg.lookup("other").await.unwrap().len(), 1);

    // Removals are seen.
    raw.deregister_instance("seata-server".into(), Some("DEFAULT_GROUP".into()), tc)
        .await
        .unwrap();
    reg.unregister("default", &b).await.unwrap();
    let s = wait_for(&mut w, WITHIN, "removals", |s| s.len() == 1).await;
    assert_eq!(addrs(&s), vec!["10.0.0.1:8091"]);

    reg.close().await.unwrap();
}
