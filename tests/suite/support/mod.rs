//! What the config-centre tests (`tests/suite/centre_*.rs`) share: Seata's keys as they are
//! stored in a centre, the "a Discovery follows a vgroupMapping change" measurement,
//! and a process-wide log capture for the secret checks.
//!
//! Each centre test uses part of it.
#![allow(dead_code)]

use meshline::loadbalance::LoadBalanceConfig;
use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use meshline::centre::{discovery_from_live, live_config};
use meshline::core::centre::LiveConfig;
use meshline::{ConfigLoader, Format};
use meshline_testkit::watch::{LogBuf, addrs, wait_for};

/// The tx group the tests map.
pub const GROUP: &str = "my_group";
/// Its mapping key.
pub const MAPPING_KEY: &str = "service.vgroupMapping.my_group";
/// The member of cluster `a`.
pub const A: &str = "127.0.0.1:18091";
/// The member of cluster `b`.
pub const B: &str = "127.0.0.1:18092";
/// The bound of the acceptance line: a change is followed within 2 s.
pub const WITHIN: Duration = Duration::from_secs(2);

/// The balancer every [`blob`] names (`client.loadBalance.type`).
pub const BLOB_BALANCER: &str = "RoundRobinLoadBalance";
/// The balancer the client's file names under it in [`environment_over_all`].
pub const FILE_BALANCER: &str = "XID";
/// The balancer the environment names over it in [`environment_over_all`].
pub const ENV_BALANCER: &str = "LeastActiveLoadBalance";

/// A `seata.properties` blob: the grouplists of `a` and `b`, the balancer
/// [`BLOB_BALANCER`], and the mapping of [`GROUP`] to `mapped` when given.
pub fn blob(mapped: Option<&str>) -> String {
    let mut text = format!(
        "service.a.grouplist={A}\nservice.b.grouplist={B}\n\
         client.loadBalance.type={BLOB_BALANCER}\n"
    );
    if let Some(c) = mapped {
        text.push_str(&format!("{MAPPING_KEY}={c}\n"));
    }
    text
}

/// A client configuration with `config.type=<kind>`, the `config.<kind>.*` keys given,
/// the file registry (so the members come from the grouplists) and tx group [`GROUP`].
pub fn loader(kind: &str, keys: &[(&str, String)]) -> ConfigLoader {
    loader_on(ConfigLoader::new(), kind, keys)
}

/// [`loader`] after the sources `base` already has (a client's file).
pub fn loader_on(base: ConfigLoader, kind: &str, keys: &[(&str, String)]) -> ConfigLoader {
    let mut l = base
        .set("registry.type", "file")
        .set("txServiceGroup", GROUP)
        .set("config.type", kind);
    for (k, v) in keys {
        l = l.set(format!("config.{kind}.{k}"), v.clone());
    }
    l
}

/// The live configuration of `loader`, whose mapping of [`GROUP`] must be `expected`.
pub async fn live(loader: ConfigLoader, expected: &str) -> LiveConfig {
    let live = live_config(loader).await.expect("the centre is read");
    let cfg = live.current();
    assert_eq!(
        cfg.service.vgroup_mapping.get(GROUP).map(String::as_str),
        Some(expected),
        "the mapping read from the centre"
    );
    assert_eq!(cfg.grouplist("a").unwrap(), vec![A.to_string()]);
    assert_eq!(cfg.grouplist("b").unwrap(), vec![B.to_string()]);
    live
}

/// The environment over all: a client whose file names [`FILE_BALANCER`] reads the
/// centre's blob, whose [`BLOB_BALANCER`] wins; `MESHLINE_CLIENT__LOAD_BALANCE__TYPE`
/// beats both. `keys` are the centre's `config.<kind>.*` keys ([`loader`]); its blob
/// maps [`GROUP`] to `mapped`.
pub async fn environment_over_all(kind: &str, keys: &[(&str, String)], mapped: &str) {
    let file = ConfigLoader::new().text(
        format!("client.loadBalance.type={FILE_BALANCER}\n"),
        Format::Properties,
    );
    let client = loader_on(file, kind, keys);
    let from_blob = live(client.clone(), mapped).await;
    assert_eq!(
        LoadBalanceConfig::from_config(&from_blob.current())
            .unwrap()
            .kind,
        BLOB_BALANCER,
        "{kind}: the blob's balancer, over the file's"
    );
    let env = client.env_vars([("MESHLINE_CLIENT__LOAD_BALANCE__TYPE", ENV_BALANCER)]);
    let from_env = live(env, mapped).await;
    assert_eq!(
        LoadBalanceConfig::from_config(&from_env.current())
            .unwrap()
            .kind,
        ENV_BALANCER,
        "{kind}: the environment over the centre's blob"
    );
}

