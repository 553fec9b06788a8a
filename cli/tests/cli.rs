//! The `meshline` binary end to end: exit codes and output.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn meshline() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_meshline"));
    c.env_remove("MESHLINE_CONFIG").env_remove("MESHLINE_LOG");
    for (k, _) in std::env::vars() {
        if k.starts_with("MESHLINE_") {
            c.env_remove(k);
        }
    }
    c
}

/// A configuration file `name` holding `body`, in a directory that lives as long as
/// the returned guard.
fn config_file(name: &str, body: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join(name);
    std::fs::write(&f, body).unwrap();
    (dir, f)
}

/// `meshline` run to its end with `args` (as [`meshline`] sets it up): its output.
fn run(args: &[&str]) -> Output {
    meshline().args(args).output().unwrap()
}

#[test]
fn lookup_default_group_without_config_prints_default_tc() {
    let out = run(&["lookup", "default_tx_group"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "127.0.0.1:8091\n");
    // No argument: the config's txServiceGroup (default_tx_group).
    let out = run(&["lookup"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "127.0.0.1:8091\n");
}

#[test]
fn lookup_json() {
    let out = run(&["lookup", "--json", "--cluster", "default"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["host"], "127.0.0.1");
    assert_eq!(v[0]["port"], 8091);
    assert_eq!(v[0]["weight"], 1);
}

#[test]
fn usage_errors_exit_2() {
    let out = run(&["lookup", "--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["lookup", "g", "--cluster", "c"]);
    assert_eq!(out.status.code(), Some(2));
    let out = meshline().output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn registry_errors_exit_1_with_message() {
    let out = run(&["lookup", "no_such_group"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("service.vgroupMapping.no_such_group"), "{err}");

    let out = run(&["lookup", "--registry", "no-such-registry"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("known types"));

    let out = run(&["register", "default", "10.0.0.1:8091"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("read-only"));

    let out = run(&["--config", "/nonexistent/x.yaml", "lookup"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/x.yaml"));
}

#[test]
fn file_override_and_config_file() {
    let out = run(&["lookup", "--cluster", "x", "--server", "10.0.0.1:1;[::1]:2"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "10.0.0.1:1\n[::1]:2\n"
    );

    let (_dir, f) = config_file(
        "seata.properties",
        "service.vgroupMapping.my_group=prod\nservice.prod.grouplist=10.1.1.1:8091\n",
    );
    let out = run(&["--config", f.to_str().unwrap(), "lookup", "my_group"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "10.1.1.1:8091\n");
}

#[test]
fn watch_prints_snapshots_until_signalled() {
    let (_dir, f) = config_file(
        "m.yaml",
        "service:\n  grouplist:\n    default: \"10.0.0.1:1\"\n",
    );
    let child = meshline()
        .args(["--config", f.to_str().unwrap(), "watch"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    std::fs::write(
        &f,
        "service:\n  grouplist:\n    default: \"10.0.0.1:1;10.0.0.2:1\"\n",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    // SIGTERM ends the watch cleanly.
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 2, "{text}");
    assert!(lines[0].ends_with("default rev=1 [10.0.0.1:1]"), "{text}");
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with("rev=2 [10.0.0.1:1, 10.0.0.2:1]")),
        "{text}"
    );
}

#[test]
fn lookup_of_an_empty_cluster_says_no_members() {
    let (_dir, f) = config_file("seata.properties", "service.nobody-here.grouplist=\n");
    let out = run(&[
        "--config",
        f.to_str().unwrap(),
        "lookup",
        "--cluster",
        "nobody-here",
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no members in cluster `nobody-here` (file)"),
        "{err}"
    );
}

#[test]
fn each_config_warning_is_printed_once_and_without_colour_when_redirected() {
    let (_dir, f) = config_file("seata.properties", "registry.tpye=file\n");
    let out = run(&["--config", f.to_str().unwrap(), "lookup"]);
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("registry.tpye").count(), 1, "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "ANSI codes in a redirected log: {err:?}"
    );
}

#[test]
fn register_warns_when_the_registry_cannot_store_a_weight_and_ttl_takes_config_syntax() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = run(&[
        "--registry",
        "redis",
        "--server",
        &format!("127.0.0.1:{port}"),
        "register",
        "c",
        "10.0.0.1:8091",
        "--weight",
        "3",
        "--ttl",
        "1500ms",
    ]);
    // Parsed (not a usage error); the closed port then fails the connect.
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot store a weight"), "{err}");
    let out = run(&["register", "c", "10.0.0.1:8091", "--ttl", "ten"]);
    assert_eq!(out.status.code(), Some(2), "a bad --ttl is a usage error");
    let out = run(&["register", "c", "10.0.0.1:8091", "--ttl", "1500"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "--ttl without a unit is refused"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has no unit"), "{err}");
}

#[test]
fn watch_shows_a_removal_even_with_empty_protection_on() {
    use std::io::BufRead;
    let (_dir, f) = config_file(
        "m.yaml",
        "registry:\n  empty-protection: true\nservice:\n  grouplist:\n    default: \"10.0.0.1:1\"\n",
    );
    let mut child = meshline()
        .args(["--config", f.to_str().unwrap(), "watch"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let wait_for = |want: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match rx.recv_timeout(left) {
                Ok(line) if line.contains(want) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
        false
    };
    assert!(wait_for("[10.0.0.1:1]"), "first snapshot");
    std::fs::write(
        &f,
        "registry:\n  empty-protection: true\nservice:\n  grouplist:\n    default: \"\"\n",
    )
    .unwrap();
    let removed = wait_for("no members");
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let out = child.wait_with_output().unwrap();
    assert!(removed, "the removal was not shown");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("emptyProtection is on"), "{err}");
}

/// `meshline types` and the `--registry` help come from the facade's table of registry
/// types: every entry is listed, with what this build has of it.
#[test]
fn types_lists_every_registry_type_from_the_table() {
    use meshline::registry::{REGISTRY_TYPES, is_compiled_in};
    let out = run(&["types", "--porcelain"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let expected: String = REGISTRY_TYPES
        .iter()
        .map(|t| {
            let on = if is_compiled_in(t) { "yes" } else { "no" };
            format!("{}\t{}\t{on}\n", t.seata_name, t.feature)
        })
        .collect();
    assert_eq!(text, expected);

    let out = run(&["types", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let zk = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["type"] == "zk")
        .expect("zk listed");
    assert_eq!(zk["aliases"], serde_json::json!(["zookeeper"]));
    assert_eq!(zk["feature"], "zookeeper");
    let raft = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["type"] == "raft")
        .unwrap();
    assert_eq!(raft["readOnly"], true);

    let out = run(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let names: Vec<&str> = REGISTRY_TYPES.iter().map(|t| t.seata_name).collect();
    assert!(help.contains(&names.join(", ")), "{help}");
}
