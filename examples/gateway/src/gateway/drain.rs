//! Graceful drain: take a gateway out of service without dropping its players.
//!
//! A drain ([`Gateway::drain`](super::Gateway::drain); the `gateway` program runs it on
//! SIGTERM / Ctrl-C or after `POST /drain` on the admin port) goes in this order:
//!
//! 1. `gateway_draining` is set to 1 and the gateway **unregisters** from the registry
//!    first, so whoever hands out gateway addresses (a login service, the client
//!    library's candidate list, a load balancer's health check) sends nobody new here;
//! 2. the listeners **stop accepting** (their sockets are closed: a new connection is
//!    refused by the kernel, not accepted and dropped);
//! 3. every connected client gets a **`RECONNECT` advice** frame (module 0, op 8,
//!    payload `drain.reason`; reliable). A client admitted while the drain runs (it was
//!    accepted just before) is advised too. With a shared session store the advice
//!    waits until the sessions' changes are written (a store that cannot be written
//!    holds it, up to the deadline): an advised client resumes elsewhere at once, and
//!    the other gateway finds its session only in the store. The connection keeps
//!    serving: requests already sent are answered here, and the client leaves at a
//!    quiet moment of its own, resuming its session on another gateway (see
//!    `crate::roaming`);
//! 4. the drain **waits** until at most `drain.threshold` clients are connected, or
//!    until `drain.deadline` has passed since it started;
//! 5. clients still connected are **closed**: a `KICK` frame (code 5, `DRAIN`) with
//!    the reason, then the connection ends (WebSocket close code 1001, "going away").
//!    Their sessions are kept (detached), so with the Redis session store they can
//!    still resume elsewhere;
//! 6. sessions are **flushed** to the store, so another gateway resumes them with their
//!    last bindings, groups and user state.
//!
//! The drain returns a [`DrainReport`]; the program then shuts down and exits 0.
//! The admin port's `POST /drain` only *asks* for a drain (the owner of the `Gateway`
//! runs it); the admin port has no authentication and must never be reachable from the
//! public network.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use meshline::{Instance, RegistryService};
use tokio_util::sync::CancellationToken;

use super::core::Shared;
use super::kick::Kick;
use super::protocol::{self, ClientFrame, GATEWAY_MODULE, op};
use super::session::Link;
use super::settings::{SettingsError, duration, err};

/// How often the drain counts the connections left (and advises new ones).
const POLL: Duration = Duration::from_millis(25);
/// After closing the rest, how long their connections get to end (so their sessions
/// are detached and written before the flush).
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// `gateway.drain.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainSettings {
    /// The drain is done when at most this many clients are still connected
    /// (`drain.threshold`, default 0: all of them left).
    pub threshold: usize,
    /// Clients still connected this long after the drain started are closed
    /// (`drain.deadline`, default 30 s).
    pub deadline: Duration,
    /// The payload of the `RECONNECT` advice and of the closing `KICK`
    /// (`drain.reason`, default `gateway draining`).
    pub reason: String,
}

impl Default for DrainSettings {
    fn default() -> Self {
        DrainSettings {
            threshold: 0,
            deadline: Duration::from_secs(30),
            reason: "gateway draining".into(),
        }
    }
}

impl DrainSettings {
    /// Sets `field` (the part of `key` after `drain.`) from `v`. Unknown fields are
    /// errors naming `key`.
    pub(crate) fn set(&mut self, key: &str, field: &str, v: &str) -> Result<(), SettingsError> {
        match field {
            "threshold" => {
                self.threshold = v
                    .parse()
                    .map_err(|e| err(key, format!("{e} (a connection count)")))?
            }
            "deadline" => self.deadline = duration(key, v)?,
            "reason" => {
                if v.is_empty() {
                    return Err(err(key, "the advice needs a reason"));
                }
                self.reason = v.to_string();
            }
            _ => return Err(err(key, "unknown drain setting")),
        }
        Ok(())
    }
}

/// What a drain did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainReport {
    /// Connections sent the `RECONNECT` advice.
    pub advised: usize,
    /// Connections closed at the deadline (still connected then, above the threshold).
    pub closed: usize,
    /// Connections left open (at most the threshold, when it was reached in time).
    pub remaining: usize,
    /// True when the threshold was reached before the deadline.
    pub in_time: bool,
    /// True when every session change reached the store.
    pub flushed: bool,
    /// How long the drain took.
    pub elapsed: Duration,
}

