//! Runs the `quickstart` program and checks what it promises a new user: both servers
//! answer the calls whose XIDs name them, then, after one is removed from the registry
//! file, the client follows (one alive) and the removed server's XID is answered by the
//! other; exit code 0.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Generous: the program itself needs well under a second (the file registry polls
/// every 250 ms), but test machines can be slow and busy.
const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn quickstart_shows_both_servers_answering_then_the_client_following_the_removal() {
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
    let (a, b) = (addr_of("server-a"), addr_of("server-b"));
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    let position = |wanted: &str| {
        lines
            .iter()
            .position(|l| *l == wanted)
            .unwrap_or_else(|| panic!("no line `{wanted}` in:\n{out}"))
    };

    // Both alive, then each XID answered by the server it names.
    let both = lines
        .iter()
        .position(|l| {
            l.strip_prefix("client: group default_tx_group -> cluster default, 2 alive: ")
                .is_some_and(|alive| {
                    let mut v: Vec<&str> = alive.split(", ").collect();
                    v.sort_unstable();
                    let mut want = vec![a.as_str(), b.as_str()];
                    want.sort_unstable();
                    v == want
                })
        })
        .unwrap_or_else(|| panic!("no line showing both servers alive in:\n{out}"));
    let a_answers = position(&format!("xid {a}:1 -> answered by {a} (server-a)"));
    let b_answers = position(&format!("xid {b}:2 -> answered by {b} (server-b)"));
    // Then the removal, the client following it, and server-b's XID moving to server-a.
    let removed = position(&format!(
        "unregister server-b: service.default.grouplist={a}"
    ));
    let followed = lines
        .iter()
        .position(|l| {
            l.starts_with("client followed in ") && l.ends_with(&format!(" ms: 1 alive: {a}"))
        })
        .unwrap_or_else(|| panic!("no `client followed in .. ms: 1 alive: {a}` line in:\n{out}"));
    let moved = position(&format!("xid {b}:3 -> answered by {a} (server-a)"));
    assert!(
        both < a_answers
            && a_answers < b_answers
            && b_answers < removed
            && removed < followed
            && followed < moved,
        "steps out of order:\n{out}"
    );
}
