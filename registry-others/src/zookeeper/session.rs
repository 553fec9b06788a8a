//! The ZooKeeper session: building one (and, when that fails, probing the servers to
//! say why), and the session loop that follows its state, marks clusters stale or
//! connected, and replaces an expired session, creating our ephemeral nodes again.
//! Separate because sessions are this backend's recovery unit and their own task.

use std::sync::Arc;
use std::time::Duration;

use meshline_registry_core::probe::{ConnectFailure, probe_targets};
use meshline_registry_core::{Backoff, Instance, RegistryError};
use zookeeper_client as zk;

use super::{Inner, KIND, Settings};

/// Tries one TCP connection to each server of `connect_string` (without its chroot
/// suffix) and says what happened, e.g. `127.0.0.1:2181: Connection refused (os error
/// 111)`.
async fn probe_servers(connect_string: &str) -> String {
    // zookeeper-client reports a failed connect only as "no available hosts" or
    // "timeout" and keeps the I/O error ("Connection refused") to itself.
    probe_targets(
        targets(connect_string),
        "",
        "accepts TCP connections, but no ZooKeeper session was established",
    )
    .await
}

/// The `host:port` of each server of `connect_string` (without its chroot suffix).
fn targets(connect_string: &str) -> Vec<String> {
    let hosts = connect_string
        .split_once("://")
        .map_or(connect_string, |(_, rest)| rest);
    let hosts = hosts.split('/').next().unwrap_or_default();
    hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|host| match Instance::parse(host) {
            Ok(_) => host.to_string(),
            // No port: ZooKeeper's default.
            Err(_) => format!("{host}:2181"),
        })
        .collect()
}

/// The longest session or connect timeout given to the client library: what an i32
/// of milliseconds holds (about 24.8 days).
const MAX_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

pub(super) async fn new_session(s: &Settings) -> Result<zk::Client, RegistryError> {
    // The protocol carries the session timeout as i32 milliseconds, and the client
    // library multiplies it (`* 7 / 5`): a huge configured value must not panic there.
    let session_timeout = s.session_timeout.min(MAX_TIMEOUT);
    let connect_timeout = s.connect_timeout.min(MAX_TIMEOUT);
    let mut connector = zk::Client::connector()
        .with_session_timeout(session_timeout)
        .with_connection_timeout(connect_timeout)
        .with_detached();
    if let Some(auth) = &s.auth {
        connector = connector.with_auth("digest", auth);
    }
    #[cfg(feature = "zookeeper-tls")]
    let secure = match &s.tls {
        Some(m) => {
            connector = connector.with_tls(crate::tls::zookeeper_options(m)?);
            true
        }
        None => false,
    };
    #[cfg(not(feature = "zookeeper-tls"))]
    let secure = false;
    // Saturating: both come from the configuration (a huge value must not panic).
    let limit = session_timeout
        .checked_add(connect_timeout)
        .unwrap_or(Duration::MAX);
    let connecting = async {
        #[cfg(feature = "zookeeper-tls")]
        if secure {
            return connector.secure_connect(&s.connect_string).await;
        }
        #[cfg(not(feature = "zookeeper-tls"))]
        let _ = secure;
        connector.connect(&s.connect_string).await
    };
    let (what, source) = match tokio::time::timeout(limit, connecting).await {
        Ok(Ok(c)) => return Ok(c),
        Ok(Err(e)) => (e.to_string(), Some(Box::new(e) as _)),
        Err(_) => (format!("no session within {limit:?}"), None),
    };
    // Over TLS, the handshake's own outcome says why (the library keeps it to itself).
    #[cfg(feature = "zookeeper-tls")]
    let probe = match (&s.tls, secure) {
        (Some(m), true) => super::tls_probe::probe(&targets(&s.connect_string), m).await,
        _ => probe_servers(&s.connect_string).await,
    };
    #[cfg(not(feature = "zookeeper-tls"))]
    let probe = probe_servers(&s.connect_string).await;
    Err(RegistryError::backend(
        KIND,
        &s.connect_string,
        "connect",
        ConnectFailure {
            what,
            probe,
            source,
        },
    ))
}
/// Follows the session state: marks clusters stale / connected, and replaces an
/// expired session (re-creating our nodes).
pub(super) async fn session_loop(inner: Arc<Inner>) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        let client = inner.client();
        let mut states = client.state_watcher();
        loop {
            let state = tokio::select! {
                _ = inner.life.closed() => return,
                s = states.changed() => s,
            };
            match state {
                zk::SessionState::Disconnected => {
                    inner.life.hub().mark_all_stale("zookeeper connection lost");
                }
                zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                    inner.life.hub().mark_all_connected();
                }
                zk::SessionState::Expired
                | zk::SessionState::Closed
                | zk::SessionState::AuthFailed => {
                    tracing::warn!(
                        registry = KIND,
                        session = %client.session_id(),
                        ?state,
                        "zookeeper session ended; building a new one"
                    );
                    inner
                        .life
                        .hub()
                        .mark_all_stale(&format!("zookeeper session {state:?}"));
                    break;
                }
            }
        }
        // A new session, then our nodes again; watch loops re-arm on the generation bump.
        let fresh = loop {
            match new_session(&inner.settings).await {
                Ok(c) => break c,
                Err(e) => {
                    tracing::warn!(registry = KIND, error = %e, "cannot establish a zookeeper session; retrying");
                    let d = backoff.next_delay();
                    if !inner.life.sleep(d).await {
                        return;
                    }
                }
            }
        };
        backoff.reset();
        tracing::info!(registry = KIND, session = %fresh.session_id(), "new zookeeper session");
        inner.retire_session(client.session_id().0);
        *inner.client.write().unwrap_or_else(|p| p.into_inner()) = fresh.clone();
        inner.generation.send_modify(|g| *g += 1);
        for (path, ()) in inner.registered.snapshot().await {
            let mut attempt = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
            loop {
                if !inner.registered.contains(&path).await {
                    break;
                }
                match inner.create_ephemeral(&fresh, &path).await {
                    Ok(()) => {
                        tracing::info!(registry = KIND, path, "re-registered after session loss");
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(registry = KIND, path, error = %e, "re-registering failed; retrying");
                        if fresh.state().is_terminated() {
                            break;
                        }
                        let d = attempt.next_delay();
                        if !inner.life.sleep(d).await {
                            return;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session timeout near `Duration::MAX` is an error naming the
    /// server, not an overflow panic in `session_timeout + connect_timeout`.
    #[tokio::test]
    async fn huge_timeouts_do_not_overflow() {
        let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = dead.local_addr().unwrap().to_string();
        drop(dead);
        let s = Settings {
            connect_string: addr.clone(),
            session_timeout: Duration::MAX,
            connect_timeout: Duration::from_millis(200),
            auth: None,
            tls: None,
        };
        let connecting = tokio::spawn(async move { new_session(&s).await.map(|_| ()) });
        let got = tokio::time::timeout(Duration::from_secs(5), connecting).await;
        match got {
            Ok(Ok(r)) => assert!(r.unwrap_err().to_string().contains(&addr)),
            Ok(Err(join)) => panic!("connect panicked: {join}"),
            // Still trying (the library retries within the session timeout): no panic.
            Err(_) => {}
        }
    }
}
