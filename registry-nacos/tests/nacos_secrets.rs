//! Secrets, for Nacos: the password never reaches a log line, an error or a
//! stale reason, at `trace`, through a login, a refused login and a reconnect after a
//! server restart — with the log filter meshline ships
//! (`meshline_registry_core::redact::LOG_DIRECTIVES`, which the CLI and the examples
//! install and the crate docs tell library users to add).
//!
//! The registry's own naming client never logs the password, filter or not. The
//! configuration centre runs on nacos-sdk, which does log it; the directive is what
//! keeps it out there.
//!
//! A test binary of its own: the subscriber is the process-wide default, so events from
//! every thread nacos-sdk runs on are captured (a thread-local capture could miss
//! them and pass for the wrong reason). A second layer without the directive records
//! the same events: that nacos-sdk (the centre's login) does print the password there
//! shows the filter is what keeps it out (and that the capture sees nacos-sdk at all).

use std::time::Duration;

use meshline_registry_core::config::ConfigLoader;
use meshline_registry_core::redact::LOG_DIRECTIVES;
use meshline_registry_core::{Config, Instance, RegistryService};
use meshline_registry_nacos::{NacosCentre, NacosRegistry};
use meshline_testkit::Rnacos;
use meshline_testkit::watch::{LogBuf, assert_log_keeps, wait_for};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{EnvFilter, Layer};

const SECRET: &str = "Zq8-nacos-s3cret-Kx";

fn config(server: &Rnacos, password: &str) -> Config {
    ConfigLoader::new()
        .set("registry.type", "nacos")
        .set("registry.nacos.serverAddr", server.http_addr())
        .set("registry.nacos.grpcPort", server.grpc_port().to_string())
        .set("registry.nacos.username", "meshline")
        .set("registry.nacos.password", password)
        .set("config.type", "nacos")
        .set("config.nacos.serverAddr", server.http_addr())
        .set("config.nacos.grpcPort", server.grpc_port().to_string())
        .set("config.nacos.username", "meshline")
        .set("config.nacos.password", password)
        .load()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_never_reaches_the_log_with_the_shipped_filter() {
    let shipped = LogBuf::default();
    let unfiltered = LogBuf::default();
    let (s, u) = (shipped.clone(), unfiltered.clone());
    let directives = std::iter::once("trace".to_string())
        .chain(LOG_DIRECTIVES.iter().map(|d| d.to_string()))
        .collect::<Vec<_>>()
        .join(",");
    let subscriber = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || s.clone())
                .with_filter(EnvFilter::new(directives)),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || u.clone())
                .with_filter(EnvFilter::new("trace")),
        );
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");

    let mut server = Rnacos::start_with_auth("meshline", SECRET).expect("start rnacos");
    // Logs in, registers, watches.
    let reg = NacosRegistry::connect(&config(&server, SECRET))
        .await
        .unwrap();
    let me = Instance::parse("10.3.9.1:8091").unwrap();
    reg.register("default", &me).await.unwrap();
    let mut w = reg.watch("default").await.unwrap();
    wait_for(&mut w, Duration::from_secs(20), "our registration", |s| {
        s.len() == 1
    })
    .await;
    // A refused login (its error text is checked too).
    let wrong = format!("{SECRET}-wrong");
    let refused = match NacosRegistry::connect(&config(&server, &wrong)).await {
        Err(e) => format!("{e} {e:?}"),
        Ok(r) => match r.lookup("default").await {
            Err(e) => format!("{e} {e:?}"),
            Ok(_) => panic!("a wrong password must not read the registry"),
        },
    };
    assert!(
        !refused.contains(SECRET),
        "the error shows the secret: {refused}"
    );
    // A restart: the client logs in again (and registers our instance again);
    // whatever stale reason a watcher saw meanwhile is checked too.
    server.restart().expect("restart rnacos");
    let mut stale_reason = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    loop {
        if let meshline_registry_core::Health::Stale { reason, .. } = w.health() {
            stale_reason = reason;
        }
        if reg
            .lookup("default")
            .await
            .is_ok_and(|l| l.iter().any(|i| i.key() == me.key()))
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no reconnect within 40 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!stale_reason.contains(SECRET), "{stale_reason}");
    assert!(!format!("{reg:?}").contains(SECRET));
    reg.close().await.unwrap();
    // The registry's client logs no password, even unfiltered (at `trace`).
    let registry_only = unfiltered.text();
    assert_log_keeps(&registry_only, "meshline_registry_nacos", SECRET);
    // The configuration centre (nacos-sdk) logs in with the same credentials.
    let centre = NacosCentre::connect(&config(&server, SECRET))
        .await
        .unwrap();
    drop(centre);

    // Through the shipped filter, nacos-sdk's logs (the centre's) hold no password.
    assert_log_keeps(&shipped.text(), "nacos", SECRET);
    // Without the directive nacos-sdk's login logging (the centre's) prints it: the
    // filter matters.
    assert!(
        unfiltered.text().contains(SECRET),
        "nacos-sdk no longer logs the login: LOG_DIRECTIVES may be obsolete"
    );
}
