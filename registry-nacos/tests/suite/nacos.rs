//! The Nacos registry against a real Nacos-protocol server (rnacos, started by
//! testkit): the conformance suite, then what is Nacos's own (Seata's layout with raw
//! nacos-sdk clients, convergence, credentials).

use crate::support;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::{Instance, RegistryService};
use meshline_registry_nacos::NacosRegistry;
use meshline_testkit::Rnacos;
use meshline_testkit::watch::{addrs, wait_for};
use support::{config, harness};

const WITHIN: Duration = Duration::from_secs(10);

// No `crash_removed_within_ttl`: a Nacos 2 registration lives as long as the client's
// gRPC connection (the server drops it when the connection closes), so a crash is
// removed as fast as a deregistration, and the client has no `abandon`.
meshline_testkit::conformance_tests!(harness() => round_trip, drop_ends_watches,
    outage_stale_resync, garbage_skipped, empty_protection);

/// Seata's layout both ways: ours seen by a plain nacos-sdk client, a TC registered as
/// Seata registers it seen by ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seata_layout_both_ways() {
    support::seata_layout_both_ways("grpc").await;
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
    support::credentials_are_used("grpc").await;
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

/// A Nacos 1.x server (HTTP only) standing in on port P, nothing on P + 1000, under
/// `registry.nacos.contextPath`: with `protocol` left to `auto` the registry asks its
/// version there and speaks HTTP to it; with `grpc` forced the connect error names the
/// version it answered and the key to set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nacos_1x_server_is_spoken_to_over_http_or_named() {
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
            // What Nacos 1.4.1's ServerStateController and health check answer.
            let (status, body) = if path == "/custom/v1/console/server/state" {
                (
                    "200 OK",
                    r#"{"standalone_mode":"standalone","function_mode":null,"version":"1.4.1"}"#,
                )
            } else if path.starts_with("/custom/v1/ns/operator/metrics?") {
                ("200 OK", r#"{"status":"UP"}"#)
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
    let config = |protocol: &str| {
        ConfigLoader::new()
            .set("registry.type", "nacos")
            .set(
                "registry.nacos.serverAddr",
                format!("http://127.0.0.1:{port}"),
            )
            .set("registry.nacos.contextPath", "/custom/")
            .set("registry.nacos.protocol", protocol)
            .load()
            .unwrap()
    };
    let reg = NacosRegistry::connect(&config("auto")).await.unwrap();
    assert_eq!(reg.protocol(), meshline_registry_nacos::Protocol::Http);
    drop(reg);
    let t = Instant::now();
    let text = NacosRegistry::connect(&config("grpc"))
        .await
        .unwrap_err()
        .to_string();
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
            "127.0.0.1:{port} answers HTTP as Nacos 1.4.1: Nacos 1.x speaks HTTP only; set \
             registry.nacos.protocol to http"
        )),
        "{text}"
    );
    let asked = asked.lock().unwrap().clone();
    assert!(
        asked.contains(&"/custom/v1/console/server/state".to_string()),
        "{asked:?}"
    );
    assert!(
        asked
            .iter()
            .any(|p| p.starts_with("/custom/v1/ns/operator/metrics?")),
        "{asked:?}"
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