/// A Discovery built on `live` watches [`GROUP`] on cluster `a`; `change` remaps it to
/// `b` through the server's own API; the watch must show `b`'s member within
/// [`WITHIN`] of the start of the change. Prints and returns the time it took.
pub async fn follows_change(
    live: &LiveConfig,
    what: &str,
    change: impl Future<Output = ()>,
) -> Duration {
    let discovery = discovery_from_live(live).await.expect("discovery");
    let mut w = discovery.watch(GROUP).await.expect("watch the group");
    wait_for(&mut w, Duration::from_secs(5), "cluster a's member", |s| {
        addrs(s) == [A]
    })
    .await;
    let started = Instant::now();
    change.await;
    // Waited for longer than the bound so that a slow move is measured, then failed.
    wait_for(&mut w, Duration::from_secs(35), "cluster b's member", |s| {
        addrs(s) == [B]
    })
    .await;
    let took = started.elapsed();
    println!("{what}: the Discovery moved from cluster a to b {took:?} after the change started");
    assert!(
        took < WITHIN,
        "{what}: followed after {took:?}, over {WITHIN:?}"
    );
    took
}

/// A real etcd and a client of its own API, through which the etcd tests write the
/// keys a centre then reads.
pub async fn etcd_and_client() -> (meshline_testkit::Etcd, etcd_client::Client) {
    let server = meshline_testkit::Etcd::start().expect("etcd");
    let client = etcd_client::Client::connect([server.endpoint()], None)
        .await
        .expect("test client");
    (server, client)
}

/// The error of a live configuration of a centre of `kind`, with the `config.<kind>.*`
/// keys given, whose server cannot be reached; as text, for the checks of what it names.
pub async fn unreachable_error(kind: &str, keys: &[(&str, String)]) -> String {
    live_config(loader(kind, keys))
        .await
        .expect_err("no server there")
        .to_string()
}

/// Asserts that a centre of `kind` whose `serverAddr` has nobody listening (the other
/// `config.<kind>.*` keys `extra` gives) is an error naming the address and the cause.
pub async fn assert_unreachable_refused(kind: &str, extra: &[(&str, String)]) {
    let port = meshline_testkit::closed_port().unwrap();
    let addr = format!("127.0.0.1:{port}");
    let mut keys = vec![("serverAddr", addr.clone())];
    keys.extend_from_slice(extra);
    let err = unreachable_error(kind, &keys).await;
    assert!(err.contains(&addr), "{err}");
    assert!(err.contains("refused"), "the cause: {err}");
}

/// Every log line of the process at `trace`, through the filter meshline ships
/// (`meshline_registry_core::redact::LOG_DIRECTIVES`): a process-wide subscriber, so
/// that events from every thread a client library runs on are seen.
pub fn trace_logs() -> LogBuf {
    static LOGS: OnceLock<LogBuf> = OnceLock::new();
    LOGS.get_or_init(|| {
        let directives = std::iter::once("trace".to_string())
            .chain(
                meshline::core::redact::LOG_DIRECTIVES
                    .iter()
                    .map(|d| d.to_string()),
            )
            .collect::<Vec<_>>()
            .join(",");
        LogBuf::global(&directives)
    })
    .clone()
}

/// Asserts that `secret` is in none of `texts` nor in the captured logs, and that the
/// capture saw `seen` (else it would prove nothing).
pub fn assert_secret_kept(logs: &LogBuf, secret: &str, seen: &str, texts: &[&str]) {
    for t in texts {
        assert!(!t.contains(secret), "the secret shows in: {t}");
    }
    meshline_testkit::watch::assert_log_keeps(&logs.text(), seen, secret);
}
