//! # meshline-examples
//!
//! Runnable programs built only on the `meshline` facade, the way an application
//! would use it:
//!
//! | program | what it shows |
//! |---|---|
//! | `quickstart` | two TCs, a file registry, a TM and an RM: a commit, a rollback, following an unregister |
//! | `demo` | three TCs in-process, a TM and two RMs, 16 workers of global transactions, one TC killed under load, a table of what happened |
//! | `tc-server` | an in-memory Seata TC ([`tc`]), registered in any registry the facade knows |
//! | `tm-client` | a TM: begins global transactions on its group's TCs, commits or rolls them back |
//! | `rm-client` | an RM: registers a resource, joins a transaction with a branch, answers phase two |
//! | `tx-bench` | global transactions per second through the in-memory TC against the echo rate of the same run |
//! | `gateway` | the example game gateway ([`gateway`]): admission, sessions, module routing, fan-out, backpressure |
//! | `game-backend` | the game behind it ([`game_backend`]): lobby, chat, rooms, dynamic binding |
//! | `bot` | players: auth, room, chat, lobby requests; throughput and latency |
//!
//! ```text
//! cargo run -p meshline-examples --bin quickstart
//! cargo run --release -p meshline-examples --bin demo
//! ```
//!
//! By default only the file registry is compiled in, so these build with a Rust
//! toolchain alone; with `--features all-registries` every registry backend is, so
//! `tc-server` and `tm-client` take any `registry.type` (that build needs `protoc`).
//! This library holds what the programs share: the in-memory coordinator ([`tc`]), the
//! cluster a server registers under ([`server_cluster`]) and the log setup
//! ([`init_logging`]).

#![warn(missing_docs)]

pub mod client;
pub mod game_backend;
pub mod gateway;
pub mod memory_registry;
pub mod roaming;
pub mod tc;

use meshline::Config;

/// The cluster a server registers under: Seata's per-registry cluster key
/// (`registry.etcd3.cluster`, `registry.nacos.cluster`, ..., Eureka's
/// `registry.eureka.application`), or, for the file registry and unknown types, the
/// cluster the tx-service-group maps to (`default` when it is not mapped).
///
/// Clients find servers through `vgroupMapping` -> cluster, so a server must register
/// under the cluster its clients' group maps to; each registry type keeps that name
/// under its own key, as Seata's TC reads it.
pub fn server_cluster(config: &Config) -> String {
    let r = &config.registry;
    let ty = meshline::registry::resolve_type(&r.kind).ok();
    match ty.and_then(|t| Some((t, t.cluster_key?))) {
        Some((t, key)) => r
            .section(&t.section_names())
            .get(key)
            .filter(|c| !c.is_empty())
            .unwrap_or("default")
            .to_string(),
        None => config
            .service
            .vgroup_mapping
            .get(&config.tx_service_group)
            .cloned()
            .unwrap_or_else(|| "default".into()),
    }
}

/// Installs a `tracing` subscriber writing to stderr (stdout stays for the programs'
/// output, which tests parse), filtered by `MESHLINE_LOG` (`EnvFilter` syntax), else by
/// `default` (`warn`, `info`, `meshline_rpc_client=debug`, ...).
///
/// Does nothing when a subscriber is already installed.
pub fn init_logging(default: &str) {
    let mut filter = tracing_subscriber::EnvFilter::try_from_env("MESHLINE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Whatever MESHLINE_LOG says: nacos-sdk logs its login password (see
    // meshline::core::redact::LOG_DIRECTIVES).
    for d in meshline::core::redact::LOG_DIRECTIVES {
        filter = filter.add_directive(d.parse().expect("a valid directive"));
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Waits for Ctrl-C or (on Unix) SIGTERM: how the programs learn to stop.
pub async fn wait_for_stop() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        meshline::ConfigLoader::new()
            .text(text, meshline::Format::Properties)
            .load()
            .unwrap()
    }

    #[test]
    fn file_registry_servers_register_under_the_mapped_cluster() {
        let c = config("service.vgroupMapping.default_tx_group=tc_cluster\n");
        assert_eq!(server_cluster(&c), "tc_cluster");
        assert_eq!(server_cluster(&config("")), "default");
    }

    #[test]
    fn network_registries_use_their_own_cluster_key_aliases_included() {
        let c = config(
            "registry.type=ETCD\nregistry.etcd3.cluster=from_etcd\n\
             service.vgroupMapping.default_tx_group=mapped\n",
        );
        assert_eq!(server_cluster(&c), "from_etcd");
        let c = config("registry.type=zookeeper\nregistry.zk.cluster=from_zk\n");
        assert_eq!(server_cluster(&c), "from_zk");
    }
}
