//! One endpoint's task: connect, handshake (or, without one, a PING answered: a frozen
//! process's kernel still accepts connections), join the alive set, and when the connection
//! dies, leave it at once and reconnect with jittered exponential backoff.
//!
//! The backoff starts again from its first delay only after a connection stayed up for
//! [`ClientOptions::stable_after`](super::ClientOptions::stable_after): a server that
//! accepts and hands the handshake, then drops every connection at once, is retried
//! with growing delays rather than every 50–100 ms forever.

use std::sync::Arc;
use std::time::Duration;

use meshline_registry_core::{Backoff, Instance, InstanceKey};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::alive::EndpointState;
use crate::client::options::ClientOptions;
use crate::codec::CODEC_SEATA;
use crate::connection::{ConnConfig, Connection, InboundHandler};
use crate::handshake::Handshake;
use crate::transport::CloseReason;

/// What an endpoint task tells the membership, in the order it happens.
pub(crate) enum Report<'a> {
    /// Connecting (or handshaking), for the first time or again.
    Connecting,
    /// Connected and answered (its handshake, or a PING): it joins the alive set.
    /// `again` when the task was connected before.
    Connected { conn: &'a Connection, again: bool },
    /// The connection is out of use (lost, draining, or the client shut down): it
    /// leaves the alive set, and the endpoint is in `state` now.
    Lost {
        conn: &'a Connection,
        state: EndpointState,
    },
    /// A connect or a handshake failed (`Down` or `Refused`); retried with backoff.
    Failed(EndpointState),
}

/// Where an endpoint task's reports go. The task knows nothing else of the
/// membership: the membership owns the slots and the alive set, and a report is how a
/// task's news reaches them.
pub(crate) trait Reports: Send + Sync + 'static {
    /// Applies a report of the task of `generation` for `key`. False when that task no
    /// longer owns the endpoint (it left the registry, or was listed again under a
    /// newer task): the task stops.
    fn report(&self, key: &InstanceKey, generation: u64, report: Report<'_>) -> bool;
}

/// How every endpoint task connects: the client's connection settings, its handshake
/// and inbound handler, and the client's shutdown.
pub(crate) struct Connector {
    connect_timeout: Duration,
    handshake_timeout: Duration,
    heartbeat: bool,
    backoff_initial: Duration,
    backoff_max: Duration,
    stable_after: Duration,
    drain_timeout: Duration,
    conn: ConnConfig,
    handshake: Option<Arc<dyn Handshake>>,
    inbound: Option<Arc<dyn InboundHandler>>,
    shutdown: CancellationToken,
}

impl Connector {
    pub fn new(
        o: &ClientOptions,
        handshake: Option<Arc<dyn Handshake>>,
        inbound: Option<Arc<dyn InboundHandler>>,
        shutdown: CancellationToken,
    ) -> Self {
        Connector {
            connect_timeout: o.connect_timeout,
            handshake_timeout: o.handshake_timeout,
            heartbeat: o.heartbeat,
            backoff_initial: o.backoff_initial,
            backoff_max: o.backoff_max,
            stable_after: o.stable_after,
            drain_timeout: o.drain_timeout,
            conn: ConnConfig {
                transport: o.transport.clone(),
                write_idle: o.heartbeat.then_some(o.write_idle),
                read_idle: o.heartbeat.then_some(o.read_idle),
                heartbeat_codec: CODEC_SEATA,
                probe: o.probe,
                on_close: None,
            },
            handshake,
            inbound,
            shutdown,
        }
    }
}

/// Waits until the endpoint is told to stop (`false`) or the sender is gone.
async fn stopped(cmd: &mut watch::Receiver<bool>) {
    while *cmd.borrow_and_update() {
        if cmd.changed().await.is_err() {
            return;
        }
    }
}

async fn connect_once(c: &Connector, instance: &Instance) -> Result<TcpStream, String> {
    let connect = TcpStream::connect((instance.host(), instance.port()));
    match tokio::time::timeout(c.connect_timeout, connect).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(format!("connect failed: {e}")),
        Err(_) => Err(format!("connect timed out after {:?}", c.connect_timeout)),
    }
}

/// How long the handshake may take: the client's setting, or the handshake's own longer
/// timeout plus a second, so the handshake reports its own (more precise) error first.
fn handshake_deadline(c: &Connector) -> Duration {
    let client = c.handshake_timeout;
    match c.handshake.as_ref().and_then(|h| h.timeout()) {
        Some(own) if own >= client => own.saturating_add(Duration::from_secs(1)),
        _ => client,
    }
}

