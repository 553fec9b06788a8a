//! Through the `meshline` command and a real etcd config centre that holds single keys
//! only: a group that is not the file's `txServiceGroup` is read from the centre by
//! `lookup`, `doctor` and `watch` (the live configuration asks the centre for every
//! group it is asked about, not the file's alone), and `watch` follows its mapping when
//! the centre changes it.
#![cfg(feature = "etcd")]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn etcdctl(endpoint: &str, key: &str, value: &str) {
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", endpoint, "put", key, value])
        .output()
        .expect("etcdctl (apt-get install etcd-client)");
    assert!(out.status.success(), "etcdctl put {key}: {out:?}");
}

fn meshline(config: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_meshline"));
    for (k, _) in std::env::vars() {
        if k.starts_with("MESHLINE_") {
            c.env_remove(k);
        }
    }
    c.arg("--config").arg(config);
    c
}

#[test]
fn a_group_only_the_centre_maps_is_looked_up_diagnosed_and_watched() {
    let etcd = meshline_testkit::Etcd::start().expect("etcd");
    let ep = etcd.endpoint();
    etcdctl(&ep, "service.vgroupMapping.g1", "c1");
    etcdctl(&ep, "service.c1.grouplist", "127.0.0.1:19101");
    etcdctl(&ep, "service.c2.grouplist", "127.0.0.1:19102");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("client.properties");
    std::fs::write(
        &config,
        format!("registry.type=file\nconfig.type=etcd3\nconfig.etcd3.serverAddr={ep}\n"),
    )
    .unwrap();

    let out = meshline(&config).args(["lookup", "g1"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "lookup g1: {out:?}");
    assert_eq!(stdout.trim(), "127.0.0.1:19101");

    // The doctor finds the mapping where the client would (nothing listens at the
    // address, so the doctor fails later, at the TC).
    let out = meshline(&config).args(["doctor", "g1"]).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("service.vgroupMapping.g1=c1"), "{text}");
    assert!(!text.contains("no service.vgroupMapping.g1"), "{text}");
    assert!(text.contains("127.0.0.1:19101"), "{text}");

    // watch follows the live mapping.
    let mut child = meshline(&config)
        .args(["watch", "g1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let wait_line = |what: &str, within: Duration, pred: &dyn Fn(&str) -> bool| -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) if pred(&l) => return l,
                Ok(_) => continue,
                Err(_) => panic!("no line with {what} within {within:?}"),
            }
        }
    };
    let first = wait_line("c1's member", Duration::from_secs(10), &|l| {
        l.contains("127.0.0.1:19101")
    });
    assert!(first.contains(" c1 rev="), "{first}");
    let changed = Instant::now();
    etcdctl(&ep, "service.vgroupMapping.g1", "c2");
    let moved = wait_line("c2's member", Duration::from_secs(3), &|l| {
        l.contains("127.0.0.1:19102")
    });
    assert!(moved.contains(" c2 rev="), "{moved}");
    eprintln!(
        "watch g1 moved to c2 {:?} after the change",
        changed.elapsed()
    );
    let _ = child.kill();
    let _ = child.wait();
}
