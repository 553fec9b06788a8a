//! `meshline register` / `lookup` end to end through the facade, against each network
//! backend compiled in: a real etcd, ZooKeeper, Redis and rnacos started by testkit, and
//! the Consul and Eureka doubles. Proves `registry::from_config` wires every backend and
//! that `register` keeps the instance until it is signalled, then removes it: with a
//! 60 s TTL (session timeout for ZooKeeper), so a removal within 15 s of the signal is
//! the deregistration, not an expiry. (Nacos has no TTL: its registrations live with
//! the client's connection, which a signal ends either way.)

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn meshline(kind: &str, server: &str, env: &[(&str, String)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_meshline"));
    for (k, _) in std::env::vars() {
        if k.starts_with("MESHLINE_") {
            c.env_remove(k);
        }
    }
    c.args(["--registry", kind, "--server", server]);
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn lookup(kind: &str, server: &str, env: &[(&str, String)], cluster: &str) -> String {
    let out = meshline(kind, server, env)
        .args(["lookup", "--cluster", cluster])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A removal within this after the signal is a deregistration: the TTL is 60 s.
const DEREGISTERED_WITHIN: Duration = Duration::from_secs(15);

fn wait_until(what: &str, within: Duration, mut pred: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !pred() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn terminate(mut child: Child) -> std::process::ExitStatus {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("meshline register did not exit after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Registers through the CLI, sees it with `lookup`, stops the registrant, sees it go.
fn register_lookup_unregister(kind: &str, server: &str, env: &[(&str, String)]) {
    let cluster = format!("cli_{}", kind.replace('3', ""));
    let addr = "10.9.0.1:8091";
    let child = meshline(kind, server, env)
        .args(["register", &cluster, addr, "--ttl", "60s"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(
        &format!("{kind}: lookup to list {addr}"),
        Duration::from_secs(30),
        || lookup(kind, server, env, &cluster).contains(addr),
    );
    let signalled = Instant::now();
    let status = terminate(child);
    assert!(status.success(), "{kind}: register exited with {status}");
    wait_until(
        &format!("{kind}: {addr} to be deregistered (the TTL is 60 s)"),
        DEREGISTERED_WITHIN.saturating_sub(signalled.elapsed()),
        || !lookup(kind, server, env, &cluster).contains(addr),
    );
}

#[cfg(feature = "etcd")]
#[test]
fn etcd() {
    let etcd = meshline_testkit::Etcd::start().expect("etcd");
    register_lookup_unregister("etcd3", &etcd.endpoint(), &[]);
}

#[cfg(feature = "zookeeper")]
#[test]
fn zookeeper() {
    let zk = meshline_testkit::ZooKeeper::start().expect("zookeeper");
    // `--ttl` is not ZooKeeper's session timeout; testkit's server allows 60 s.
    let env = [("MESHLINE_REGISTRY__ZK__SESSION_TIMEOUT", "60s".to_string())];
    register_lookup_unregister("zk", &zk.connect_string(), &env);
}

#[cfg(feature = "redis")]
#[test]
fn redis() {
    let redis = meshline_testkit::Redis::start().expect("redis");
    register_lookup_unregister("redis", &redis.addr(), &[]);
}

#[cfg(feature = "nacos")]
#[test]
fn nacos() {
    let nacos = meshline_testkit::Rnacos::start().expect("rnacos");
    let env = [(
        "MESHLINE_REGISTRY__NACOS__GRPC_PORT",
        nacos.grpc_port().to_string(),
    )];
    register_lookup_unregister("nacos", &nacos.http_addr(), &env);
}

#[cfg(feature = "consul")]
#[test]
fn consul() {
    let consul = meshline_testkit::ConsulDouble::start(Default::default()).expect("consul double");
    register_lookup_unregister("consul", &consul.server_addr(), &[]);
}

#[cfg(feature = "eureka")]
#[test]
fn eureka() {
    let eureka = meshline_testkit::EurekaDouble::start(Default::default()).expect("eureka double");
    register_lookup_unregister("eureka", &eureka.service_url(), &[]);
}

#[cfg(feature = "namingserver")]
#[test]
fn namingserver() {
    let ns = meshline_testkit::NamingserverDouble::start(Default::default())
        .expect("namingserver double");
    register_lookup_unregister("seata", &ns.server_addr(), &[]);
}

/// Seata's namingserver maps groups itself: `lookup <group>` asks it by group, with no
/// `service.vgroupMapping` in the looking client's configuration.
#[cfg(feature = "namingserver")]
#[test]
fn namingserver_lookup_by_group_needs_no_mapping() {
    let ns = meshline_testkit::NamingserverDouble::start(Default::default())
        .expect("namingserver double");
    let server = ns.server_addr();
    // The registrant (a TC) serves `my_group`: its vGroup map comes from its mapping.
    let mapping = [(
        "MESHLINE_SERVICE__VGROUP_MAPPING__my_group",
        "prod".to_string(),
    )];
    let child = meshline("seata", &server, &mapping)
        .args(["register", "prod", "10.9.0.7:8091"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(
        "lookup my_group to list the TC",
        Duration::from_secs(30),
        || {
            let out = meshline("seata", &server, &[])
                .args(["lookup", "my_group"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).contains("10.9.0.7:8091")
        },
    );
    assert!(terminate(child).success());
}

/// `meshline lookup` against a closed loopback port: exits 1 within `within`, and the
/// message on standard error names the address and the cause.
fn unreachable_server_is_reported(kind: &str, server: &str, within: Duration) {
    let t = Instant::now();
    let mut child = meshline(kind, server, &[])
        .args(["lookup", "--cluster", "default"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{kind}: `meshline lookup` still running after {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = t.elapsed();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("{kind}: exit {status} after {took:?}: {err}");
    assert_eq!(status.code(), Some(1), "{kind}: {err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("{kind}: no `error:` line in {err}"));
    assert!(line.contains(server), "{kind}: no address in {line}");
    assert!(
        line.contains("Connection refused"),
        "{kind}: no cause in {line}"
    );
}

fn closed_server() -> String {
    format!(
        "127.0.0.1:{}",
        meshline_testkit::closed_port().expect("a closed port")
    )
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_unreachable() {
    // Lazy connect: the lookup fails after its operation timeout (5 s by default).
    unreachable_server_is_reported("etcd3", &closed_server(), Duration::from_secs(15));
}

#[cfg(feature = "zookeeper")]
#[test]
fn zookeeper_unreachable() {
    // No session within the session timeout (6 s by default).
    unreachable_server_is_reported("zk", &closed_server(), Duration::from_secs(15));
}

#[cfg(feature = "redis")]
#[test]
fn redis_unreachable() {
    unreachable_server_is_reported("redis", &closed_server(), Duration::from_secs(15));
}

#[cfg(feature = "nacos")]
#[test]
fn nacos_unreachable() {
    // The client talks gRPC at the given port + 1000: that one must be closed too, or
    // an rnacos another test started there answers the lookup.
    let port = meshline_testkit::closed_port_with(&[1000]).expect("a closed port pair");
    let server = format!("127.0.0.1:{port}");
    unreachable_server_is_reported("nacos", &server, Duration::from_secs(20));
}

#[cfg(feature = "consul")]
#[test]
fn consul_unreachable() {
    unreachable_server_is_reported("consul", &closed_server(), Duration::from_secs(15));
}

#[cfg(feature = "eureka")]
#[test]
fn eureka_unreachable() {
    unreachable_server_is_reported("eureka", &closed_server(), Duration::from_secs(15));
}

/// `register … until Ctrl-C`: Ctrl-C is SIGINT (SIGTERM is tested above). The
/// registration is gone when the process has exited (it unregisters before exiting),
/// so the lookup right after the exit must not list it; the Consul check's TTL is 60 s.
#[cfg(feature = "consul")]
#[test]
fn register_ends_on_sigint_and_removes_the_registration() {
    use std::io::{BufRead, BufReader};
    use std::sync::mpsc;

    let consul = meshline_testkit::ConsulDouble::start(Default::default()).expect("consul double");
    let server = consul.server_addr();
    let addr = "10.9.0.2:8091";
    let mut child = meshline("consul", &server, &[])
        .args(["register", "cli_sigint", addr, "--ttl", "60s"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    let mut next_line = |what: &str| -> String {
        match lines.recv_timeout(Duration::from_secs(30)) {
            Ok(l) => {
                seen.push(l.clone());
                l
            }
            Err(e) => panic!("waiting for {what}: {e}; stderr so far: {seen:?}"),
        }
    };
    let registered = format!("registered {addr} in cli_sigint (consul); Ctrl-C to remove");
    while next_line("the registration line") != registered {}
    assert!(lookup("consul", &server, &[], "cli_sigint").contains(addr));

    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    while next_line("the unregistration line") != format!("unregistered {addr}") {}
    let (done, exited) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait());
    });
    let status = exited
        .recv_timeout(Duration::from_secs(20))
        .expect("meshline register did not exit after SIGINT")
        .unwrap();
    assert_eq!(status.code(), Some(0), "exit after SIGINT: {status}");
    let after = lookup("consul", &server, &[], "cli_sigint");
    assert!(
        !after.contains(addr),
        "still registered after exit: {after}"
    );
}
