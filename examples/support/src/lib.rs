//! # meshline-example-support
//!
//! What every example program does the same way, whichever example it belongs to (the
//! in-memory TC's programs, the game gateway's): logging set up from `MESHLINE_LOG`
//! with the secret-bearing targets silenced, and waiting for the signal to stop.

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
