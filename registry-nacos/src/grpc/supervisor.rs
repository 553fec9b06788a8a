//! The client's life: connect to a server, redo what the client registered and
//! subscribed to, check the connection, and move to the next server when it dies
//! (see [`super::client`] for the rules).

use std::sync::Arc;
use std::time::Duration;

use super::VERIFY_PERIOD;
use super::conn::{Conn, OPEN_TIMEOUT, PushFn, Setup};
use super::server::Server;
use super::shared::{Shared, State};

/// How often a live connection is checked.
pub const HEALTH_PERIOD: Duration = Duration::from_secs(2);
/// How long one health check may go unanswered.
pub const HEALTH_TIMEOUT: Duration = Duration::from_millis(1500);
/// How many health checks in a row may go unanswered before the connection is left
/// (the next is sent as soon as one times out). A server silent from just after a
/// check is so left `HEALTH_PERIOD + HEALTH_TRIES x HEALTH_TIMEOUT` (5 s) later at
/// most; one that stalls for less than 3 s (a GC pause) is kept.
pub const HEALTH_TRIES: u32 = 2;

/// The longest wait between two rounds of failed connects.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The client's life: connect, redo, watch the connection, move on when it dies.
pub(super) async fn run(shared: Arc<Shared>) {
    let n = shared.servers.len();
    let mut round = Round::at(fastrand::usize(..n));
    let setup = Setup {
        namespace: shared.namespace.clone(),
        app_name: shared.app_name.clone(),
    };
    let weak = Arc::downgrade(&shared);
    let push: PushFn = Arc::new(move |info| {
        if let Some(s) = weak.upgrade() {
            s.deliver(&info);
        }
    });
    loop {
        let server = shared.servers[round.at].clone();
        let opened = tokio::select! {
            _ = shared.stop.cancelled() => break,
            r = async {
                shared.auth.refresh(&server).await;
                tokio::time::timeout(OPEN_TIMEOUT, Conn::open(&server, &setup, shared.auth.headers("", ""), push.clone())).await
            } => r,
        };
        let conn = match opened {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => {
                round.failed(&shared, &server, e.to_string()).await;
                continue;
            }
            Err(_) => {
                let e = format!("not connected within {OPEN_TIMEOUT:?}");
                round.failed(&shared, &server, e).await;
                continue;
            }
        };
        let redone = tokio::select! {
            _ = shared.stop.cancelled() => break,
            r = tokio::time::timeout(OPEN_TIMEOUT, shared.redo(&conn)) => r,
        };
        match redone {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                conn.kill(format!("redo failed: {e}"));
                round
                    .failed(&shared, &server, format!("redoing the registrations: {e}"))
                    .await;
                continue;
            }
            Err(_) => {
                conn.kill("redo timed out".into());
                let e = format!("redoing the registrations took over {OPEN_TIMEOUT:?}");
                round.failed(&shared, &server, e).await;
                continue;
            }
        }
        tracing::info!(registry = "nacos", server = %server, connection = %conn.id, "connected");
        shared.state.send_replace(State::Up(conn.clone()));
        round = Round::at(round.at);
        let why = tokio::select! {
            _ = shared.stop.cancelled() => None,
            why = watch_health(&shared, &conn) => Some(why),
        };
        shared.state.send_replace(State::Connecting);
        conn.kill(why.clone().unwrap_or_else(|| "client closed".into()));
        drop(conn);
        let Some(why) = why else { break };
        tracing::warn!(registry = "nacos", server = %server, reason = %why, "connection lost; moving to the next server");
        round.at = (round.at + 1) % n;
    }
    shared.state.send_replace(State::Closed);
}

/// Returns why `conn` died: its stream ended, a request failed on it, or a health
/// check went unanswered.
async fn watch_health(shared: &Shared, conn: &Conn) -> String {
    let mut unanswered = 0;
    let mut verified = tokio::time::Instant::now();
    loop {
        // After an unanswered check the next goes at once: a server that stalls for
        // less than `HEALTH_TRIES` x `HEALTH_TIMEOUT` (a GC pause) is kept, so it does
        // not cost every registration on it a flap; a silent one is left soon after.
        let wait = if unanswered == 0 {
            HEALTH_PERIOD
        } else {
            Duration::ZERO
        };
        tokio::select! {
            _ = conn.dead() => return conn.why(),
            _ = tokio::time::sleep(wait) => {}
        }
        shared.auth.refresh(&conn.server).await;
        match tokio::time::timeout(HEALTH_TIMEOUT, conn.health_check()).await {
            Ok(Ok(())) => {
                unanswered = 0;
                if verified.elapsed() >= VERIFY_PERIOD {
                    verified = tokio::time::Instant::now();
                    // Bounded like a request; a failure here is the health check's
                    // to judge, not a reason to leave.
                    match tokio::time::timeout(OPEN_TIMEOUT, shared.verify(conn)).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => {
                            tracing::debug!(registry = "nacos", server = %conn.server, error = %e, "checking what the server lists failed")
                        }
                        Err(_) => {
                            tracing::debug!(registry = "nacos", server = %conn.server, "checking what the server lists took too long")
                        }
                    }
                }
            }
            Ok(Err(e)) => return format!("health check failed: {e}"),
            Err(_) => {
                unanswered += 1;
                if unanswered >= HEALTH_TRIES {
                    return format!(
                        "no answer to {HEALTH_TRIES} health checks in a row, {HEALTH_TIMEOUT:?} each"
                    );
                }
                tracing::debug!(registry = "nacos", server = %conn.server, "a health check went unanswered; asking again");
            }
        }
    }
}

/// Where the client is in its list of servers, and how its failures go.
struct Round {
    /// The server to try next.
    at: usize,
    /// Failures since the last success or the last full round.
    failed: usize,
    /// The wait after the next full round of failures.
    backoff: Duration,
    /// A full round of failures was logged at `WARN` (the next are logged at debug
    /// level, so a cluster that is down does not fill the log).
    warned: bool,
}

impl Round {
    /// A fresh round starting at server `at`.
    fn at(at: usize) -> Round {
        Round {
            at,
            failed: 0,
            backoff: Duration::from_millis(100),
            warned: false,
        }
    }

    /// Records a failed connect to `server` and moves to the next; after a whole
    /// round, publishes the error and waits.
    async fn failed(&mut self, shared: &Shared, server: &Server, error: String) {
        tracing::debug!(registry = "nacos", server = %server, error = %error, "connect failed");
        self.at = (self.at + 1) % shared.servers.len();
        self.failed += 1;
        if self.failed < shared.servers.len() {
            return;
        }
        self.failed = 0;
        if self.warned {
            tracing::debug!(registry = "nacos", server = %server, error = %error, "still no Nacos server answers");
        } else {
            tracing::warn!(registry = "nacos", server = %server, error = %error, "no Nacos server answers; retrying every {:?} at most", MAX_BACKOFF);
            self.warned = true;
        }
        shared
            .state
            .send_replace(State::Down(format!("{server}: {error}")));
        tokio::select! {
            _ = shared.stop.cancelled() => {}
            _ = tokio::time::sleep(self.backoff) => {}
        }
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }
}
