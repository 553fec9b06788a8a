//! `meshline doctor` end to end, on real servers: each of the causes Seata users hit
//! is named with its fix, TCs are probed (connect, PING,
//! RegisterTM) with the rpc-client's own server as the TC, and the exit code is 0 only
//! when a TC accepted the registration.

use std::net::SocketAddr;
use std::process::{Command, Output};

use meshline::rpc::message::register_reply;
use meshline::rpc::{InboundRequest, Payload, Server};

/// `meshline --config <config> <args>`, without the `MESHLINE_*` variables of the
/// environment the tests run in (they would override the file under test).
fn run_with_config(config: &std::path::Path, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_meshline"));
    for (k, _) in std::env::vars() {
        if k.starts_with("MESHLINE_") {
            c.env_remove(k);
        }
    }
    c.arg("--config").arg(config).args(args);
    c.output().unwrap()
}

fn doctor(config: &std::path::Path, extra: &[&str]) -> Output {
    run_with_config(config, &[&["doctor"], extra].concat())
}

/// [`doctor`] on `config` from an async test, on a blocking thread so that the
/// servers the test runs on the runtime keep answering.
async fn doctor_off_runtime(config: std::path::PathBuf) -> Output {
    tokio::task::spawn_blocking(move || doctor(&config, &[]))
        .await
        .unwrap()
}

/// The report in `out` of a doctor that found a cause: asserts the exit code is 1.
fn failed_report(out: &Output) -> String {
    let t = text(out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    t
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn write(dir: &tempfile::TempDir, name: &str, body: &str) -> std::path::PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, body).unwrap();
    p
}

/// A TC on loopback answering RegisterTM with `accept`.
async fn tc(accept: bool) -> Server {
    Server::bind(
        "127.0.0.1:0".parse().unwrap(),
        move |req: InboundRequest| async move {
            let msg = req.payload.decode_seata().ok()?;
            let reply = register_reply(&msg, accept, "2.3.0")?;
            Payload::seata(&reply).ok()
        },
    )
    .await
    .unwrap()
}

/// A port that refuses connections for the whole test (testkit keeps it bound).
fn closed_port() -> u16 {
    meshline_testkit::closed_port().expect("a closed port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_tc_and_a_refusing_tc_are_each_named_and_the_exit_code_is_1() {
    let refusing = tc(false).await;
    let down: SocketAddr = format!("127.0.0.1:{}", closed_port()).parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        &dir,
        "seata.properties",
        &format!(
            "txServiceGroup=my_tx_group\nservice.vgroupMapping.my_tx_group=prod\n\
             service.prod.grouplist={};{down}\n",
            refusing.local_addr()
        ),
    );
    let t = failed_report(&doctor_off_runtime(f).await);
    assert!(
        t.contains("✓ mapping: service.vgroupMapping.my_tx_group=prod"),
        "{t}"
    );
    assert!(t.contains("cluster `prod` lists 2 member(s)"), "{t}");
    // Each TC's own line: the refusing one connected and answered PING, then refused;
    // the down one failed its connect with the socket's own refusal.
    let line_of = |addr: String| {
        t.lines()
            .find(|l| l.contains(&format!("✗ {addr}: ")))
            .unwrap_or_else(|| panic!("no line for {addr}: {t}"))
            .to_string()
    };
    let refused = line_of(refusing.local_addr().to_string());
    assert!(
        refused.contains(": connect ")
            && refused.contains(" ms, PING/PONG ")
            && refused.ends_with(
                "RegisterTM: TC refused TM registration (identified=0, server version 2.3.0)"
            ),
        "{refused}"
    );
    let down_line = line_of(down.to_string());
    assert!(
        down_line.contains("connect failed") && down_line.contains("Connection refused"),
        "{down_line}"
    );
    assert!(!down_line.contains("PING"), "{down_line}");
    assert!(t.contains("fix: a TC that does not answer"), "{t}");
    assert!(t.contains("fix: a TC that refuses RegisterTM"), "{t}");
    assert!(
        t.contains("✗ no TC accepted: none of 2 TC(s) accepted RegisterTM"),
        "{t}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepting_tc_gives_exit_0_and_the_documented_json() {
    let ok = tc(true).await;
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        &dir,
        "seata.properties",
        &format!("service.default.grouplist={}\n", ok.local_addr()),
    );
    let f2 = f.clone();
    let out = doctor_off_runtime(f2).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("✓ ok: 1 of 1 TC(s) of group `default_tx_group` accepted"));

    let out = tokio::task::spawn_blocking(move || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_meshline"));
        c.arg("--config")
            .arg(&f)
            .args(["--json", "doctor", "default_tx_group"]);
        c.output().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(j["group"], "default_tx_group");
    assert_eq!(j["ok"], true);
    let steps: Vec<&str> = j["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["config", "mapping", "registry", "servers"]);
    let s = &j["servers"][0];
    assert_eq!(s["address"], ok.local_addr().to_string());
    assert_eq!(s["accepted"], true);
    for k in ["connect_ms", "ping_ms", "register_ms"] {
        assert!(s[k].as_f64().unwrap() >= 0.0, "{k}: {s}");
    }
    assert!(s["register_error"].is_null());
}

#[test]
fn a_near_miss_mapping_is_named_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        &dir,
        "application.yml",
        "seata:\n  tx-service-group: my_tx_group\n  service:\n    vgroup-mapping:\n      my-tx-group: default\n",
    );
    let t = failed_report(&doctor(&f, &[]));
    assert!(
        t.contains("✗ mapping: no service.vgroupMapping.my_tx_group"),
        "{t}"
    );
    assert!(
        t.contains("near miss: service.vgroupMapping.my-tx-group=default")
            && t.contains("differs only in `-`, `_` or `.` from `my_tx_group`"),
        "{t}"
    );
    assert!(
        t.contains(
            "fix: use one name in both places: set service.vgroupMapping.my_tx_group=default"
        ),
        "{t}"
    );
    assert!(
        t.contains("✗ no TC accepted: no service.vgroupMapping.my_tx_group"),
        "{t}"
    );
}

