//! The `tm-client` and `rm-client` programs against a real `tc-server`, as a user runs
//! them: the TM begins, the RM joins with a branch, the TM commits, the RM sees its
//! BranchCommit; the same with a rollback; and an RM that fails its first answer is
//! retried by the TC.

use crate::common;

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{TcProcess, stdout_lines};

/// A running program whose stdout lines arrive on a channel.
struct Program {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Program {
    fn start(bin: &str, args: &[&str]) -> Program {
        let mut child = Command::new(bin)
            .args(args)
            .env("MESHLINE_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {bin}: {e}"));
        let lines = stdout_lines(&mut child);
        let stdin = child.stdin.take();
        Program {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    /// The next line that starts with `prefix` (others are kept for the failure
    /// message); fails after 30 s.
    fn line(&mut self, prefix: &str) -> String {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(30)) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.starts_with(prefix) {
                        return l;
                    }
                }
                Err(e) => panic!(
                    "no line `{prefix}..` ({e}); output so far:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    fn enter(&mut self) {
        let s = self.stdin.as_mut().unwrap();
        s.write_all(b"\n").unwrap();
        s.flush().unwrap();
    }

    fn wait_success(mut self) {
        let status = self.child.wait().unwrap();
        assert!(
            status.success(),
            "exit {status:?}; output:\n{}",
            self.seen.join("\n")
        );
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run_one(config: &str, rollback: bool, fail_first: &str) {
    let mut tm_args = vec!["--config", config, "--transactions", "1", "--step"];
    if rollback {
        tm_args.push("--rollback");
    }
    let mut tm = Program::start(env!("CARGO_BIN_EXE_tm-client"), &tm_args);
    let begun = tm.line("begun ");
    let xid = begun.strip_prefix("begun ").unwrap().to_string();
    tm.line("press Enter");
    let mut rm = Program::start(
        env!("CARGO_BIN_EXE_rm-client"),
        &[
            "--config",
            config,
            "--resource",
            "jdbc:mysql://db/orders",
            "--xid",
            &xid,
            "--lock-keys",
            "orders:1",
            "--exit-after",
            if fail_first == "0" { "1" } else { "2" },
            "--fail-first",
            fail_first,
        ],
    );
    let branch = rm.line("branch ");
    assert!(
        branch.ends_with(&format!(" registered in {xid}")),
        "{branch}"
    );
    let id = branch.split(' ').nth(1).unwrap().to_string();
    tm.enter();
    let (verb, status, asked, ok) = if rollback {
        (
            "rolled back",
            "Rollbacked",
            "BranchRollback",
            "PhaseTwo_Rollbacked",
        )
    } else if fail_first == "0" {
        (
            "committed",
            "Committed",
            "BranchCommit",
            "PhaseTwo_Committed",
        )
    } else {
        // An AT commit is answered at once, as Seata's TC does: the branch's commit,
        // and its retry, come from the TC's background loop.
        (
            "committed",
            "Committed",
            "BranchCommit",
            "PhaseTwo_Committed",
        )
    };
    if fail_first != "0" {
        let first = rm.line(asked);
        assert_eq!(
            first,
            format!("{asked} xid {xid} branch {id} -> PhaseTwo_CommitFailed_Retryable")
        );
    }
    let answered = rm.line(asked);
    assert_eq!(answered, format!("{asked} xid {xid} branch {id} -> {ok}"));
    let ended = tm.line(verb);
    assert_eq!(ended, format!("{verb} {xid}: {status}"));
    rm.wait_success();
    tm.line("transactions: 1; not as asked: 0");
    tm.wait_success();
}

#[test]
fn tm_client_and_rm_client_run_a_two_phase_commit_through_tc_server() {
    let tc = TcProcess::start("programs", 0, None);
    let dir = tempfile::tempdir().unwrap();
    let config = tc.write_client_config(dir.path(), "seata.properties");
    let config = config.to_str().unwrap();
    run_one(config, false, "0");
    run_one(config, true, "0");
    // The RM fails its first answer: the TM hears the TC keeps trying, and the RM gets
    // the commit again from the TC's retry loop.
    run_one(config, false, "1");
}
