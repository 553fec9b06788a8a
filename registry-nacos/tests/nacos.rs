//! The Nacos registry against a real Nacos-protocol server (rnacos, started by testkit).

use std::time::{Duration, Instant};

use meshline_registry_core::{Config, Instance, RegistryService};
use meshline_registry_nacos::NacosRegistry;
use meshline_testkit::Rnacos;
use meshline_testkit::watch::{addrs, survive_outage, wait_for};
use nacos_sdk::api::naming::{NamingService, NamingServiceBuilder, ServiceInstance};
use nacos_sdk::api::props::ClientProps;

const WITHIN: Duration = Duration::from_secs(10);

fn config(server: &Rnacos) -> Config {
    let mut c = Config::default();
    c.registry.kind = "nacos".into();
    c.registry.nacos.server_addr = server.http_addr();
    c.registry.nacos.grpc_port = Some(server.grpc_port());
    c
}

/// A plain nacos-sdk client, as a Seata TC (Java) or any other client would use it.
async fn raw_client(server: &Rnacos) -> NamingService {
    NamingServiceBuilder::new(
        ClientProps::new()
            .server_addr(server.http_addr())
            .remote_grpc_port(server.grpc_port())
            .app_name("seata-server")
            .env_first(false),
    )
    .build()
    .await
    .expect("raw nacos client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_and_seata_layout_interop() {
    let server = Rnacos::start().expect("start rnacos");
    let reg = NacosRegistry::connect(&config(&server)).await.unwrap();
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

    // close() removes what we registered; empty protection keeps the watcher's list,
    // a fresh lookup sees the truth.
    reg.close().await.unwrap();
    let probe = NacosRegistry::connect(&config(&server)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !probe.lookup("default").await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "close() did not deregister");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    probe.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_and_restart_the_server() {
    let server = Rnacos::start().expect("start rnacos");
    let reg = NacosRegistry::connect(&config(&server)).await.unwrap();
    let me = Instance::parse("10.1.0.1:8091").unwrap();
    reg.register("default", &me).await.unwrap();
    let mut w = reg.watch("default").await.unwrap();
    wait_for(&mut w, WITHIN, "our registration", |s| s.len() == 1).await;
    assert!(w.health().is_connected());

    let server = survive_outage(
        &mut w,
        server,
        Duration::from_secs(5),
        Duration::from_secs(30),
    )
    .await;
    // Our registration comes back (nacos-sdk redo), seen through the server, and the
    // watch resyncs and reports connected.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = reg.lookup("default").await.map(|l| l.len()).unwrap_or(0);
        if w.health().is_connected() && listed == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "registration not restored after restart: health {:?}, listed {listed}",
            w.health()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(addrs(&w.current()), vec!["10.1.0.1:8091"]);
    reg.close().await.unwrap();
    drop(server);
}

/// Register on one client, time until another client's watch sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn convergence() {
    let server = Rnacos::start().expect("start rnacos");
    let writer = NacosRegistry::connect(&config(&server)).await.unwrap();
    let reader = NacosRegistry::connect(&config(&server)).await.unwrap();
    let mut w = reader.watch("conv").await.unwrap();
    w.next().await.unwrap();
    const N: u16 = 100;
    let mut samples = Vec::with_capacity(N as usize);
    for i in 0..N {
        let inst = Instance::new("10.2.0.1", 10000 + i).unwrap();
        let t0 = Instant::now();
        writer.register("conv", &inst).await.unwrap();
        wait_for(&mut w, WITHIN, "registration", |s| {
            s.len() == usize::from(i) + 1
        })
        .await;
        samples.push(t0.elapsed());
    }
    samples.sort();
    let p50 = samples[samples.len() / 2];
    let p99 = samples[samples.len() * 99 / 100];
    println!("nacos (rnacos) convergence over {N} registrations: p50 {p50:?}, p99 {p99:?}");
    // Bounded by the push path, and at worst by our resync period plus a round trip.
    assert!(
        p99 < meshline_registry_nacos::RESYNC_PERIOD + Duration::from_millis(500),
        "p99 {p99:?}"
    );
    writer.close().await.unwrap();
    reader.close().await.unwrap();
}

/// Username/password reach the server: with auth on, the right credentials work and a
/// wrong password is refused with an error (never a silent success).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn username_and_password_are_used() {
    let server = Rnacos::start_with_auth("meshline", "s3cret-pass").expect("start rnacos");
    let mut good = config(&server);
    good.registry.nacos.username = Some("meshline".into());
    good.registry.nacos.password = Some("s3cret-pass".into());
    let reg = NacosRegistry::connect(&good).await.unwrap();
    let me = Instance::parse("10.3.0.1:8091").unwrap();
    reg.register("default", &me).await.unwrap();
    let mut w = reg.watch("default").await.unwrap();
    wait_for(&mut w, WITHIN, "our registration", |s| s.len() == 1).await;

    let mut bad = config(&server);
    bad.registry.nacos.username = Some("meshline".into());
    bad.registry.nacos.password = Some("wrong".into());
    let refused = match NacosRegistry::connect(&bad).await {
        Err(_) => true,
        Ok(r) => r.lookup("default").await.is_err(),
    };
    assert!(
        refused,
        "a wrong password must not be able to read the registry"
    );
    let anonymous = match NacosRegistry::connect(&config(&server)).await {
        Err(_) => true,
        Ok(r) => r
            .register("default", &Instance::parse("10.3.0.2:1").unwrap())
            .await
            .is_err(),
    };
    assert!(
        anonymous,
        "without credentials registration must be refused"
    );
    reg.close().await.unwrap();
}

/// With nothing listening, `connect` fails with the server's address and the cause
/// within its connect timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_an_error_naming_the_address() {
    let port = meshline_testkit::closed_port().unwrap();
    let grpc = meshline_testkit::closed_port().unwrap();
    let mut c = Config::default();
    c.registry.kind = "nacos".into();
    c.registry.nacos.server_addr = format!("127.0.0.1:{port}");
    c.registry.nacos.grpc_port = Some(grpc);
    let t = Instant::now();
    let text = NacosRegistry::connect(&c).await.unwrap_err().to_string();
    eprintln!("after {:?}: {text}", t.elapsed());
    assert!(
        text.starts_with(&format!(
            "nacos registry at 127.0.0.1:{port} (gRPC port {grpc}): "
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("127.0.0.1:{grpc} (gRPC): Connection refused")),
        "{text}"
    );
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
}