#[test]
fn a_misspelt_key_is_named_with_did_you_mean() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(&dir, "seata.properties", "registry.tpye=etcd3\n");
    let t = text(&doctor(&f, &[]));
    assert!(
        t.contains("unknown config key `registry.tpye` ignored (did you mean `registry.type`?)"),
        "{t}"
    );
    assert!(t.contains("registry.type=file  (from default)"), "{t}");
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_an_empty_cluster_lists_the_clusters_that_have_members() {
    let etcd = meshline_testkit::Etcd::start().expect("etcd");
    let mut c = meshline::Config::default();
    c.registry.kind = "etcd3".into();
    c.registry
        .section_mut("etcd3")
        .set("serverAddr", etcd.endpoint());
    let registry = meshline::registry::from_config(&c).await.unwrap();
    registry
        .register(
            "default2",
            &meshline::Instance::parse("10.1.0.7:8091").unwrap(),
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        &dir,
        "seata.properties",
        &format!(
            "registry.type=etcd3\nregistry.etcd3.serverAddr={}\n",
            etcd.endpoint()
        ),
    );
    let t = failed_report(&doctor_off_runtime(f).await);
    assert!(t.contains("cluster `default` lists no members"), "{t}");
    assert!(t.contains("10.1.0.7:8091"), "{t}");
    assert!(
        t.contains("set service.vgroupMapping.default_tx_group=default2"),
        "{t}"
    );
    registry.close().await.unwrap();
}

#[cfg(feature = "nacos")]
mod nacos {
    use super::*;
    use meshline_testkit::Rnacos;

    fn registry_keys(server: &Rnacos, group: Option<&str>) -> String {
        let mut s = format!(
            "registry.type=nacos\nregistry.nacos.serverAddr={}\nregistry.nacos.grpcPort={}\n",
            server.http_addr(),
            server.grpc_port()
        );
        if let Some(g) = group {
            s.push_str(&format!("registry.nacos.group={g}\n"));
        }
        s
    }

