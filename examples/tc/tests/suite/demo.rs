//! Runs the `demo` program, the README's first command, and checks the verdict it
//! promises: every transaction the TM was told about ended that way at both RMs, the
//! killed TC left the clients' alive set, no transaction on a live TC failed, and the
//! exit code says so.

use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

/// The program runs for about 3 s (two 1.5 s phases); test machines are slow and busy.
const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn demo_commits_through_a_tc_crash_and_says_ok() {
    let child = Command::new(env!("CARGO_BIN_EXE_demo"))
        .env("MESHLINE_LOG", "error")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn demo");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(LIMIT) {
        Ok(out) => out.expect("wait for demo"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("demo still running after {LIMIT:?}");
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "demo exit {:?}\nstdout:\n{text}\nstderr:\n{err}",
        out.status
    );
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let verdict = lines
        .iter()
        .find(|l| l.starts_with("transactions on live TCs that failed: "))
        .unwrap_or_else(|| panic!("no verdict line in:\n{text}"));
    assert_eq!(
        *verdict, "transactions on live TCs that failed: 0  => OK",
        "{text}"
    );
    assert!(
        lines.contains(
            &"every transaction the TM saw committed was committed at both RMs, and none it saw rolled back was committed: yes"
        ),
        "{text}"
    );
    // The TC it killed, by its own announcement: `phase 2: killing tc-N (addr) under load`.
    let victim = lines
        .iter()
        .find_map(|l| l.strip_prefix("phase 2: killing "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no `phase 2: killing` line in:\n{text}"));
    assert!(
        lines.iter().any(|l| l
            .strip_prefix(&format!("{victim} left the clients' alive set "))
            .is_some_and(|rest| rest.ends_with(" ms after the kill"))),
        "{text}"
    );
    // Three TCs in the table, the killed one marked; each committed something.
    let started: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("started "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(started.len(), 3, "{text}");
    for tc in started {
        let name = if tc == victim {
            format!("{tc} \u{2020} ")
        } else {
            format!("{tc} ")
        };
        let row = lines
            .iter()
            .find(|l| l.starts_with(&name))
            .unwrap_or_else(|| panic!("no row for {tc} in:\n{text}"));
        let committed: u64 = row
            .split_whitespace()
            .rev()
            .nth(2)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no committed count in `{row}`"));
        assert!(committed > 0, "{tc} committed nothing: {row}");
    }
}
