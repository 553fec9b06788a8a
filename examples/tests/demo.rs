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
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
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
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("tc-1 left the clients' alive set ") && l.ends_with(" ms after the kill")),
        "{text}"
    );
    // Three TCs in the table, the killed one marked; every live one committed something.
    for tc in ["tc-0", "tc-1 \u{2020}", "tc-2"] {
        let row = lines
            .iter()
            .find(|l| l.starts_with(&format!("{tc} ")))
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
