//! A build with `nacos-tls` (what `--all-features` gives) against a plain Nacos (rnacos,
//! which serves no TLS): the configuration names the server as a bare `host:port`, so
//! the connect is refused at once with the cause and the fix, instead of nacos-sdk's
//! TLS handshake failing as "the connection is not connected" (which names neither).
//! Run by scripts/test.sh's nacos-tls step; rnacos from scripts/install-test-deps.sh.

use std::time::{Duration, Instant};

use meshline_registry_core::config::ConfigLoader;
use meshline_registry_nacos::NacosRegistry;
use meshline_testkit::Rnacos;

#[tokio::test(flavor = "multi_thread")]
async fn a_plain_server_is_refused_at_once_naming_nacos_tls() {
    let server = Rnacos::start().expect("rnacos");
    let loader = || {
        ConfigLoader::new()
            .set("registry.type", "nacos")
            .set("registry.nacos.serverAddr", server.http_addr())
            .set("registry.nacos.grpcPort", server.grpc_port().to_string())
    };
    let started = Instant::now();
    let e = match NacosRegistry::connect(&loader().load().unwrap()).await {
        Ok(_) => panic!("a nacos-tls build connected to a plain server"),
        Err(e) => e.to_string(),
    };
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused after {:?}: {e}",
        started.elapsed()
    );
    for part in [
        &format!(
            "registry.nacos.serverAddr `{}` asks for a plain connection",
            server.http_addr()
        ),
        "cargo feature `nacos-tls`",
        "build without `nacos-tls`",
        "registry.nacos.tls.enabled=true",
    ] {
        assert!(e.contains(part), "no `{part}` in: {e}");
    }
}
