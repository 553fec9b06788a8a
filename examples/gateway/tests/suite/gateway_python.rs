//! A second client, in another language, written from docs/gateway-protocol.md alone:
//! examples/gateway/clients/python/gateway_client.py plays its scenario (a refusal, auth, chat,
//! a keyed room, a resume with the missed pushes replayed, ping, a duplicate-login kick)
//! against a gateway in front of two game backends, and must pass every step; twice
//! against the same gateway (the first run's sessions ended, their room memberships
//! with them: the room's member count is the second run's own).
//!
//! Needs `python3` (3.8 or newer; standard library only). Without it the test fails:
//! scripts/install-test-deps.sh installs it.

use std::process::Stdio;

use crate::gateway_world::*;
use meshline_example_gateway::gateway::session::DuplicateLogin;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_written_from_the_document_passes_its_scenario() {
    let w = world(2, |_| {}).await;
    for run in 1..=2 {
        scenario(&w, run, "kick-old").await;
    }
    // What the gateway saw agrees: one forged refusal a run, and duplicate-login kicks
    // (each login of an account ends its session before: two sessions live, alice's
    // last one and bob's).
    assert_eq!(w.gateway.stats().refused_for(Refusal::Forged), 2);
    assert_eq!(w.gateway.sessions(), 2);
}

/// The same on a gateway whose `duplicate-login` is `refuse-new`: the second login of a
/// live session's account is refused (ALREADY_ONLINE), so each run logs in accounts of
/// its own; twice, as above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_passes_its_scenario_on_a_refuse_new_gateway() {
    let w = world(2, |s| s.duplicate_login = DuplicateLogin::RefuseNew).await;
    for run in 1..=2 {
        scenario(&w, run, "refuse-new").await;
    }
    assert_eq!(w.gateway.stats().refused_for(Refusal::Forged), 2);
    assert_eq!(w.gateway.stats().refused_for(Refusal::AlreadyOnline), 2);
    // Every run's alice and bob live on (detached within the window).
    assert_eq!(w.gateway.sessions(), 4);
}

/// The Python client's scenario against `w`'s gateway, expecting its `duplicate-login`
/// `policy`, every step passed.
async fn scenario(w: &World, run: u32, policy: &str) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/clients/python/gateway_client.py"
    );
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let child = tokio::process::Command::new(&python)
        .arg(script)
        .args(["--host", "127.0.0.1", "--port"])
        .arg(w.gateway.local_addr().port().to_string())
        .args([
            "--secret",
            SECRET,
            "--scenario",
            "--duplicate-login",
            policy,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{python} does not run ({e}): run scripts/install-test-deps.sh")
        });
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the scenario ends within 60 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "run {run}: the Python client failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    for step in [
        "refusal", "auth", "chat", "room", "resume", "ping", "kick", "all",
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(&format!("ok {step}"))),
            "run {run}: no `ok {step}` in:\n{stdout}\n{stderr}"
        );
    }
}