async fn connect_and_handshake(
    c: &Connector,
    instance: &Instance,
    label: &str,
) -> Result<(Connection, JoinHandle<CloseReason>), EndpointState> {
    let stream = connect_once(c, instance)
        .await
        .map_err(EndpointState::Down)?;
    let (conn, task) =
        Connection::start(stream, c.conn.clone(), label.to_string(), c.inbound.clone())
            .map_err(|e| EndpointState::Down(format!("socket setup failed: {e}")))?;
    if let Some(h) = &c.handshake {
        let deadline = handshake_deadline(c);
        let r = tokio::time::timeout(deadline, h.handshake(&conn))
            .await
            .unwrap_or_else(|_| Err(format!("handshake timed out after {deadline:?}")));
        if let Err(reason) = r {
            conn.close_with(format!("handshake failed: {reason}"));
            let _ = task.await;
            return Err(EndpointState::Refused(reason));
        }
    } else if c.heartbeat {
        // Alive means answered: a kernel accepts connections for a process that is
        // frozen (SIGSTOP, a long pause), so a connect proves nothing. Without a
        // handshake, a PING answered is the first answer.
        let deadline = c.handshake_timeout;
        if let Err(e) = conn.ping(deadline).await {
            let reason = format!("connected, but no answer to a PING: {e}");
            conn.close_with(reason.clone());
            let _ = task.await;
            return Err(EndpointState::Down(reason));
        }
    }
    Ok((conn, task))
}

/// One endpoint's life, from its first connect until it is told to stop (drained) or
/// the client shuts down; every change goes to `reports`.
pub(crate) async fn endpoint_task(
    c: Arc<Connector>,
    reports: Arc<dyn Reports>,
    instance: Arc<Instance>,
    generation: u64,
    mut cmd: watch::Receiver<bool>,
) {
    let key = instance.key().clone();
    let report = |r: Report<'_>| reports.report(&key, generation, r);
    let label = instance.to_string();
    let mut backoff = Backoff::new(c.backoff_initial, c.backoff_max);
    let mut connected_before = false;
    loop {
        if !*cmd.borrow() || c.shutdown.is_cancelled() {
            break;
        }
        report(Report::Connecting);
        let attempt = tokio::select! {
            a = connect_and_handshake(&c, &instance, &label) => Some(a),
            _ = stopped(&mut cmd) => None,
            _ = c.shutdown.cancelled() => None,
        };
        let Some(attempt) = attempt else { break };
        match attempt {
            Ok((conn, mut task)) => {
                if connected_before {
                    tracing::info!(peer = %conn.peer(), "reconnected");
                } else {
                    tracing::info!(peer = %conn.peer(), "connected");
                }
                let again = std::mem::replace(&mut connected_before, true);
                if !report(Report::Connected { conn: &conn, again }) {
                    // Removed from the registry while we were connecting.
                    conn.close_with("endpoint removed from the registry");
                    let _ = task.await;
                    break;
                }
                // Tokio's clock, as the backoff's sleeps are: one clock for both.
                let up_since = tokio::time::Instant::now();
                tokio::select! {
                    reason = &mut task => {
                        let reason = reason
                            .map(|r| r.to_string())
                            .unwrap_or_else(|e| format!("connection task failed: {e}"));
                        tracing::warn!(%reason, "connection lost; leaving the alive set");
                        report(Report::Lost { conn: &conn, state: EndpointState::Down(reason) });
                        if up_since.elapsed() >= c.stable_after {
                            backoff.reset();
                        }
                    }
                    _ = stopped(&mut cmd) => {
                        report(Report::Lost { conn: &conn, state: EndpointState::Draining });
                        tokio::select! {
                            _ = conn.drain(c.drain_timeout) => {
                                tracing::info!("drained and closed");
                            }
                            _ = c.shutdown.cancelled() => {
                                conn.close_with("client shut down while draining");
                            }
                        }
                        let _ = task.await;
                        break;
                    }
                    _ = c.shutdown.cancelled() => {
                        let state = EndpointState::Down("client shut down".into());
                        report(Report::Lost { conn: &conn, state });
                        conn.close_with("client shut down");
                        let _ = task.await;
                        break;
                    }
                }
            }
            Err(state) => {
                match &state {
                    EndpointState::Refused(reason) => {
                        tracing::warn!(%reason, "handshake refused; endpoint not used");
                    }
                    EndpointState::Down(reason) => {
                        tracing::debug!(%reason, attempt = backoff.attempts(), "connect failed");
                    }
                    _ => {}
                }
                report(Report::Failed(state));
            }
        }
        let delay = backoff.next_delay();
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stopped(&mut cmd) => break,
            _ = c.shutdown.cancelled() => break,
        }
    }
}

#[cfg(test)]
mod tests {
    //! The task's schedule in tokio's paused time, where every delay is exact: the
    //! connects and drops are real loopback sockets (ready at once), the waits virtual.
    //! `rpc-client/tests/suite/client.rs` keeps the real-time test against a restarted server.

