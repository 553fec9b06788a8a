//! The Nacos registry against a real Nacos-protocol server (rnacos, started by
//! testkit): the conformance suite, then what is Nacos's own (Seata's layout with raw
//! nacos-sdk clients, convergence, credentials).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Config, Instance, RegistryError, RegistryService};
use meshline_registry_nacos::NacosRegistry;
use meshline_testkit::Rnacos;
use meshline_testkit::conformance::{Garbage, Harness, Lifetime, Server};
use meshline_testkit::watch::{addrs, wait_for};
use nacos_sdk::api::naming::{NamingService, NamingServiceBuilder, ServiceInstance};
use nacos_sdk::api::props::ClientProps;

const WITHIN: Duration = Duration::from_secs(10);

/// A config for `server` with empty protection on, then `extra` keys.
fn config(server: &Rnacos, extra: &[(&str, &str)]) -> Config {
    let (addr, grpc) = (server.http_addr(), server.grpc_port().to_string());
    let base = [
        ("registry.type", "nacos"),
        ("registry.nacos.serverAddr", addr.as_str()),
        ("registry.nacos.grpcPort", grpc.as_str()),
        ("registry.empty-protection", "true"),
    ];
    meshline_testkit::config_of(&base, extra)
}

struct NacosHarness {
    server: Rnacos,
    /// Raw clients that wrote garbage: their (ephemeral) instances live with them.
    raw: Mutex<Vec<NamingService>>,
}

async fn harness() -> NacosHarness {
    meshline_testkit::watch::init_logs("meshline_registry_nacos=info");
    NacosHarness {
        server: Rnacos::start().expect("start rnacos"),
        raw: Mutex::new(Vec::new()),
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
        config(&self.server, extra)
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

// No `crash_removed_within_ttl`: a Nacos 2 registration lives as long as the client's
// gRPC connection (the server drops it when the connection closes), so a crash is
// removed as fast as a deregistration, and the client has no `abandon`.
meshline_testkit::conformance_tests!(harness() => round_trip, drop_ends_watches,
    outage_stale_resync, garbage_skipped, empty_protection);

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
async fn seata_layout_both_ways() {
    let server = Rnacos::start().expect("start rnacos");
    let reg = NacosRegistry::connect(&config(&server, &[])).await.unwrap();
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

/// Register on one client, time until another client's watch sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn convergence() {
    let server = Rnacos::start().expect("start rnacos");
    let writer = NacosRegistry::connect(&config(&server, &[])).await.unwrap();
    let reader = NacosRegistry::connect(&config(&server, &[])).await.unwrap();
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
    // The true bound of each sample (not of a percentile: p99 of 100 samples is their
    // maximum): a push, or at worst
    // the next resync query (every RESYNC_PERIOD), plus a round trip, 2 s on a loaded
    // machine.
    let bound = meshline_registry_nacos::RESYNC_PERIOD + Duration::from_secs(2);
    let slowest = samples.iter().copied().max().unwrap();
    samples.sort();
    let p50 = samples[samples.len() / 2];
    let p90 = samples[samples.len() * 9 / 10];
    println!(
        "nacos (rnacos) convergence over {N} registrations: p50 {p50:?}, p90 {p90:?}, max {slowest:?}"
    );
    assert!(
        slowest <= bound,
        "a registration took {slowest:?} (> {bound:?})"
    );
    writer.close().await.unwrap();
    reader.close().await.unwrap();
}

/// Username/password reach the server: with auth on, the right credentials work and a
/// wrong password, and no credentials, are refused with the auth error naming the keys
/// to check (never a silent success, never a timeout or another failure).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn username_and_password_are_used() {
    let server = Rnacos::start_with_auth("meshline", "s3cret-pass").expect("start rnacos");
    let good = config(
        &server,
        &[
            ("registry.nacos.username", "meshline"),
            ("registry.nacos.password", "s3cret-pass"),
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
        ],
    );
    let refused = match NacosRegistry::connect(&bad).await {
        Err(e) => e.to_string(),
        Ok(r) => match r.lookup("default").await {
            Err(e) => e.to_string(),
            Ok(s) => panic!("a wrong password read the registry: {s:?}"),
        },
    };
    let anonymous = match NacosRegistry::connect(&config(&server, &[])).await {
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

/// With nothing listening, `connect` fails with the server's address and the cause
/// within its connect timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_an_error_naming_the_address() {
    let port = meshline_testkit::closed_port().unwrap();
    let grpc = meshline_testkit::closed_port().unwrap();
    let c = ConfigLoader::new()
        .set("registry.type", "nacos")
        .set("registry.nacos.serverAddr", format!("127.0.0.1:{port}"))
        .set("registry.nacos.grpcPort", grpc.to_string())
        .load()
        .unwrap();
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

/// `serverAddr` as Seata users write it for the Java client, `http://host:port`:
/// registers and discovers (nacos-sdk alone would read it as host `http`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_addr_registers_and_discovers() {
    let server = Rnacos::start().expect("start rnacos");
    let http = config(
        &server,
        &[(
            "registry.nacos.serverAddr",
            &format!("http://{}", server.http_addr()),
        )],
    );
    let reg = NacosRegistry::connect(&http).await.unwrap();
    let me = Instance::parse("10.5.0.1:8091").unwrap();
    reg.register("default", &me).await.unwrap();
    let mut w = reg.watch("default").await.unwrap();
    wait_for(&mut w, WITHIN, "our registration", |s| {
        addrs(s) == ["10.5.0.1:8091"]
    })
    .await;
    // The same server, reached with the plain address by another client.
    let other = NacosRegistry::connect(&config(&server, &[])).await.unwrap();
    let seen: Vec<String> = other
        .lookup("default")
        .await
        .unwrap()
        .iter()
        .map(|i| i.to_string())
        .collect();
    assert_eq!(seen, ["10.5.0.1:8091"]);
    other.close().await.unwrap();
    reg.close().await.unwrap();
}

/// A free port `p` (held by the returned listener) with nothing on `p + 1000`: a Nacos
/// 1.x server's HTTP port without the gRPC port a 2.x client looks for.
async fn port_without_grpc_port() -> (tokio::net::TcpListener, u16) {
    for _ in 0..100 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let p = l.local_addr().unwrap().port();
        let Some(grpc) = p.checked_add(1000) else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", grpc)).is_ok() {
            return (l, p);
        }
    }
    panic!("no free port p with p + 1000 free in 100 tries");
}

