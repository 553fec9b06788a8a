//! Runs the `quickstart` program and checks what it promises a new user: a global
//! transaction committed and one rolled back, each begun on a TC its XID names, with
//! phase two at the RM before the TM's answer; then, after one TC is removed from the
//! registry file, the clients follow and the next transaction begins on the other;
//! exit code 0.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Generous: the program itself needs well under a second (the file registry polls
/// every 250 ms), but test machines can be slow and busy.
const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn quickstart_commits_and_rolls_back_then_follows_the_removal() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_quickstart"))
        .env("MESHLINE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn quickstart");
    // Drain both pipes on their own threads so the child never blocks on a full pipe.
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for quickstart") {
            break s;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("quickstart still running after {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = stdout.join().unwrap();
    let err = stderr.join().unwrap();
    assert!(
        status.success(),
        "quickstart exit {status:?}\nstdout:\n{out}\nstderr:\n{err}"
    );

    let addr_of = |name: &str| -> String {
        let prefix = format!("{name} listening on ");
        out.lines()
            .find_map(|l| l.trim().strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{out}"))
            .to_string()
    };
    let (a, b) = (addr_of("tc-a"), addr_of("tc-b"));
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    let position = |from: usize, pred: &dyn Fn(&str) -> bool, what: &str| {
        lines[from..]
            .iter()
            .position(|l| pred(l))
            .map(|i| i + from)
            .unwrap_or_else(|| panic!("no {what} after line {from} in:\n{out}"))
    };
    let registered = position(
        0,
        &|l| l == "TM and RM registered with both TCs (group default_tx_group -> cluster default)",
        "registration line",
    );
    // A transaction: begun on a TC (its XID names it), a branch, then phase two at the
    // RM before the TM's answer.
    let mut at = registered;
    let mut xids = Vec::new();
    for (verb, status, phase_two) in [
        ("committed", "Committed", "BranchCommit"),
        ("rolled back", "Rollbacked", "BranchRollback"),
    ] {
        let begun = position(at, &|l| l.starts_with("begun "), "a begin");
        let xid = lines[begun]
            .strip_prefix("begun ")
            .and_then(|r| r.split(" on ").next())
            .unwrap()
            .to_string();
        let tc = lines[begun].rsplit(" on ").next().unwrap();
        let addr = if tc == "tc-a" { &a } else { &b };
        assert!(
            xid.starts_with(&format!("{addr}:")),
            "{xid} does not name {tc}:\n{out}"
        );
        let branch = position(
            begun,
            &|l| l.starts_with("branch ") && l.ends_with("registered by the RM (locks orders:42)"),
            "a branch",
        );
        let id = lines[branch].split(' ').nth(1).unwrap();
        let want =
            format!("{verb} {xid}: {status} (the RM was asked: {phase_two} for branch {id})");
        at = position(branch, &|l| l == want, &want);
        xids.push(xid);
    }
    let removed = position(
        at,
        &|l| l == format!("unregister tc-b: service.default.grouplist={a}"),
        "the unregister",
    );
    let followed = position(
        removed,
        &|l| l.starts_with("clients followed in ") && l.ends_with(" ms: only tc-a alive"),
        "the clients following",
    );
    let after = position(
        followed,
        &|l| l.starts_with("begun "),
        "a begin after the unregister",
    );
    assert!(lines[after].ends_with(" on tc-a"), "{}", lines[after]);
    position(
        after,
        &|l| {
            l.starts_with("committed ") && l.contains(": Committed (the RM was asked: BranchCommit")
        },
        "the last commit",
    );
    assert_ne!(xids[0], xids[1]);
}