    /// The TC registered under a team's own group (neither `DEFAULT_GROUP` nor
    /// `SEATA_GROUP`, the two groups a guess would try) while the client reads
    /// `DEFAULT_GROUP`: found through the server's catalog and named with the key.
    /// The test waits for the registry to list the TC, then runs the doctor once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tc_in_any_nacos_group_is_named_with_the_key_to_set() {
        let server = Rnacos::start().expect("rnacos");
        let tc_side = meshline::Config::from_text(
            &registry_keys(&server, Some("TEAM_TX")),
            meshline::Format::Properties,
        )
        .unwrap();
        let registry = meshline::registry::from_config(&tc_side).await.unwrap();
        registry
            .register(
                "default",
                &meshline::Instance::parse("10.2.0.9:8091").unwrap(),
            )
            .await
            .unwrap();
        let mut w = registry.watch("default").await.unwrap();
        meshline_testkit::watch::wait_for(
            &mut w,
            std::time::Duration::from_secs(10),
            "the TC listed in TEAM_TX",
            |s| s.len() == 1,
        )
        .await;
        let dir = tempfile::tempdir().unwrap();
        let f = write(&dir, "seata.properties", &registry_keys(&server, None));
        let t = failed_report(&doctor_off_runtime(f).await);
        assert!(t.contains("cluster `default` lists no members"), "{t}");
        assert!(
            t.contains("service `seata-server` in group `TEAM_TX`, namespace `public`")
                && t.contains("10.2.0.9:8091"),
            "{t}"
        );
        assert!(t.contains("set registry.nacos.group=TEAM_TX"), "{t}");
        registry.close().await.unwrap();
    }

    /// Seata's stock client `registry.conf`: `registry.type = "file"` naming
    /// `file.conf`, and `config.type = "nacos"`. The grouplist is read from the centre,
    /// as Seata's `FileRegistryServiceImpl` reads it through the configuration: the
    /// centre's `service.prod.grouplist` wins over file.conf's, and a cluster only
    /// file.conf has is still found there. The doctor says where each came from.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn seatas_registry_conf_reads_the_grouplist_from_the_nacos_centre() {
        let server = Rnacos::start().expect("rnacos");
        let accepting = tc(true).await;
        let centre_tc = accepting.local_addr();
        tokio::task::block_in_place(|| {
            server.publish_config(
                "seata.properties",
                "SEATA_GROUP",
                &format!(
                    "service.vgroupMapping.my_tx_group=prod
service.prod.grouplist={centre_tc}
"
                ),
            )
        })
        .expect("publish config");
        let dir = tempfile::tempdir().unwrap();
        let closed = closed_port();
        write(
            &dir,
            "file.conf",
            &format!(
                "transport {{\n  type = \"TCP\"\n}}\nservice {{\n  vgroupMapping.my_tx_group = \"default\"\n  \
                 prod.grouplist = \"127.0.0.1:{closed}\"\n  only_file.grouplist = \"127.0.0.1:19111\"\n}}\n"
            ),
        );
        let conf = write(
            &dir,
            "registry.conf",
            &format!(
                "registry {{\n  type = \"file\"\n  file {{\n    name = \"file.conf\"\n  }}\n}}\n\
                 config {{\n  type = \"nacos\"\n  nacos {{\n    serverAddr = \"{}\"\n    grpcPort = {}\n    \
                 namespace = \"\"\n    group = \"SEATA_GROUP\"\n    dataId = \"seata.properties\"\n  }}\n}}\n",
                server.http_addr(),
                server.grpc_port()
            ),
        );
        let run = |args: &'static [&'static str]| {
            let conf = conf.clone();
            async move {
                tokio::task::spawn_blocking(move || run_with_config(&conf, args))
                    .await
                    .unwrap()
            }
        };
        // rnacos takes a moment to serve what was published: wait for it, not a sleep.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let out = loop {
            let out = run(&["lookup", "my_tx_group"]).await;
            if out.status.success() || std::time::Instant::now() > deadline {
                break out;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        };
        assert!(out.status.success(), "lookup: {out:?}");
        assert_eq!(text(&out).trim(), centre_tc.to_string(), "{out:?}");
        let out = run(&["lookup", "--cluster", "only_file"]).await;
        assert_eq!(text(&out).trim(), "127.0.0.1:19111", "{out:?}");
        let out = run(&["doctor", "my_tx_group"]).await;
        let t = text(&out);
        assert_eq!(out.status.code(), Some(0), "{t}");
        assert!(t.contains("grouplist of `prod` from nacos config"), "{t}");
    }

    /// `config.type` is `file` while the mapping lives only in Nacos config.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_mapping_only_in_an_unread_nacos_centre_is_found() {
        let server = Rnacos::start().expect("rnacos");
        tokio::task::block_in_place(|| {
            server.publish_config(
                "seata.properties",
                "SEATA_GROUP",
                "service.vgroupMapping.my_tx_group=prod\n",
            )
        })
        .expect("publish config");
        let dir = tempfile::tempdir().unwrap();
        let f = write(
            &dir,
            "seata.properties",
            &format!(
                "txServiceGroup=my_tx_group\nconfig.type=file\nconfig.nacos.serverAddr={}\n\
                 config.nacos.grpcPort={}\n",
                server.http_addr(),
                server.grpc_port()
            ),
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let t = loop {
            let f = f.clone();
            let out = doctor_off_runtime(f).await;
            let t = text(&out);
            if t.contains("fix: set config.type=nacos") || std::time::Instant::now() > deadline {
                assert_eq!(out.status.code(), Some(1), "{t}");
                break t;
            }
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        };
        assert!(
            t.contains("✗ mapping: no service.vgroupMapping.my_tx_group"),
            "{t}"
        );
        assert!(
            t.contains("service.vgroupMapping.my_tx_group=prod is in the nacos config centre")
                && t.contains("config.type is `file`"),
            "{t}"
        );
        assert!(t.contains("fix: set config.type=nacos"), "{t}");
    }
}