/// A Nacos 1.x server (HTTP only) standing in on port P, nothing on P + 1000: the
/// connect error says Nacos 1.x is not supported, naming the version it answered, and
/// the version check goes to `registry.nacos.contextPath`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nacos_1x_server_is_named_as_unsupported() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (listener, port) = port_without_grpc_port().await;
    let asked = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
    let log = asked.clone();
    let stub = tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1024];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let head = String::from_utf8_lossy(&buf).into_owned();
            let path = head.split(' ').nth(1).unwrap_or_default().to_string();
            log.lock().unwrap().push(path.clone());
            // What Nacos 1.4.1's ServerStateController answers.
            let (status, body) = if path == "/custom/v1/console/server/state" {
                (
                    "200 OK",
                    r#"{"standalone_mode":"standalone","function_mode":null,"version":"1.4.1"}"#,
                )
            } else {
                ("404 Not Found", "")
            };
            let answer = format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(answer.as_bytes()).await;
        }
    });
    let c = ConfigLoader::new()
        .set("registry.type", "nacos")
        .set(
            "registry.nacos.serverAddr",
            format!("http://127.0.0.1:{port}"),
        )
        .set("registry.nacos.contextPath", "/custom/")
        .load()
        .unwrap();
    let t = Instant::now();
    let text = NacosRegistry::connect(&c).await.unwrap_err().to_string();
    eprintln!("after {:?}: {text}", t.elapsed());
    stub.abort();
    assert!(
        text.contains(&format!(
            "127.0.0.1:{} (gRPC): Connection refused",
            port + 1000
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "127.0.0.1:{port} answers HTTP as Nacos 1.4.1: Nacos 1.x (HTTP only) is not supported"
        )),
        "{text}"
    );
    assert!(
        asked
            .lock()
            .unwrap()
            .contains(&"/custom/v1/console/server/state".to_string()),
        "{:?}",
        asked.lock().unwrap()
    );
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
}

/// An unregister made while the server is down fails. The instance
/// must not come back after the reconnect: the client's redo forgets it when the
/// deregistration is asked for (nacos-sdk 0.8, the client before ours, kept it and
/// registered it *again* on the next reconnect), and the registry's background retry
/// deregisters it once the server is back. It must stay gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unregister_that_failed_while_the_server_was_down_is_retried() {
    /// How long absence is watched, twice over: a redo would bring the instance back
    /// at the reconnect, and a retry once the server answers.
    const REDO: Duration = Duration::from_secs(3);
    meshline_testkit::watch::init_logs("meshline_registry_nacos=info");
    let mut server = Rnacos::start().expect("start rnacos");
    let reg = NacosRegistry::connect(&config(&server, &[])).await.unwrap();
    let me = Instance::parse("10.8.8.1:8091").unwrap();
    reg.register("default", &me).await.unwrap();

    server.kill();
    let err = reg.unregister("default", &me).await.unwrap_err();
    let failed_at = Instant::now();
    eprintln!("unregister while down: {err}");
    server.restart().expect("restart rnacos");
    // The registrant is connected again once its own lookup answers.
    let deadline = Instant::now() + Duration::from_secs(60);
    while reg.lookup("default").await.is_err() {
        assert!(Instant::now() < deadline, "no reconnect within 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let reconnected = failed_at.elapsed();
    eprintln!("reconnected {reconnected:?} after the failed unregister");
    // From now on the retry (200 ms doubling to 30 s, jittered into the upper half of
    // each delay) tries again by 3 x the time since the failure + 200 ms; each try
    // takes at most the request timeout. The instance must then be absent and stay
    // absent for two periods of `REDO`.
    let within = (reconnected * 3 + Duration::from_millis(200)).min(Duration::from_secs(30))
        + meshline_registry_nacos::REQUEST_TIMEOUT
        + REDO
        + Duration::from_secs(2);
    let observer = NacosRegistry::connect(&config(&server, &[])).await.unwrap();
    let deadline = Instant::now() + within + REDO * 2;
    let mut absent_since: Option<Instant> = None;
    loop {
        let listed = observer
            .lookup("default")
            .await
            .unwrap()
            .iter()
            .any(|i| i.key() == me.key());
        match (listed, absent_since) {
            (true, _) => absent_since = None,
            (false, None) => absent_since = Some(Instant::now()),
            (false, Some(t)) if t.elapsed() >= REDO * 2 => break,
            (false, Some(_)) => {}
        }
        assert!(
            Instant::now() < deadline,
            "the instance is still listed (or came back) {:?} after the reconnect \
             (absent since {:?})",
            deadline.elapsed() + within + REDO * 2,
            absent_since.map(|t| t.elapsed())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    observer.close().await.unwrap();
    reg.close().await.unwrap();
}