/// The drain's part of the gateway's shared state.
#[derive(Debug)]
pub(crate) struct DrainState {
    /// A drain was asked for (`POST /drain`).
    requested: CancellationToken,
    /// The listeners stop: the accept loops end and drop their sockets.
    stop_accepting: CancellationToken,
    /// A drain has started (a second call waits for nothing and reports nothing new).
    started: AtomicBool,
    /// The gateway unregistered while draining (shutdown need not do it again).
    unregistered: AtomicBool,
    gateway: String,
}

impl DrainState {
    /// Not draining; publishes `gateway_draining` = 0 for gateway `id`.
    pub(crate) fn new(id: &str) -> DrainState {
        metrics::gauge!("gateway_draining", "gateway" => id.to_string()).set(0.0);
        DrainState {
            requested: CancellationToken::new(),
            stop_accepting: CancellationToken::new(),
            started: AtomicBool::new(false),
            unregistered: AtomicBool::new(false),
            gateway: id.to_string(),
        }
    }

    /// Resolves when the listeners must stop accepting (an accept loop's `select!` arm).
    pub(crate) async fn accepting_stopped(&self) {
        self.stop_accepting.cancelled().await
    }

    /// Asks for a drain (what `POST /drain` does).
    pub(crate) fn request(&self) {
        self.requested.cancel();
    }

    /// Resolves once a drain was asked for.
    pub(crate) async fn requested(&self) {
        self.requested.cancelled().await
    }

    /// True once a drain has started.
    pub(crate) fn is_draining(&self) -> bool {
        self.started.load(Ordering::SeqCst)
    }

    /// True when the drain already unregistered the gateway.
    pub(crate) fn unregistered(&self) -> bool {
        self.unregistered.load(Ordering::SeqCst)
    }
}

