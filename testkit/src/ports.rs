//! Whose port is it: a started server must itself listen on every port it was given.
//!
//! Ports are picked free, released, then handed to the server, so another test's
//! server can take one in between. A server that fails to bind one of its ports does
//! not always exit (rnacos keeps serving HTTP when its gRPC port is taken); its
//! readiness probe then reaches the *other* server on that port and passes, and the
//! test talks to a stranger (seen as a Nacos config "not found" that had just been
//! published). So after the probe, every port is checked to be a listening socket of
//! the child process itself (Linux `/proc`; elsewhere the check is skipped).

use std::collections::HashSet;

/// The inodes of the listening TCP sockets (IPv4 and IPv6) on `port` in the network
/// namespace of process `pid`.
fn listening_inodes(pid: u32, port: u16) -> Option<HashSet<u64>> {
    let mut out = HashSet::new();
    let mut read_any = false;
    // The tables of the process's own network namespace (a server started inside a
    // test-network host listens in that host's namespace, not ours).
    for table in [
        format!("/proc/{pid}/net/tcp"),
        format!("/proc/{pid}/net/tcp6"),
    ] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        read_any = true;
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address is `ADDR:PORT` in hex; state 0A is LISTEN; inode is field 9.
            let (Some(local), Some(state), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else {
                continue;
            };
            let Some((_, hex_port)) = local.rsplit_once(':') else {
                continue;
            };
            if *state == "0A"
                && u16::from_str_radix(hex_port, 16).ok() == Some(port)
                && let Ok(inode) = inode.parse()
            {
                out.insert(inode);
            }
        }
    }
    read_any.then_some(out)
}

/// Whether process `pid` holds a listening socket on `port`; `true` when `/proc` cannot
/// tell (not Linux).
pub(crate) fn listens_on(pid: u32, port: u16) -> bool {
    let Some(inodes) = listening_inodes(pid, port) else {
        return true;
    };
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return true;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .ok()
            .and_then(|l| {
                l.to_str()?
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .parse::<u64>()
                    .ok()
            })
            .is_some_and(|i| inodes.contains(&i))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_is_ours_and_a_free_port_is_nobodys() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(listens_on(std::process::id(), port));
        drop(l);
        assert!(!listens_on(std::process::id(), port));
        // Another process's listener is not ours: pid 1 holds none of our sockets.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(!listens_on(1, port) || std::process::id() == 1);
    }
}
