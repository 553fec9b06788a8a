//! One endpoint's task: connect, handshake (or, without one, a PING answered: a frozen
//! process's kernel still accepts connections), join the alive set, and when the connection
//! dies, leave it at once and reconnect with jittered exponential backoff.
//!
//! The backoff starts again from its first delay only after a connection stayed up for
//! [`ClientOptions::stable_after`](super::ClientOptions::stable_after): a server that
//! accepts and hands the handshake, then drops every connection at once, is retried
//! with growing delays rather than every 50–100 ms forever.

use std::sync::Arc;
use std::time::{Duration, Instant};

use meshline_registry_core::{Backoff, Instance};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::alive::EndpointState;
use super::membership::Inner;
use super::metrics::Counter;
use crate::connection::Connection;
use crate::transport::CloseReason;

/// Waits until the endpoint is told to stop (`false`) or the sender is gone.
async fn stopped(cmd: &mut watch::Receiver<bool>) {
    while *cmd.borrow_and_update() {
        if cmd.changed().await.is_err() {
            return;
        }
    }
}

async fn connect_once(inner: &Inner, instance: &Instance) -> Result<TcpStream, String> {
    let connect = TcpStream::connect((instance.host(), instance.port()));
    match tokio::time::timeout(inner.options.connect_timeout, connect).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(format!("connect failed: {e}")),
        Err(_) => Err(format!(
            "connect timed out after {:?}",
            inner.options.connect_timeout
        )),
    }
}

/// How long the handshake may take: the client's setting, or the handshake's own longer
/// timeout plus a second, so the handshake reports its own (more precise) error first.
fn handshake_deadline(inner: &Inner) -> Duration {
    let client = inner.options.handshake_timeout;
    match inner.handshake.as_ref().and_then(|h| h.timeout()) {
        Some(own) if own >= client => own.saturating_add(Duration::from_secs(1)),
        _ => client,
    }
}

async fn connect_and_handshake(
    inner: &Inner,
    instance: &Instance,
    label: &str,
) -> Result<(Connection, JoinHandle<CloseReason>), EndpointState> {
    let stream = connect_once(inner, instance)
        .await
        .map_err(EndpointState::Down)?;
    let (conn, task) = Connection::start(
        stream,
        inner.conn_config(),
        label.to_string(),
        inner.inbound.clone(),
    )
    .map_err(|e| EndpointState::Down(format!("socket setup failed: {e}")))?;
    if let Some(h) = &inner.handshake {
        let deadline = handshake_deadline(inner);
        let r = tokio::time::timeout(deadline, h.handshake(&conn))
            .await
            .unwrap_or_else(|_| Err(format!("handshake timed out after {deadline:?}")));
        if let Err(reason) = r {
            conn.close_with(format!("handshake failed: {reason}"));
            let _ = task.await;
            return Err(EndpointState::Refused(reason));
        }
    } else if inner.options.heartbeat {
        // Alive means answered: a kernel accepts connections for a process that is
        // frozen (SIGSTOP, a long pause), so a connect proves nothing. Without a
        // handshake, a PING answered is the first answer.
        let deadline = inner.options.handshake_timeout;
        if let Err(e) = conn.ping(deadline).await {
            let reason = format!("connected, but no answer to a PING: {e}");
            conn.close_with(reason.clone());
            let _ = task.await;
            return Err(EndpointState::Down(reason));
        }
    }
    Ok((conn, task))
}

pub(crate) async fn endpoint_task(
    inner: Arc<Inner>,
    instance: Arc<Instance>,
    generation: u64,
    mut cmd: watch::Receiver<bool>,
) {
    let key = instance.key().clone();
    let label = instance.to_string();
    let mut backoff = Backoff::new(inner.options.backoff_initial, inner.options.backoff_max);
    let mut connected_before = false;
    loop {
        if !*cmd.borrow() || inner.shutdown.is_cancelled() {
            break;
        }
        inner.set_state(&key, generation, EndpointState::Connecting);
        let attempt = tokio::select! {
            a = connect_and_handshake(&inner, &instance, &label) => Some(a),
            _ = stopped(&mut cmd) => None,
            _ = inner.shutdown.cancelled() => None,
        };
        let Some(attempt) = attempt else { break };
        match attempt {
            Ok((conn, mut task)) => {
                inner.count(Counter::Connects);
                if connected_before {
                    inner.count(Counter::Reconnects);
                    tracing::info!(peer = %conn.peer(), "reconnected");
                } else {
                    tracing::info!(peer = %conn.peer(), "connected");
                }
                connected_before = true;
                if !inner.mark_alive(&key, generation, &conn) {
                    // Removed from the registry while we were connecting.
                    conn.close_with("endpoint removed from the registry");
                    let _ = task.await;
                    break;
                }
                let up_since = Instant::now();
                tokio::select! {
                    reason = &mut task => {
                        let reason = reason
                            .map(|r| r.to_string())
                            .unwrap_or_else(|e| format!("connection task failed: {e}"));
                        tracing::warn!(%reason, "connection lost; leaving the alive set");
                        inner.mark_dead(&key, generation, &conn, EndpointState::Down(reason));
                        if up_since.elapsed() >= inner.options.stable_after {
                            backoff.reset();
                        }
                    }
                    _ = stopped(&mut cmd) => {
                        inner.mark_dead(&key, generation, &conn, EndpointState::Draining);
                        tokio::select! {
                            _ = conn.drain(inner.options.drain_timeout) => {
                                tracing::info!("drained and closed");
                            }
                            _ = inner.shutdown.cancelled() => {
                                conn.close_with("client shut down while draining");
                            }
                        }
                        let _ = task.await;
                        break;
                    }
                    _ = inner.shutdown.cancelled() => {
                        inner.mark_dead(
                            &key,
                            generation,
                            &conn,
                            EndpointState::Down("client shut down".into()),
                        );
                        conn.close_with("client shut down");
                        let _ = task.await;
                        break;
                    }
                }
            }
            Err(state) => {
                match &state {
                    EndpointState::Refused(reason) => {
                        inner.count(Counter::HandshakeFailures);
                        tracing::warn!(%reason, "handshake refused; endpoint not used");
                    }
                    EndpointState::Down(reason) => {
                        inner.count(Counter::ConnectFailures);
                        tracing::debug!(%reason, attempt = backoff.attempts(), "connect failed");
                    }
                    _ => {}
                }
                inner.set_state(&key, generation, state);
            }
        }
        let delay = backoff.next_delay();
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stopped(&mut cmd) => break,
            _ = inner.shutdown.cancelled() => break,
        }
    }
}