/// The admin port's drain route: `POST /drain` asks for a drain (202); any other
/// method on `/drain` is refused (405). `None` for every other path.
pub(crate) fn admin_route(head: &[u8], drain: &CancellationToken) -> Option<Vec<u8>> {
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if target.split('?').next() != Some("/drain") {
        return None;
    }
    let (status, body) = if method == "POST" {
        let already = drain.is_cancelled();
        drain.cancel();
        tracing::info!(already, "drain requested on the admin port");
        (
            "202 Accepted",
            if already {
                "already draining\n"
            } else {
                "draining\n"
            },
        )
    } else {
        ("405 Method Not Allowed", "POST only\n")
    };
    Some(
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
             Cache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

/// The token `POST /drain` cancels (handed to the admin server).
pub(crate) fn request_token(shared: &Shared) -> CancellationToken {
    shared.drain.requested.clone()
}

fn advice(reason: &str) -> ClientFrame {
    ClientFrame::new(
        GATEWAY_MODULE,
        op::RECONNECT,
        0,
        Bytes::from(reason.to_string()),
    )
    .with_flags(protocol::RELIABLE)
}

/// The connected clients now, by session.
fn connected(shared: &Shared) -> Vec<(String, Arc<Link>)> {
    shared
        .sessions
        .members("*")
        .into_iter()
        .filter_map(|s| s.link().map(|l| (s.id.clone(), l)))
        .collect()
}

/// Runs the drain (see the module docs). `registered`: where the gateway registered.
pub(crate) async fn run(
    shared: &Shared,
    registry: &dyn RegistryService,
    registered: Option<&(String, Instance)>,
) -> DrainReport {
    let started = Instant::now();
    let settings = &shared.settings.drain;
    let gauge = metrics::gauge!("gateway_draining", "gateway" => shared.drain.gateway.clone());
    if shared.drain.started.swap(true, Ordering::SeqCst) {
        tracing::info!("drain already started; nothing more to do");
        return DrainReport {
            advised: 0,
            closed: 0,
            remaining: connected(shared).len(),
            in_time: false,
            flushed: true,
            elapsed: started.elapsed(),
        };
    }
    gauge.set(1.0);
    // 1. Nobody new is sent here.
    if let Some((cluster, inst)) = registered {
        match registry.unregister(cluster, inst).await {
            Ok(()) => shared.drain.unregistered.store(true, Ordering::SeqCst),
            Err(e) => tracing::warn!(error = %e, "draining: could not unregister"),
        }
    }
    // 2. Nobody new gets in.
    shared.drain.stop_accepting.cancel();
    tracing::info!(threshold = settings.threshold, deadline = ?settings.deadline, "draining");
    // 3 and 4. Advise everyone (and whoever is admitted meanwhile), wait for them to go.
    let deadline = tokio::time::Instant::now() + settings.deadline;
    let mut advised: HashMap<String, Weak<Link>> = HashMap::new();
    let mut count = 0;
    let mut held_for_store = false;
    let in_time = loop {
        let now = connected(shared);
        let new: Vec<_> = now
            .iter()
            .filter(|(id, link)| {
                !advised
                    .get(id)
                    .is_some_and(|w| w.upgrade().is_some_and(|l| Arc::ptr_eq(&l, link)))
            })
            .collect();
        // An advised client resumes elsewhere at once, and another gateway finds its
        // session only in the store: the advice waits until the session is written.
        if !new.is_empty() && shared.sessions.flush().await {
            for (id, link) in new {
                link.outbound.push(advice(&settings.reason));
                advised.insert(id.clone(), Arc::downgrade(link));
                count += 1;
            }
        } else if !new.is_empty() {
            held_for_store = true;
        }
        if now.len() <= settings.threshold {
            break true;
        }
        if tokio::time::Instant::now() >= deadline {
            break false;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline.min(tokio::time::Instant::now() + POLL)) => {}
            _ = shared.stop.cancelled() => break false,
        }
    };
    if held_for_store {
        tracing::warn!("draining: advice was held while the session store could not be written");
    }
    // 5. Close the rest (above the threshold: the deadline passed).
    let mut closed = 0;
    if !in_time {
        let rest = connected(shared);
        let reason = format!("{}: drain deadline passed", settings.reason);
        // The KICK is each queue's last frame: what is queued goes first, then it, then
        // the connection closes (a client that does not read is closed when its writer
        // gives up, see `serve`).
        for (_, link) in &rest {
            link.outbound.kick(Kick::Drain, &reason);
            closed += 1;
        }
        // Their read loops end, detaching (and marking) their sessions.
        let grace = tokio::time::Instant::now() + CLOSE_GRACE;
        while !connected(shared).is_empty() && tokio::time::Instant::now() < grace {
            tokio::time::sleep(POLL).await;
        }
    }
    // 6. The store has the last word on every session.
    let flushed = shared.sessions.flush().await;
    let report = DrainReport {
        advised: count,
        closed,
        remaining: connected(shared).len(),
        in_time,
        flushed,
        elapsed: started.elapsed(),
    };
    tracing::info!(?report, "drained");
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_and_name_the_key() {
        let mut d = DrainSettings::default();
        d.set("drain.threshold", "threshold", "3").unwrap();
        d.set("drain.deadline", "deadline", "1500ms").unwrap();
        d.set("drain.reason", "reason", "release 2.4").unwrap();
        assert_eq!(d.threshold, 3);
        assert_eq!(d.deadline, Duration::from_millis(1500));
        assert_eq!(d.reason, "release 2.4");
        for (field, v, want) in [
            ("threshold", "-1", "gateway.drain.threshold"),
            ("deadline", "30", "gateway.drain.deadline"),
            ("reason", "", "needs a reason"),
            ("colour", "red", "unknown drain setting"),
        ] {
            let key = format!("drain.{field}");
            let e = d.set(&key, field, v).unwrap_err().to_string();
            assert!(e.contains(want), "{field}={v}: {e}");
        }
    }

    #[test]
    fn the_admin_route_takes_a_post_only() {
        let t = CancellationToken::new();
        assert!(admin_route(b"GET /gateway.html HTTP/1.1\r\n\r\n", &t).is_none());
        let r = admin_route(b"GET /drain HTTP/1.1\r\n\r\n", &t).unwrap();
        assert!(r.starts_with(b"HTTP/1.1 405"));
        assert!(!t.is_cancelled());
        let r = admin_route(b"POST /drain HTTP/1.1\r\nContent-Length: 0\r\n\r\n", &t).unwrap();
        assert!(r.starts_with(b"HTTP/1.1 202"));
        assert!(t.is_cancelled());
        let r = admin_route(b"POST /drain HTTP/1.1\r\n\r\n", &t).unwrap();
        assert!(String::from_utf8_lossy(&r).ends_with("already draining\n"));
    }
}
