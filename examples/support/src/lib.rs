//! # meshline-example-support
//!
//! What every example program does the same way, whichever example it belongs to (the
//! in-memory TC's programs, the game gateway's): logging set up from `MESHLINE_LOG`
//! with the secret-bearing targets silenced, the runtime its `main` runs on, the
//! configuration and discovery a Seata client reads, and waiting for the signal to
//! stop.

#![warn(missing_docs)]

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

/// Runs a program's body on a multi-thread tokio runtime and turns its outcome into the
/// exit code: what the body returns on success (`()` is 0), or 1 with
/// `<program>: <error>` on stderr when it fails or the runtime cannot start.
pub fn run_main<T, F>(program: &str, body: F) -> std::process::ExitCode
where
    T: std::process::Termination,
    F: std::future::Future<Output = Result<T, String>>,
{
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{program}: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(body) {
        Ok(done) => done.report(),
        Err(e) => {
            eprintln!("{program}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The configuration a Seata client program reads (`file` when given, then Seata's
/// configuration centre named by `config.type`, then the environment), followed live,
/// and the discovery of the registry it names (which follows the centre's mapping
/// changes too).
pub async fn live_discovery(
    file: Option<&std::path::Path>,
) -> Result<(meshline::core::centre::LiveConfig, meshline::Discovery), String> {
    let mut loader = meshline::ConfigLoader::new();
    if let Some(p) = file {
        loader = loader.file(p);
    }
    let live = meshline::centre::live_config(loader.process_env())
        .await
        .map_err(|e| e.to_string())?;
    let discovery = meshline::centre::discovery_from_live(&live)
        .await
        .map_err(|e| e.to_string())?;
    Ok((live, discovery))
}

/// What a Seata client program (the TM's, the RM's) starts from: its configuration,
/// followed live, the registry's discovery ([`live_discovery`]), and the transaction
/// service group it serves.
pub struct ClientSetup {
    /// The configuration followed live; kept for as long as the program runs.
    pub live: meshline::core::centre::LiveConfig,
    /// The configuration when the program started.
    pub config: std::sync::Arc<meshline::Config>,
    /// The discovery of the registry the configuration names.
    pub discovery: meshline::Discovery,
    /// `--group` when given, else the configuration's `tx_service_group`.
    pub group: String,
}

/// [`ClientSetup`] from `file` (see [`live_discovery`]) and the `group` asked for.
pub async fn client_setup(
    file: Option<&std::path::Path>,
    group: Option<&str>,
) -> Result<ClientSetup, String> {
    let (live, discovery) = live_discovery(file).await?;
    let config = live.current();
    let group = group.map_or_else(|| config.tx_service_group.clone(), str::to_string);
    Ok(ClientSetup {
        live,
        config,
        discovery,
        group,
    })
}