    use std::sync::Mutex;

    use tokio::time::Instant;

    use super::*;

    /// What the task reported, when (tokio's clock).
    #[derive(Default)]
    struct Log(Mutex<Vec<(Instant, &'static str)>>);

    impl Reports for Log {
        fn report(&self, _: &InstanceKey, _: u64, r: Report<'_>) -> bool {
            let kind = match r {
                Report::Connecting => "connecting",
                Report::Connected { .. } => "connected",
                Report::Lost { .. } => "lost",
                Report::Failed(_) => "failed",
            };
            self.0.lock().unwrap().push((Instant::now(), kind));
            true
        }
    }

    impl Log {
        /// The waits between each report of `after` and the next `connecting`.
        fn waits_after(&self, after: &str) -> Vec<Duration> {
            let log = self.0.lock().unwrap();
            log.windows(2)
                .filter(|w| w[0].1 == after && w[1].1 == "connecting")
                .map(|w| w[1].0 - w[0].0)
                .collect()
        }

        fn kinds(&self) -> Vec<&'static str> {
            self.0.lock().unwrap().iter().map(|(_, k)| *k).collect()
        }
    }

    /// Backoff 50 ms doubling to 400 ms, connections counted stable after 1 s, no
    /// heartbeat (its idle timers would be the only other clock in play).
    fn connector(shutdown: &CancellationToken) -> Arc<Connector> {
        let o = ClientOptions {
            backoff_initial: Duration::from_millis(50),
            backoff_max: Duration::from_millis(400),
            stable_after: Duration::from_secs(1),
            heartbeat: false,
            ..ClientOptions::default()
        };
        Arc::new(Connector::new(&o, None, None, shutdown.clone()))
    }

    /// Runs the task against `addr` for `for_` of virtual time, then shuts it down.
    async fn run(addr: std::net::SocketAddr, for_: Duration) -> Arc<Log> {
        let shutdown = CancellationToken::new();
        let log = Arc::new(Log::default());
        let instance = Arc::new(Instance::new("127.0.0.1", addr.port()).unwrap());
        let (_cmd, rx) = watch::channel(true);
        let task = tokio::spawn(endpoint_task(
            connector(&shutdown),
            log.clone(),
            instance,
            1,
            rx,
        ));
        tokio::time::sleep(for_).await;
        shutdown.cancel();
        task.await.unwrap();
        log
    }

    /// Wait `n` after a failure is drawn from `[d/2, d]`, `d` = 50 ms doubling to 400.
    fn assert_schedule(waits: &[Duration], first: u32) {
        for (i, w) in waits.iter().enumerate() {
            let d = Duration::from_millis(400)
                .min(Duration::from_millis(50) * 2u32.pow(first + i as u32));
            assert!(
                *w >= d / 2 && *w <= d,
                "wait {i}: {w:?}, not in [{:?}, {d:?}]",
                d / 2
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_port_is_retried_on_the_doubling_jittered_schedule() {
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let log = run(closed, Duration::from_secs(3)).await;
        let waits = log.waits_after("failed");
        // 25-50, 50-100, 100-200, 200-400, then 200-400 ms each: at least 9 in 3 s.
        assert!(waits.len() >= 9, "{waits:?}");
        assert_schedule(&waits, 0);
        // The connects fail at once (refused), not by their timeout.
        let log = log.0.lock().unwrap();
        for w in log.windows(2).filter(|w| w[0].1 == "connecting") {
            assert_eq!((w[1].1, w[1].0 - w[0].0), ("failed", Duration::ZERO));
        }
    }

    /// A server that accepts and drops every connection is retried with growing waits;
    /// a connection that stayed up for `stable_after` starts the schedule again.
    #[tokio::test(start_paused = true)]
    async fn only_a_connection_that_stayed_up_resets_the_backoff() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            for n in 0.. {
                let (s, _) = listener.accept().await.unwrap();
                // The fourth connection lives 1.1 s (past stable_after); the others
                // end at once.
                if n == 3 {
                    tokio::time::sleep(Duration::from_millis(1100)).await;
                }
                drop(s);
            }
        });
        let log = run(addr, Duration::from_secs(3)).await;
        let kinds = log.kinds();
        assert!(kinds.iter().all(|k| *k != "failed"), "{kinds:?}");
        let waits = log.waits_after("lost");
        assert!(waits.len() >= 6, "{waits:?}");
        // Three quick drops: 50, 100, 200 ms nominal.
        assert_schedule(&waits[..3], 0);
        // The fourth lived 1.1 s: back to 50 ms, and growing again from there.
        assert_schedule(&waits[3..], 0);
    }
}
